"""The GGUF header check (_check_layout, _walk_header): every count, length, type, dimension and
offset of a header checked against the bytes left in the file, with llama.cpp's limits
(ggml/src/gguf.cpp), before anything is read. gpt/gguf/container.py's GgufFile opens a file through it."""

import dataclasses
import math
import mmap
import os
import struct
from typing import NoReturn

from gpt.errors import ModelFileError
from gpt.gguf_tokenizer import MAX_TOKEN_BYTES, MAX_VOCABULARY_BYTES, token_too_long, vocabulary_too_large

# -- the header check ---------------------------------------------------------------------------
# gguf's GGUFReader believes every count and length in a header: it loops over a declared array
# length (an array of 2^50 u32 in a 46-byte file runs for ever, growing memory), and reports a
# corrupt header as numpy's IndexError. The walk below checks each count, length, type, dimension
# and offset against the bytes left in the file (as llama.cpp's ggml/src/gguf.cpp reads it, with
# its limits), and records where each metadata value and tensor lies, so that GgufFile reads only
# a header whose work is bounded by the file.

_GGUF_MAGIC = b"GGUF"
_GGUF_VERSIONS = (2, 3)  # what GGUFReader and llama.cpp read (version 1 had 32-bit counts)
# GGUF metadata value types: id -> (llama.cpp's name, bytes) of the fixed-size ones; strings are a
# u64 length and the bytes, arrays a u32 element type, a u64 count and the elements.
_VALUE_TYPES = {
    0: ("u8", 1),
    1: ("i8", 1),
    2: ("u16", 2),
    3: ("i16", 2),
    4: ("u32", 4),
    5: ("i32", 4),
    6: ("f32", 4),
    7: ("bool", 1),
    10: ("u64", 8),
    11: ("i64", 8),
    12: ("f64", 8),
}
_STRING, _ARRAY, _U32 = 8, 9, 4
# The vocabulary's key, whose strings the walk bounds (_LayoutWalker.strings).
_TOKENS = "tokenizer.ggml.tokens"
# The fewest bytes a string and an array take (its length; its type and length).
_MIN_STRING, _MIN_ARRAY = 8, 12
# Fewest bytes of a metadata entry (key length, a 1-byte key, type, 1-byte value) and of a tensor
# description (name length, a 1-byte name, dimension count, type, offset).
_MIN_KV, _MIN_TENSOR_INFO = 8 + 1 + 4 + 1, 8 + 1 + 4 + 4 + 8
# llama.cpp's limits: GGML_MAX_DIMS, GGML_MAX_NAME (with its NUL), GGUF_MAX_STRING_LENGTH.
_MAX_DIMS = 4
_MAX_NAME_BYTES = 63
_MAX_STRING_BYTES = 1 << 30
_INT64_MAX = (1 << 63) - 1
# Arrays of arrays: llama.cpp refuses them, gguf flattens them; a few levels are read.
_MAX_ARRAY_DEPTH = 4
# Metadata array elements in a whole file: the count bounds the walk's time and a reader's memory
# (gguf's GGUFReader makes numpy views per element, about 1 KB and 10 us each). Tokenizer
# arrays are per token (tokens, token types, scores) or fewer (merges: GPT-2's 50,000 for 50,257
# tokens; Llama 3's 280,147 for 128,256), so a file gets 4 per row of token_embd.weight and some
# slack, and never more than 2^20 (Gemma 3's 262,144 tokens, types and scores are 786,432).
_MAX_ARRAY_ELEMENTS = 1 << 20
_ARRAY_ELEMENTS_PER_TOKEN = 4
_ARRAY_ELEMENTS_SLACK = 1 << 15


@dataclasses.dataclass(frozen=True)
class _TensorInfo:
    name: str
    ne: tuple[int, ...]
    type_name: str
    offset: int
    nbytes: int


class _LayoutWalker:
    """Reads a GGUF header from a memory map, every read checked against the bytes left."""

    def __init__(self, path: str, data, size: int):
        self.path, self.data, self.size = path, data, size
        self.position = 0
        self.array_elements = 0

    def fail(self, problem: str) -> NoReturn:
        raise ModelFileError(f"{self.path} is not a readable GGUF file: {problem}")

    def need(self, nbytes: int, what: str, at_least: bool = False, plural: bool = False) -> None:
        left = self.size - self.position
        if nbytes > left:
            self.fail(
                f"{what} {'need' if plural else 'needs'}{' at least' if at_least else ''} {_bytes(nbytes)}, the "
                f"file has {left} of its {self.size} bytes left at offset {self.position}"
            )

    def number(self, fmt: str, what: str) -> int:
        nbytes = struct.calcsize(fmt)
        self.need(nbytes, what)
        (value,) = struct.unpack_from(fmt, self.data, self.position)
        self.position += nbytes
        return value

    def string(self, what: str) -> bytes:
        length = self.number("<Q", f"{what}'s length")
        if length > _MAX_STRING_BYTES:
            self.fail(f"{what} is a string of {_count(length)} bytes, more than GGUF's limit of 1 GiB")
        self.need(length, f"{what}: a string of {_count(length)} bytes")
        start = self.position
        self.position += length
        return self.data[start : self.position]

    def text(self, what: str) -> str:
        raw = self.string(what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.fail(f"{what} is not UTF-8: {raw[:64]!r}")

    def value(self, value_type: int, what: str, depth: int = 0) -> None:
        """Skips one metadata value of `value_type`, checking its lengths and element types."""
        if value_type in _VALUE_TYPES:
            self.need(_VALUE_TYPES[value_type][1], f"{what}: a {_VALUE_TYPES[value_type][0]}")
            self.position += _VALUE_TYPES[value_type][1]
        elif value_type == _STRING:
            self.string(what)
        elif value_type == _ARRAY:
            if depth == _MAX_ARRAY_DEPTH:
                self.fail(f"{what} nests arrays more than {_MAX_ARRAY_DEPTH} deep")
            element_type = self.number("<I", f"{what}: the array's element type")
            count = self.number("<Q", f"{what}: the array's length")
            if element_type in _VALUE_TYPES:
                name, element_bytes = _VALUE_TYPES[element_type]
            elif element_type in (_STRING, _ARRAY):
                name, element_bytes = ("string", _MIN_STRING) if element_type == _STRING else ("array", _MIN_ARRAY)
            else:
                self.fail(f"{what} is an array of type id {element_type}, which is not a GGUF value type (0 to 12)")
            # A count the rest of the file cannot hold is refused before anything loops over it;
            # nested arrays take their bytes from the same budget.
            variable = element_type in (_STRING, _ARRAY)
            self.need(count * element_bytes, f"{what}: {_count(count)} {name} elements", variable, plural=True)
            self.array_elements += count
            if self.array_elements > _MAX_ARRAY_ELEMENTS:
                self.fail(
                    f"{what}: the metadata arrays hold {self.array_elements} elements so far, more than the "
                    f"{_MAX_ARRAY_ELEMENTS} this loader reads (GPT-2's vocabulary and merges are 150,514)"
                )
            if element_type in _VALUE_TYPES:
                self.position += count * element_bytes
            elif element_type == _STRING:
                self.strings(count, what)
            else:
                for i in range(count):
                    self.value(_ARRAY, f"{what}[{i}]", depth + 1)
        else:
            self.fail(f"{what} has type id {value_type}, which is not a GGUF value type (0 to 12)")

    def strings(self, count: int, what: str) -> None:
        """Skips an array of `count` strings (a vocabulary: the loop is kept lean). The vocabulary,
        tokenizer.ggml.tokens, is held to gguf_tokenizer's bounds on a token's and the whole
        vocabulary's bytes here, before any of its strings is decoded (read_vocabulary checks
        them again for any reader)."""
        data, size, position = self.data, self.size, self.position
        unpack = struct.Struct("<Q").unpack_from
        vocabulary = what == f"metadata key {_TOKENS!r}"
        longest = MAX_TOKEN_BYTES if vocabulary else _MAX_STRING_BYTES
        start = position
        for i in range(count):
            if size - position < _MIN_STRING:
                self.position = position
                self.need(_MIN_STRING, f"{what}[{i}]'s length")
            (length,) = unpack(data, position)
            position += _MIN_STRING
            if length > size - position:
                self.position = position
                self.need(length, f"{what}[{i}]: a string of {_count(length)} bytes")
            if length > longest:
                raise ModelFileError(token_too_long(self.path, i, length))
            position += length
            # Text bytes (the 8-byte lengths left out), checked as the walk goes: the token that passes is named.
            if vocabulary and position - start - _MIN_STRING * (i + 1) > MAX_VOCABULARY_BYTES:
                raise ModelFileError(vocabulary_too_large(self.path, i))
        self.position = position


def _check_layout(path: str) -> "list[_TensorInfo]":
    """Walks the GGUF header of `path` (magic, version, counts, every metadata key and value, every
    tensor's name, dimensions, type and offset) and raises ModelFileError at the first count,
    length, type, dimension or offset that does not fit the file, in GGUF's terms; returns the
    tensor descriptions. Reads nothing beyond the header, and no more of it than the file holds."""
    size = _checked_size(path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return _walk_header(path, data, size).tensors


def _checked_size(path: str) -> int:
    size = os.path.getsize(path)
    if size < 4:
        raise ModelFileError(f"{path} is not a readable GGUF file: {size} bytes, too short for GGUF's magic")
    return size


@dataclasses.dataclass(frozen=True)
class _Header:
    tensors: "list[_TensorInfo]"
    fields: dict[str, tuple[int, int]]  # metadata key -> (value type, file offset of its value)
    data_start: int  # file offset of the tensor data


def _walk_header(path: str, data, size: int) -> _Header:
    """_check_layout's walk over the header in `data` (a map of the whole file)."""
    walker = _LayoutWalker(path, data, size)
    if data[:4] != _GGUF_MAGIC:
        walker.fail(f"it starts with {data[:4]!r}, not GGUF's magic {_GGUF_MAGIC!r}")
    walker.position = 4
    version = walker.number("<I", "the version")
    if version & 0xFFFF == 0:
        walker.fail(f"version {version:#x}: a file of the other byte order (big-endian), which is not supported")
    if version not in _GGUF_VERSIONS:
        walker.fail(f"version {version}; versions {_GGUF_VERSIONS[0]} and {_GGUF_VERSIONS[1]} are read")
    n_tensors = walker.number("<Q", "the tensor count")
    n_kv = walker.number("<Q", "the metadata key count")
    walker.need(n_kv * _MIN_KV, f"{_count(n_kv)} metadata keys", at_least=True, plural=True)
    fields, alignment = _walk_metadata(walker, data, n_kv)

    walker.need(n_tensors * _MIN_TENSOR_INFO, f"{_count(n_tensors)} tensor descriptions", at_least=True, plural=True)
    tensors: list[_TensorInfo] = []
    names: set[str] = set()
    for i in range(n_tensors):
        tensors.append(_walk_tensor_info(walker, i, names))
    # Tensor data starts at the next multiple of the alignment.
    data_start = -(-walker.position // alignment) * alignment
    _check_tensor_offsets(walker, tensors, data_start, alignment, size)
    _check_array_budget(path, walker, tensors)
    return _Header(tensors, fields, data_start)


def _walk_metadata(walker: _LayoutWalker, data, n_kv: int) -> tuple[dict[str, tuple[int, int]], int]:
    """The metadata keys' (value type, file offset of the value), and the alignment they set."""
    import gguf

    alignment = gguf.GGUF_DEFAULT_ALIGNMENT
    fields: dict[str, tuple[int, int]] = {}
    for i in range(n_kv):
        key = walker.text(f"metadata key {i}'s name")
        if not key:
            walker.fail(f"metadata key {i} has an empty name")
        if key in fields:
            walker.fail(f"metadata key {key!r} appears twice")
        value_type = walker.number("<I", f"metadata key {key!r}'s type")
        start = walker.position
        fields[key] = (value_type, start)
        walker.value(value_type, f"metadata key {key!r}")
        if key == "general.alignment":
            if value_type != _U32:
                walker.fail(f"metadata key 'general.alignment' has type id {value_type}, expected u32 ({_U32})")
            (alignment,) = struct.unpack_from("<I", data, start)
            if alignment == 0 or alignment & (alignment - 1):
                walker.fail(f"metadata key 'general.alignment' is {alignment}, expected a power of 2")
    return fields, alignment


def _walk_tensor_info(walker: _LayoutWalker, i: int, names: set[str]) -> _TensorInfo:
    """Tensor `i`'s description (its name added to `names`, the names seen so far)."""
    import gguf

    name = walker.text(f"tensor {i}'s name")
    if len(name.encode("utf-8")) > _MAX_NAME_BYTES:
        walker.fail(f"tensor {i}'s name {name[:80]!r} is longer than GGUF's {_MAX_NAME_BYTES} bytes")
    if name in names:
        walker.fail(f"tensor {name!r} appears twice")
    names.add(name)
    n_dims = walker.number("<I", f"tensor {name!r}'s dimension count")
    if n_dims > _MAX_DIMS:
        walker.fail(f"tensor {name!r} has {n_dims} dimensions, GGUF allows at most {_MAX_DIMS}")
    ne = tuple(walker.number("<Q", f"tensor {name!r}'s dimension {d}") for d in range(n_dims))
    if any(n > _INT64_MAX for n in ne):
        walker.fail(f"tensor {name!r} has dimensions {list(ne)}: ggml's are int64, so these are negative")
    elements = math.prod(ne)
    if elements > _INT64_MAX:
        walker.fail(f"tensor {name!r} has dimensions {list(ne)}, {elements} elements: more than int64 counts")
    type_id = walker.number("<I", f"tensor {name!r}'s type")
    try:
        qtype = gguf.GGMLQuantizationType(type_id)
    except ValueError:
        walker.fail(f"tensor {name!r} has type id {type_id}, which is not a ggml type gguf reads")
    block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    row = ne[0] if ne else 1
    if row % block:
        walker.fail(
            f"tensor {name!r} of type {qtype.name} has rows of {row} values, not a multiple of its block of {block}"
        )
    offset = walker.number("<Q", f"tensor {name!r}'s offset")
    return _TensorInfo(name, ne, qtype.name, offset, elements // block * block_bytes)


def _check_tensor_offsets(
    walker: _LayoutWalker, tensors: list[_TensorInfo], data_start: int, alignment: int, size: int
) -> None:
    """The tensors lie in order from `data_start`, each padded to the alignment (llama.cpp's rule:
    "tensor has offset X, expected Y"), and within the file's `size` bytes."""
    expected = 0
    for tensor in tensors:
        if tensor.offset != expected:
            walker.fail(
                f"tensor {tensor.name!r} is at offset {tensor.offset} of the data, expected {expected} (tensors "
                f"lie in order, each padded to the alignment of {alignment} bytes)"
            )
        end = data_start + tensor.offset + tensor.nbytes
        if end > size:
            walker.fail(
                f"tensor {tensor.name!r} ({tensor.type_name}, ne {list(tensor.ne)}) needs {_bytes(tensor.nbytes)} "
                f"from file offset {data_start + tensor.offset}, past the end of the file ({size} bytes)"
            )
        expected += -(-tensor.nbytes // alignment) * alignment


def _check_array_budget(path: str, walker: _LayoutWalker, tensors: list[_TensorInfo]) -> None:
    """The work of reading metadata arrays, bounded by the vocabulary the file really holds."""
    embedding = next((t for t in tensors if t.name == "token_embd.weight"), None)
    rows = embedding.ne[1] if embedding is not None and len(embedding.ne) == 2 else 0
    allowed = _ARRAY_ELEMENTS_PER_TOKEN * rows + _ARRAY_ELEMENTS_SLACK
    if walker.array_elements > allowed and embedding is None:
        # Every model this loader reads has the tensor: its absence, not the arrays, is the problem.
        raise ModelFileError(
            f"{path}: tensor token_embd.weight is missing (its rows bound the metadata arrays, which hold "
            f"{walker.array_elements} elements; {allowed} are read without it)"
        )
    if walker.array_elements > allowed:
        walker.fail(
            f"its metadata arrays hold {walker.array_elements} elements, more than the {allowed} read for "
            f"token_embd.weight's {rows} rows ({_ARRAY_ELEMENTS_PER_TOKEN} per row, for tokenizer data, and "
            f"{_ARRAY_ELEMENTS_SLACK} more)"
        )


def _bytes(n: int) -> str:
    """A byte count as people read it: 46 bytes, 4 PiB, 1.5 GiB."""
    if n < 1024:
        return f"{n} bytes"
    for exponent, unit in enumerate(("KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"), start=1):
        value = n / 1024**exponent
        if value < 1024 or unit == "YiB":
            return f"{value:.0f} {unit}" if n % 1024**exponent == 0 else f"{value:.1f} {unit}"
    raise AssertionError  # the loop returns


def _count(n: int) -> str:
    """A count, as a power of two when it is one (hostile headers use those): 2^50."""
    return f"2^{n.bit_length() - 1}" if n >= 1 << 16 and n & (n - 1) == 0 else str(n)
