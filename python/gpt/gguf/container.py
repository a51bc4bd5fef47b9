"""The GGUF container: GgufFile (the header checked against the file before anything is read, by
gpt/gguf/layout.py; views of the file's memory map), typed metadata
access (_Metadata), and the blocks' dequantization and scale checks. Architecture-free: the readers
for GPT-2 (gpt/gguf_file.py) and the Llama family (gpt/gguf_llama.py) import it, never the reverse."""

import dataclasses
import mmap
import os
import struct
from typing import Any

import numpy as np

from gpt import _gpt
from gpt.errors import ModelFileError
from gpt.gguf.layout import _MIN_ARRAY, _MIN_STRING, _STRING, _checked_size, _TensorInfo, _walk_header
from gpt.kept_formats import FORMAT_ROWS, KEPT_QUANTIZED


def _types():
    import gguf

    t = gguf.GGMLQuantizationType
    return {"f16": t.F16, **{row.name: t[row.name.upper()] for row in FORMAT_ROWS}}


# -- reading ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class QuantizedTensor:
    """A weight as llama.cpp quantized it: `blocks` (uint8) holds the GGUF tensor's rows, in
    torch's [out, in] layout, each a run of blocks of `format` (a kept format's GGUF type, laid out
    as _gpt.gguf_block_types gives it)."""

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


# The quantized types whose rows the compiler's kernels widen to float32 (_gpt.dequantize_rows):
# gguf's values bit for bit (test_kquant_dequantize), without gguf.quants' per-group numpy passes
# (SmolLM2-1.7B's Q6_K token embedding: 1.5 s in gguf.quants on 2 cores, 0.1 s here); and each
# block's fp16 fields by name and byte offset. Their codes are bounded integers, so the values are
# finite exactly when these are (65504 * 127 * 32 is far from float32's limit): checking them reads
# a few bytes per block, not the float32 result (400 MB for SmolLM2-1.7B's).
_BLOCK_TYPES = {name.upper(): (nbytes, halves) for name, _values, nbytes, halves in _gpt.gguf_block_types()}


def _non_finite_fp16(blocks: np.ndarray, type_name: str) -> tuple[int, str, np.float16] | None:
    """The first block (over all rows; uint8 [..., row bytes]) with a NaN or infinite fp16 field,
    its field and value, or None: a bit test over a uint16 view (block sizes and offsets are even)."""
    block_bytes, fields = _BLOCK_TYPES[type_name]
    halves = np.ascontiguousarray(blocks).reshape(-1).view("<u2").reshape(-1, block_bytes // 2)
    for field, offset in fields.items():
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
    type_name = tensor.tensor_type.name
    if tensor.tensor_type == gguf.GGMLQuantizationType.F32:
        values = np.array(tensor.data, dtype=np.float32)  # a copy out of the memory map
    elif type_name in _BLOCK_TYPES:
        # The compiler's own kernels (cc/kernels/formats/): gguf's values, bit for bit
        # (test_gguf, test_kquant_dequantize), without gguf.quants' numpy temporaries (SmolLM2's
        # tensors in f32, this function with its finiteness check: 1.0 -> 0.28 s).
        blocks = np.asarray(tensor.data, dtype=np.uint8)
        values = _gpt.dequantize_rows(type_name.lower(), blocks)
        if _fp16_fields_finite(blocks, type_name):
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
