"""The GGUF container: GgufFile (the header checked against the file before anything is read, its
limits as llama.cpp's ggml/src/gguf.cpp sets them, views of the file's memory map), typed metadata
access (_Metadata), and the blocks' dequantization and scale checks. Architecture-free: the readers
for GPT-2 (gpt/gguf_file.py) and the Llama family (gpt/gguf_llama.py) import it, never the reverse."""

import dataclasses
import math
import mmap
import os
import struct
from typing import Any, NoReturn

import numpy as np

from gpt import _gpt
from gpt.errors import ModelFileError
from gpt.gguf_tokenizer import MAX_TOKEN_BYTES, MAX_VOCABULARY_BYTES, token_too_long, vocabulary_too_large
from gpt.kept_formats import FORMAT_ROWS, KEPT_QUANTIZED


def _types():
    import gguf

    t = gguf.GGMLQuantizationType
    return {"f16": t.F16, **{row.name: t[row.name.upper()] for row in FORMAT_ROWS}}


# -- reading ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class QuantizedTensor:
    """A weight as llama.cpp quantized it: `blocks` (uint8) holds the GGUF tensor's rows, in
    torch's [out, in] layout, each a run of q8_0, q4_0 or q4_1 blocks (an fp16 scale, q4_1's fp16
    min, then the codes)."""

    format: str
    blocks: np.ndarray


@dataclasses.dataclass(frozen=True)
class GgufTensor:
    """A tensor of a GgufFile, described as gguf.GGUFReader describes it. `shape` is ggml's ne
    (fastest-varying first); `data` is a read-only view of the file's memory map: the values of an
    F32, F16, F64 or integer tensor in numpy order (ne reversed), and for every other type the raw
    blocks, [rows..., bytes per row] (gguf.quants.quant_shape_to_byte_shape)."""

    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    shape: tuple[int, ...]
    data: np.ndarray


# Tensor types whose data is viewed as values rather than bytes, as GGUFReader views them.
_ELEMENT_TYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "F64": np.float64,
    "I8": np.int8,
    "I16": np.int16,
    "I32": np.int32,
    "I64": np.int64,
}
# Metadata value types with a numpy dtype (GGUF is little-endian; bool is one byte).
_VALUE_DTYPES = {
    0: "<u1",
    1: "<i1",
    2: "<u2",
    3: "<i2",
    4: "<u4",
    5: "<i4",
    6: "<f4",
    7: "?",
    10: "<u8",
    11: "<i8",
    12: "<f8",
}


class GgufFile:
    """A GGUF file opened for loading: what gguf.GGUFReader gives (`get_field(key).contents()`,
    `tensors`), from the walk that checks the header against the file (_check_layout's): metadata
    values are parsed when asked for, tensors are views of one read-only memory map, which stays
    open while the file or any tensor's data lives. GGUFReader parses every value up front, with
    numpy views per element: 0.68 s of SmolLM2's 0.9 s load went to its 98,000 vocabulary and merge
    strings, of which the walk takes 0.03 s. Raises ModelFileError for a header the walk refuses."""

    byte_order = "I"  # the walk refuses big-endian files

    def __init__(self, path: str):
        size = _checked_size(path)
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            header = _walk_header(path, self._map, size)
        except BaseException:
            self._map.close()
            raise
        self._fields = header.fields
        whole = np.frombuffer(self._map, dtype=np.uint8)
        self.tensors = [_tensor_view(whole, info, header.data_start) for info in header.tensors]

    def get_field(self, key: str) -> "_Field | None":
        entry = self._fields.get(key)
        return None if entry is None else _Field(self._map, *entry)


class _Field:
    """A metadata value of a GgufFile, parsed by contents() as GGUFReader's ReaderField.contents()
    gives it: an int, float, bool or str, or a list of them (nested arrays flattened).
    A string that is not UTF-8 raises UnicodeDecodeError."""

    def __init__(self, data, value_type: int, position: int):
        self._data, self._type, self._position = data, value_type, position

    def contents(self):
        return _read_value(self._data, self._type, self._position)[0]


def _read_value(data, value_type: int, position: int):
    """(the value of `value_type` at `position` of `data`, the position after it), in a header the
    walk has checked: every length and count fits the file."""
    if value_type in _VALUE_DTYPES:
        dtype = np.dtype(_VALUE_DTYPES[value_type])
        return np.frombuffer(data, dtype, 1, position).tolist()[0], position + dtype.itemsize
    if value_type == _STRING:
        (length,) = struct.unpack_from("<Q", data, position)
        position += _MIN_STRING
        return str(data[position : position + length], "utf-8"), position + length
    element_type, count = struct.unpack_from("<IQ", data, position)
    position += _MIN_ARRAY
    if element_type in _VALUE_DTYPES:
        dtype = np.dtype(_VALUE_DTYPES[element_type])
        return np.frombuffer(data, dtype, count, position).tolist(), position + count * dtype.itemsize
    values = []
    if element_type == _STRING:  # a vocabulary: the loop is kept lean
        unpack = struct.Struct("<Q").unpack_from
        for _ in range(count):
            (length,) = unpack(data, position)
            position += _MIN_STRING
            values.append(str(data[position : position + length], "utf-8"))
            position += length
        return values, position
    for _ in range(count):  # arrays of arrays: their elements, flattened (no key this loader reads nests)
        value, position = _read_value(data, element_type, position)
        values.extend(value)
    return values, position


def _tensor_view(whole: np.ndarray, info: "_TensorInfo", data_start: int) -> GgufTensor:
    import gguf

    tensor_type = gguf.GGMLQuantizationType[info.type_name]
    start = data_start + info.offset
    raw = whole[start : start + info.nbytes]
    dims = tuple(reversed(info.ne))
    element = _ELEMENT_TYPES.get(info.type_name)
    if element is not None:
        data = raw.view(element).reshape(dims)
    else:
        data = raw.reshape(gguf.quants.quant_shape_to_byte_shape(dims, tensor_type))
    return GgufTensor(info.name, tensor_type, info.ne, data)


class _Metadata:
    """Typed access to the key-value metadata of a GgufFile (or a gguf.GGUFReader), with errors
    naming the file and key."""

    def __init__(self, reader, path: str):
        self._reader = reader
        self._path = path

    def get(self, key: str, kind: type, required: bool = True, per_layer: bool = False):
        """The value of `key` as `kind` (int, float, str or list); None when absent and not
        required. `per_layer`: an int that may also be stored as one value per layer, accepted
        when all layers agree."""
        field = self._reader.get_field(key)
        if field is None:
            if required:
                raise ModelFileError(f"{self._path}: metadata key {key} is missing")
            return None
        try:
            value = field.contents()
        except Exception as e:  # a malformed value, such as a string that is not UTF-8
            raise ModelFileError(f"{self._path}: metadata key {key} cannot be read: {type(e).__name__}: {e}") from None
        if per_layer and isinstance(value, list) and value and len(set(value)) == 1:
            value = value[0]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            shown = repr(value)
            shown = shown if len(shown) <= 200 else f"{shown[:200]}... ({len(shown)} characters)"
            raise ModelFileError(f"{self._path}: metadata key {key} is {shown}, expected {kind.__name__}")
        return value


def _open_gguf(path) -> tuple[str, "GgufFile", "_Metadata", str]:
    """(the path as a str, its reader, its metadata, general.architecture) of the GGUF file at
    `path`; FileNotFoundError when there is none, ModelFileError for a header that does not fit the
    file (GgufFile checks every count and length against it) or has no architecture."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such GGUF file: {path}")
    reader = GgufFile(path)
    meta = _Metadata(reader, path)
    return path, reader, meta, meta.get("general.architecture", str)


def _vocab_size(meta: "_Metadata", tensors, path: str, arch: str, n_embd: int) -> int:
    """The vocabulary: token_embd.weight's rows (its ne must be [n_embd, vocab]), which
    `arch`.vocab_size must equal when the file declares it."""
    if "token_embd.weight" not in tensors:
        raise ModelFileError(f"{path}: tensor token_embd.weight is missing")
    embd_ne = [int(n) for n in tensors["token_embd.weight"].shape]
    if len(embd_ne) != 2 or embd_ne[0] != n_embd:
        raise ModelFileError(f"{path}: tensor token_embd.weight has ne {embd_ne}, expected [{n_embd}, vocab]")
    vocab_size = embd_ne[1]
    declared_vocab = meta.get(f"{arch}.vocab_size", int, required=False)
    if declared_vocab is not None and declared_vocab != vocab_size:
        raise ModelFileError(
            f"{path}: {arch}.vocab_size {declared_vocab} differs from token_embd.weight's {vocab_size} rows"
        )
    return vocab_size


def _norm_epsilon(eps: float, key: str, path: str) -> float:
    """The norms' epsilon from metadata key `key` as llama.cpp reads it, a float32 (a float64 one is
    rounded), given as its shortest decimal (1e-5 reads back as 1e-5); ModelFileError unless it is
    positive and finite."""
    with np.errstate(over="ignore"):
        eps32 = np.float32(eps)
    if not (np.isfinite(eps32) and eps32 > 0):
        raise ModelFileError(f"{path}: {key} is {eps!r}, expected a positive finite float32")
    return float(str(eps32))


def _check_tensor_names(path: str, tensors, expected, also_allowed: tuple[str, ...], model: str) -> None:
    """Raises ModelFileError naming the first tensors of `expected` (names) missing from `tensors`,
    or the first of `tensors` that are neither expected nor `also_allowed`, for a `model` file."""
    missing = [name for name in expected if name not in tensors]
    if missing:
        raise ModelFileError(
            f"{path}: tensor(s) missing: {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else "")
        )
    unexpected = sorted(name for name in tensors if name not in expected and name not in also_allowed)
    if unexpected:
        raise ModelFileError(f"{path}: unexpected tensor(s) for {model}: {', '.join(unexpected[:5])}")


def _check_ne(tensor, shape: tuple[int, ...], path: str) -> None:
    ne = [int(n) for n in tensor.shape]
    if ne != list(shape[::-1]):
        raise ModelFileError(f"{path}: tensor {tensor.name} has ne {ne}, expected {list(shape[::-1])}")


# The quantized types whose rows the compiler's kernels widen to float32 (gpt._gpt): gguf's
# values bit for bit (test_kquant_dequantize), without gguf.quants' per-group numpy passes
# (SmolLM2-1.7B's Q6_K token embedding: 1.5 s in gguf.quants on 2 cores, 0.1 s here).
_ROW_DEQUANTIZERS = {
    "Q8_0": "dequantize_q8_0_rows",
    "Q4_0": "dequantize_q4_0_rows",
    "Q4_1": "dequantize_q4_1_rows",
    "Q5_0": "dequantize_q5_0_rows",
    "Q5_1": "dequantize_q5_1_rows",
    "Q4_K": "dequantize_q4_k_rows",
    "Q5_K": "dequantize_q5_k_rows",
    "Q6_K": "dequantize_q6_k_rows",
}
# Byte offsets of each of those blocks' fp16 fields by name. Their codes are bounded integers, so
# the values are finite exactly when these are (65504 * 127 * 32 is far from float32's limit):
# checking them reads a few bytes per block, not the float32 result (400 MB for SmolLM2-1.7B's).
_FP16_FIELDS = {
    "Q8_0": {"scale": 0},
    "Q4_0": {"scale": 0},
    "Q4_1": {"scale": 0, "min": 2},
    "Q5_0": {"scale": 0},
    "Q5_1": {"scale": 0, "min": 2},
    "Q4_K": {"d": 0, "dmin": 2},
    "Q5_K": {"d": 0, "dmin": 2},
    "Q6_K": {"d": 208},
}


def _non_finite_fp16(blocks: np.ndarray, type_name: str) -> tuple[int, str, np.float16] | None:
    """The first block (over all rows; uint8 [..., row bytes]) with a NaN or infinite fp16 field,
    its field and value, or None: a bit test over a uint16 view (block sizes and offsets are even)."""
    import gguf

    block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]][1]
    halves = np.ascontiguousarray(blocks).reshape(-1).view("<u2").reshape(-1, block_bytes // 2)
    for field, offset in _FP16_FIELDS[type_name].items():
        bad = (halves[:, offset // 2] & 0x7C00) == 0x7C00
        if bad.any():
            index = int(np.argmax(bad))
            return index, field, halves[index, offset // 2 : offset // 2 + 1].view("<f2")[0]
    return None


def _fp16_fields_finite(blocks: np.ndarray, type_name: str) -> bool:
    """Whether every fp16 field of these rows of blocks (uint8 [..., row bytes]) is finite."""
    return _non_finite_fp16(blocks, type_name) is None


def _dequantize(tensor, shape: tuple[int, ...], path: str) -> np.ndarray:
    """A GGUF tensor as a float32 array of numpy shape `shape`, checked against its type and ne."""
    import gguf

    _check_ne(tensor, shape, path)
    kernel = _ROW_DEQUANTIZERS.get(tensor.tensor_type.name)
    if tensor.tensor_type == gguf.GGMLQuantizationType.F32:
        values = np.array(tensor.data, dtype=np.float32)  # a copy out of the memory map
    elif kernel is not None:
        # The compiler's own kernel (cc/kernels/GgufRepacking.cpp): gguf's values, bit for bit
        # (test_gguf, test_kquant_dequantize), without gguf.quants' numpy temporaries (SmolLM2's
        # tensors in f32, this function with its finiteness check: 1.0 -> 0.28 s).
        blocks = np.asarray(tensor.data, dtype=np.uint8)
        values = getattr(_gpt, kernel)(blocks)
        if _fp16_fields_finite(blocks, tensor.tensor_type.name):
            return values.reshape(shape)
    else:
        # Any type gguf can dequantize: beyond the formats the compiler stores, the k-quants and
        # others llama-quantize writes (a q4_0 GPT-2 from llama-quantize has a Q6_K token_embd).
        try:
            with np.errstate(all="ignore"):  # a NaN or infinite scale: refused by name below
                values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        except NotImplementedError:
            raise ModelFileError(
                f"{path}: tensor {tensor.name} has type {tensor.tensor_type.name}, which this loader does not read "
                f"(gguf cannot dequantize it; F32, F16, BF16 and llama.cpp's quantized types such as "
                f"{', '.join(name.upper() for name in KEPT_QUANTIZED)}, Q5_0 or Q6_K are read)"
            ) from None
    values = np.ascontiguousarray(values, dtype=np.float32).reshape(shape)
    finite = np.isfinite(values)
    if not finite.all():
        where = np.unravel_index(int(np.argmin(finite)), shape)
        raise ModelFileError(
            f"{path}: tensor {tensor.name} ({tensor.tensor_type.name}) holds {values[where]} at index "
            f"{list(map(int, where))} (numpy order); weights must be finite"
        )
    return values


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
