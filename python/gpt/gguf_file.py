"""GGUF, llama.cpp's model file format, for GPT-2: `load_gguf` reads a file for GPT.from_gguf,
`save_gguf` writes one as llama.cpp's converter (convert_hf_to_gguf.py, architecture "gpt2") and
`llama-quantize --pure` write them, so that llama.cpp can run the same weights. Writing goes
through the `gguf` package (llama.cpp's own Python library): GGUFWriter for the container,
gguf.quants for the block formats. Reading goes through GgufFile: the walk that checks a header
against the file, which also records where each value lies, and views of the file's memory map;
it gives what gguf's GGUFReader gives (tested against it) without parsing every value up front.

Names and layout. The model takes HF GPT-2 parameter names; llama.cpp's converter renames them
(transformer.h.N.attn.c_attn.weight -> blk.N.attn_qkv.weight, ...; `tensor_names`) and transposes
the four matmul weights from HF's Conv1D layout [in, out] to torch Linear layout [out, in]. GGUF
records a tensor's dimensions fastest-varying first (ggml's ne), so those weights have
ne = [in, out] and gguf's numpy view of them is [out, in]; quantization blocks (32 values) run
along ne[0], the input dimension K, the same axis the compiler's q8_0 and q4_0 formats block along.
The embeddings are [vocab, n_embd] and [n_ctx, n_embd] (numpy order) in both.

Which tensors a file of each format quantizes (as llama.cpp writes them): the token embedding and
the matmul weights are in the file's format; the position embedding, LayerNorm parameters and
biases stay F32."""

import dataclasses
import json
import math
import mmap
import os
import struct
from collections.abc import Mapping
from typing import Any, NoReturn

import numpy as np

from gpt import _gpt
from gpt.config import GPTConfig
from gpt.errors import ModelFileError
from gpt.gguf_tokenizer import (
    MAX_TOKEN_BYTES,
    MAX_VOCABULARY_BYTES,
    read_vocabulary,
    token_too_long,
    vocabulary_too_large,
)
from gpt.kept_formats import KEPT_QUANTIZED  # the formats kept as blocks (CompileOptions.weights)
from gpt.resources import check_fits_in_memory
from gpt.tokenizer import HFTokenizer
from gpt.weights import expected_shapes, validate_weights

ARCHITECTURE = "gpt2"
# Formats save_gguf writes, named as llama.cpp names them; from_gguf reads tensors of these types.
FORMATS = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1")
# The GGUF names of the model-level tensors and of block N's, with their HF GPT-2 names and
# whether llama.cpp stores them transposed ([out, in] instead of Conv1D's [in, out]).
_MODEL_TENSORS = (
    ("token_embd.weight", "transformer.wte.weight", False),
    ("position_embd.weight", "transformer.wpe.weight", False),
)
_BLOCK_TENSORS = (
    ("attn_norm.weight", "ln_1.weight", False),
    ("attn_norm.bias", "ln_1.bias", False),
    ("attn_qkv.weight", "attn.c_attn.weight", True),
    ("attn_qkv.bias", "attn.c_attn.bias", False),
    ("attn_output.weight", "attn.c_proj.weight", True),
    ("attn_output.bias", "attn.c_proj.bias", False),
    ("ffn_norm.weight", "ln_2.weight", False),
    ("ffn_norm.bias", "ln_2.bias", False),
    ("ffn_up.weight", "mlp.c_fc.weight", True),
    ("ffn_up.bias", "mlp.c_fc.bias", False),
    ("ffn_down.weight", "mlp.c_proj.weight", True),
    ("ffn_down.bias", "mlp.c_proj.bias", False),
)
_FINAL_TENSORS = (
    ("output_norm.weight", "transformer.ln_f.weight", False),
    ("output_norm.bias", "transformer.ln_f.bias", False),
)
# The LM head. GPT-2 ties it to the token embedding; llama.cpp's converter does not write it (the
# loader then uses token_embd), older converters wrote a copy.
_OUTPUT = "output.weight"
# Tokenizer models that mean "no vocabulary" to llama.cpp.
_NO_VOCABULARY = ("none", "no_vocab")


def tensor_names(n_layer: int) -> dict[str, tuple[str, bool]]:
    """GGUF tensor name -> (HF GPT-2 name, stored transposed), for every tensor of a GPT-2 file
    except the optional output.weight, in the order save_gguf writes them."""
    names = {gguf: (hf, transposed) for gguf, hf, transposed in _MODEL_TENSORS}
    for layer in range(n_layer):
        for gguf, hf, transposed in _BLOCK_TENSORS:
            names[f"blk.{layer}.{gguf}"] = (f"transformer.h.{layer}.{hf}", transposed)
    names.update({gguf: (hf, transposed) for gguf, hf, transposed in _FINAL_TENSORS})
    return names


def _types():
    import gguf

    t = gguf.GGMLQuantizationType
    return {"f32": t.F32, "f16": t.F16, "bf16": t.BF16, "q8_0": t.Q8_0, "q4_0": t.Q4_0, "q4_1": t.Q4_1}


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


def native_weights_format(path) -> str:
    """The CompileOptions.weights to run a GGUF file in as it is stored, as llama.cpp does: the type
    of most of its layers' matmul weights (by element count) when the compiler keeps that format
    (F32, BF16, Q8_0, Q4_0, Q4_1); F16 runs in f32 (the compiler has no f16 format), and Q5_0,
    Q5_1 and the k-quants in q8_0, the kept format nearest above them in precision. "f32" for a
    file it cannot read: loading it then raises the error that names the problem."""
    try:
        tensors = _check_layout(os.fspath(path))  # the header's tensor descriptions, no metadata parse
    except Exception:
        return "f32"
    elements: dict[str, int] = {}
    for tensor in tensors:
        if tensor.name.startswith("blk.") and len(tensor.ne) == 2:
            name = tensor.type_name.lower()
            elements[name] = elements.get(name, 0) + math.prod(tensor.ne)
    if not elements:
        return "f32"
    stored = max(elements, key=elements.get)
    if stored in KEPT_QUANTIZED or stored in ("f32", "bf16"):
        return stored
    return "f32" if stored == "f16" else "q8_0"


def load_gguf(
    path, keep_quantized: str | None = None
) -> tuple[GPTConfig, dict[str, np.ndarray | QuantizedTensor], HFTokenizer | None]:
    """Reads a GPT-2 GGUF file into (GPTConfig, float32 weights by HF name, tokenizer or None).
    A `llama`, `qwen2` or `phi3` file is read by gpt.gguf_llama.read instead (HF names).

    Hyperparameters come from the metadata (gpt2.block_count, gpt2.context_length,
    gpt2.embedding_length, gpt2.attention.head_count, gpt2.attention.layer_norm_epsilon), the
    vocabulary size from token_embd's shape. Every tensor is dequantized to float32 with gguf's own
    gguf.quants.dequantize and put back in HF's layout. The tokenizer is built when the file
    carries GPT-2's (tokenizer.ggml.model "gpt2": byte-level BPE from tokenizer.ggml.tokens and
    tokenizer.ggml.merges). With `keep_quantized` ("q8_0", "q4_0" or "q4_1"), the matmul weights stored in
    that type (and, for q8_0, the token embedding) are returned as QuantizedTensor instead, their
    blocks copied out of the file as they are (after checking that every block's scale is finite).

    Raises FileNotFoundError for a missing file, MemoryError for hyperparameters that would not fit
    in memory, and gpt.ModelFileError (a ValueError) naming the file and the key or tensor for
    anything else: a header whose counts, lengths, types, dimensions or offsets do not fit the
    file (checked before gguf reads it: _check_layout), another architecture, a missing or
    misshapen tensor, a tensor type gguf cannot dequantize, NaN or infinity in a tensor or a block
    scale, an output.weight unlike token_embd.weight (an untied LM head), hyperparameters this model
    cannot take, tokenizer data that does not make a tokenizer."""

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such GGUF file: {path}")
    reader = GgufFile(path)  # checks every count and length in the header against the file
    meta = _Metadata(reader, path)
    architecture = meta.get("general.architecture", str)
    if architecture in ("llama", "qwen2", "phi3"):  # the Llama family: gpt/gguf_llama.py (which imports this module)
        from gpt import gguf_llama

        return gguf_llama.read(reader, meta, path, architecture, keep_quantized)
    if architecture != ARCHITECTURE:
        raise ModelFileError(
            f"{path}: general.architecture {architecture!r} is not supported ('gpt2', 'llama' and 'qwen2' are read)"
        )
    if keep_quantized == "auto":  # GPT-2 keeps one format: the one most of its layers are stored in
        keep_quantized = native_weights_format(path)
    n_layer = meta.get("gpt2.block_count", int)
    n_ctx = meta.get("gpt2.context_length", int)
    n_embd = meta.get("gpt2.embedding_length", int)
    n_head = meta.get("gpt2.attention.head_count", int, per_layer=True)
    eps = meta.get("gpt2.attention.layer_norm_epsilon", float)
    # Keys that would change the computation, when present: only GPT-2's values are implemented.
    n_ff = meta.get("gpt2.feed_forward_length", int, required=False, per_layer=True)
    if n_ff is not None and n_ff != 4 * n_embd:
        raise ModelFileError(
            f"{path}: gpt2.feed_forward_length {n_ff} is not supported (only 4 * n_embd = {4 * n_embd})"
        )
    n_head_kv = meta.get("gpt2.attention.head_count_kv", int, required=False, per_layer=True)
    if n_head_kv is not None and n_head_kv != n_head:
        raise ModelFileError(f"{path}: gpt2.attention.head_count_kv {n_head_kv} differs from head_count {n_head}")

    tensors = {tensor.name: tensor for tensor in reader.tensors}
    if "token_embd.weight" not in tensors:
        raise ModelFileError(f"{path}: tensor token_embd.weight is missing")
    embd_ne = [int(n) for n in tensors["token_embd.weight"].shape]
    if len(embd_ne) != 2 or embd_ne[0] != n_embd:
        raise ModelFileError(f"{path}: tensor token_embd.weight has ne {embd_ne}, expected [{n_embd}, vocab]")
    vocab_size = embd_ne[1]
    declared_vocab = meta.get("gpt2.vocab_size", int, required=False)
    if declared_vocab is not None and declared_vocab != vocab_size:
        raise ModelFileError(
            f"{path}: gpt2.vocab_size {declared_vocab} differs from token_embd.weight's {vocab_size} rows"
        )
    with np.errstate(over="ignore"):
        eps32 = np.float32(eps)  # the file holds a float32 (a float64 one is rounded as llama.cpp reads it)
    if not (np.isfinite(eps32) and eps32 > 0):
        raise ModelFileError(
            f"{path}: gpt2.attention.layer_norm_epsilon is {eps!r}, expected a positive finite float32"
        )
    try:
        config = GPTConfig(
            n_layer=n_layer,
            n_head=n_head,
            n_embd=n_embd,
            vocab_size=vocab_size,
            block_size=n_ctx,
            # Its shortest decimal, so that 1e-5 reads back as 1e-5.
            layer_norm_eps=float(str(eps32)),
        )
    except ValueError as e:
        raise ModelFileError(f"{path}: {e}") from None
    # Before dequantizing for a header that asks too much: the weights this load holds (the cache is
    # checked by the model, at the context it is asked for).
    kept = keep_quantized in KEPT_QUANTIZED
    check_fits_in_memory(config, keep_quantized if kept else "f32", kept_quantized=kept, loading=True)

    names = tensor_names(n_layer)
    missing = [name for name in names if name not in tensors]
    if missing:
        raise ModelFileError(
            f"{path}: tensor(s) missing: {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else "")
        )
    unexpected = sorted(name for name in tensors if name not in names and name != _OUTPUT)
    if unexpected:
        raise ModelFileError(f"{path}: unexpected tensor(s) for GPT-2: {', '.join(unexpected[:5])}")
    shapes = _gguf_shapes(config)
    weights = {}
    kept_type = _types()[keep_quantized] if keep_quantized in KEPT_QUANTIZED else None
    for name, (hf_name, transposed) in names.items():
        tensor = tensors[name]
        # Matmul weights are stored transposed ([out, in], blocks along in = K); the embedding's
        # rows [vocab, n_embd] are the LM head's columns, blocks along n_embd = K too. A q4_0 or
        # q4_1 model stores its embedding in q8_0, so a 4-bit one is dequantized.
        keep = tensor.tensor_type == kept_type and (
            transposed or (name == "token_embd.weight" and kept_type == _types()["q8_0"])
        )
        if keep:
            _check_ne(tensor, shapes[name], path)
            blocks = np.array(tensor.data, dtype=np.uint8)
            # The compiled model multiplies by these scales as they are: one NaN makes every logit NaN.
            _check_block_scales(name, blocks, keep_quantized, path)
            weights[hf_name] = QuantizedTensor(keep_quantized, blocks)
            continue
        array = _dequantize(tensor, shapes[name], path)
        weights[hf_name] = np.ascontiguousarray(array.T) if transposed else array
    if _OUTPUT in tensors:
        embedding, output = tensors["token_embd.weight"], tensors[_OUTPUT]
        if isinstance(weights["transformer.wte.weight"], QuantizedTensor):
            _check_ne(output, shapes["token_embd.weight"], path)
            tied = output.tensor_type == embedding.tensor_type and np.array_equal(
                np.asarray(output.data), np.asarray(embedding.data)
            )
        else:
            tied = np.array_equal(
                _dequantize(output, shapes["token_embd.weight"], path), weights["transformer.wte.weight"]
            )
        if not tied:
            raise ModelFileError(
                f"{path}: output.weight differs from token_embd.weight (an untied LM head is not supported)"
            )
    tokenizer = _read_tokenizer(meta, path, vocab_size)
    del tensors, reader  # closes the memory map: every array above is a copy
    return config, weights, tokenizer


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


def _gguf_shapes(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name -> numpy shape (ne reversed) of a GPT-2 of this config."""
    hf_shapes = expected_shapes(config)
    return {
        name: hf_shapes[hf][::-1] if transposed else hf_shapes[hf]
        for name, (hf, transposed) in tensor_names(config.n_layer).items()
    }


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
# Byte offsets of each of those blocks' fp16 fields (scales d, dmin and mins m). Their codes are
# bounded integers, so the values are finite exactly when these are (the largest, 65504 * 127 *
# 32, is far from float32's limit): checking them reads a few bytes per block instead of the
# whole float32 result (400 MB for SmolLM2-1.7B's embedding) and its boolean mask.
_FP16_FIELDS = {
    "Q8_0": (0,),
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
}


def _fp16_fields_finite(blocks: np.ndarray, type_name: str) -> bool:
    """Whether every fp16 field of these rows of blocks (uint8 [..., row bytes]) is finite."""
    import gguf

    block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]][1]
    rows = blocks.reshape(-1, block_bytes)
    return all(bool(np.isfinite(rows[:, o : o + 2].view("<f2")).all()) for o in _FP16_FIELDS[type_name])


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
                f"{', '.join(name.upper() for name in FORMATS[3:])}, Q5_0 or Q6_K are read)"
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


# Byte offsets of the fp16 numbers inside one block of each kept-quantized format: the scale d
# (and, in formats that have one, the min m) that multiply every code of the block. ggml's
# block_q8_0 is {fp16 d; int8 qs[32]}, block_q4_0 {fp16 d; uint8 qs[16]}, block_q4_1
# {fp16 d; fp16 m; uint8 qs[16]}.
_BLOCK_SCALES = {"q8_0": {"scale": 0}, "q4_0": {"scale": 0}, "q4_1": {"scale": 0, "min": 2}}


def _check_block_scales(name: str, blocks: np.ndarray, fmt: str, path: str) -> None:
    """Refuses a kept-quantized tensor with a NaN or infinite fp16 scale (or min) in any block
    (dequantized tensors are checked as float32 in _dequantize). Vectorized over all blocks."""
    import gguf

    block_values, block_bytes = gguf.GGML_QUANT_SIZES[_types()[fmt]]
    rows = blocks.reshape(-1, block_bytes)
    blocks_per_row = blocks.shape[-1] // block_bytes
    for field, offset in _BLOCK_SCALES[fmt].items():
        values = np.ascontiguousarray(rows[:, offset : offset + 2]).view("<f2").reshape(-1)
        bad = ~np.isfinite(values)
        if bad.any():
            index = int(np.argmax(bad))
            row, block = divmod(index, blocks_per_row)
            raise ModelFileError(
                f"{path}: tensor {name} ({fmt.upper()}): block {block} of row {row} (values "
                f"{block * block_values} to {(block + 1) * block_values - 1}) has fp16 {field} {values[index]}; "
                f"{fmt} {field}s must be finite"
            )


def _read_tokenizer(meta: _Metadata, path: str, vocab_size: int) -> HFTokenizer | None:
    """GPT-2's byte-level BPE from the file's vocabulary, or None when it carries none (or one of
    another kind, such as SentencePiece's "llama")."""
    model = meta.get("tokenizer.ggml.model", str, required=False)
    if model != "gpt2":
        return None
    # llama.cpp picks the pre-tokenizer's split regex by this name; "gpt-2" is GPT-2's (older
    # files lack the key). Another would split text differently from the tokenizer built here.
    pre = meta.get("tokenizer.ggml.pre", str, required=False)
    if pre not in (None, "gpt-2"):
        raise ModelFileError(f"{path}: tokenizer.ggml.pre {pre!r} is not supported (GPT-2's, 'gpt-2', only)")
    tokens, merges, types, vocab = read_vocabulary(meta, path, vocab_size)
    # What tokenizers' BPE requires of a merge "a b" (and otherwise reports by a Rust panic, not an
    # error): a and b are tokens, and so is ab, the token the merge makes.
    pairs = []
    for i, merge in enumerate(merges):
        parts = merge.split(" ")
        if len(parts) != 2:
            raise ModelFileError(f"{path}: tokenizer.ggml.merges entry {i} {merge!r} is not two tokens")
        for token in (*parts, parts[0] + parts[1]):
            if token not in vocab:
                raise ModelFileError(
                    f"{path}: tokenizer.ggml.merges entry {i} {merge!r} needs {token!r}, which is not in "
                    "tokenizer.ggml.tokens"
                )
        pairs.append((parts[0], parts[1]))

    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    try:
        # What GPT-2's tokenizer.json holds: BPE over GPT-2's byte-to-unicode alphabet, the split
        # regex and byte mapping of ByteLevel, no prefix space.
        tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        if types is not None:
            control, user = _gguf_token_types()
            # Control tokens (<|endoftext|>) are special: matched whole, left out of decoded text;
            # user-defined ones are matched whole, as llama.cpp does.
            tokenizer.add_special_tokens(
                [AddedToken(tokens[i], special=True) for i, t in enumerate(types) if t == control]
            )
            tokenizer.add_tokens([AddedToken(tokens[i], special=False) for i, t in enumerate(types) if t == user])
        return HFTokenizer(tokenizer)
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as e:  # noqa: B036 -- tokenizers' Rust panics are pyo3 PanicException, a BaseException
        raise ModelFileError(
            f"{path}: tokenizer.ggml.tokens, tokenizer.ggml.merges and tokenizer.ggml.token_type do not make a "
            f"BPE tokenizer: {type(e).__name__}: {e}"
        ) from None


def _gguf_token_types() -> tuple[int, int]:
    import gguf

    return int(gguf.TokenType.CONTROL), int(gguf.TokenType.USER_DEFINED)


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
    import gguf

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

    walker.need(n_tensors * _MIN_TENSOR_INFO, f"{_count(n_tensors)} tensor descriptions", at_least=True, plural=True)
    tensors = []
    names = set()
    for i in range(n_tensors):
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
        tensors.append(_TensorInfo(name, ne, qtype.name, offset, elements // block * block_bytes))

    # Tensor data starts at the next multiple of the alignment, the tensors in order, each
    # padded to the alignment (llama.cpp's rule: "tensor has offset X, expected Y").
    data_start = -(-walker.position // alignment) * alignment
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

    # The work of reading metadata arrays, bounded by the vocabulary the file really holds.
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
    return _Header(tensors, fields, data_start)


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


# -- writing ------------------------------------------------------------------------------------


def save_gguf(model_or_weights, config: GPTConfig | None, path, format: str = "f32", *, tokenizer=None, name="gpt"):
    """Writes a GPT-2 as a GGUF file that llama.cpp loads: the tensor names, layout and metadata
    of llama.cpp's converter for architecture "gpt2" (general.architecture, gpt2.block_count,
    gpt2.context_length, gpt2.embedding_length, gpt2.feed_forward_length,
    gpt2.attention.head_count, gpt2.attention.layer_norm_epsilon, general.file_type,
    general.quantization_version).

    `model_or_weights`: a gpt.GPT (then `config` may be None) or a mapping of HF GPT-2 names to
    arrays. `format`: "f32", "f16", "bf16", "q8_0", "q4_0" or "q4_1": the token embedding and the
    matmul weights are converted with gguf.quants.quantize (ggml's reference quantizers; q4_x for the
    token embedding too, as `llama-quantize --pure` does), the position embedding, LayerNorm
    parameters and biases stay F32. `tokenizer`: a gpt.HFTokenizer or tokenizers.Tokenizer of
    byte-level BPE (GPT-2's kind), written as tokenizer.ggml.* (model "gpt2", pre "gpt-2"); by
    default the model's own tokenizer when `model_or_weights` is a GPT that has one. Without one the
    file says tokenizer.ggml.model "none" and gpt2.vocab_size, which llama.cpp accepts."""
    import gguf

    from gpt.model import GPT

    if isinstance(model_or_weights, GPT):
        if config is not None and config != model_or_weights.config:
            raise ValueError(f"config {config} is not the model's ({model_or_weights.config})")
        config = model_or_weights.config
        weights = model_or_weights.state_dict()
        if tokenizer is None:
            tokenizer = model_or_weights.tokenizer
    elif isinstance(model_or_weights, Mapping):
        weights = model_or_weights
    else:
        raise TypeError(
            f"model_or_weights must be a gpt.GPT or a mapping of names to arrays, got {type(model_or_weights).__name__}"
        )
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a gpt.GPTConfig, got {type(config).__name__}")
    if config.pos_embedding != "learned":
        raise ValueError(
            f"GGUF's gpt2 architecture has learned positions; pos_embedding={config.pos_embedding!r} cannot be written"
        )
    if config.attention_window is not None:
        raise ValueError(
            f"GGUF's gpt2 architecture has full causal attention; attention_window={config.attention_window} "
            "cannot be written"
        )
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    weights = validate_weights(config, weights, copy=False)
    qtype = _types()[format]
    plain = gguf.GGMLQuantizationType.F32
    vocabulary = _gpt2_vocabulary(tokenizer, config.vocab_size) if tokenizer is not None else None

    # Convert everything before the file is opened, so that a refusal leaves no file behind.
    tensors = []
    for gguf_name, (hf_name, transposed) in tensor_names(config.n_layer).items():
        array = weights[hf_name]
        array = np.ascontiguousarray(array.T) if transposed else array
        kind = plain if array.ndim == 1 or gguf_name == "position_embd.weight" else qtype
        block, _ = gguf.GGML_QUANT_SIZES[kind]
        if array.shape[-1] % block:
            raise ValueError(
                f"{gguf_name} rows have {array.shape[-1]} values, not a multiple of {format}'s block of {block}"
            )
        tensors.append((gguf_name, gguf.quants.quantize(array, kind), kind))

    file_types = {
        "f32": gguf.LlamaFileType.ALL_F32,
        "f16": gguf.LlamaFileType.MOSTLY_F16,
        "bf16": gguf.LlamaFileType.MOSTLY_BF16,
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
        "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
        "q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
    }
    writer = gguf.GGUFWriter(os.fspath(path), arch=ARCHITECTURE)
    try:
        writer.add_type(gguf.GGUFType.MODEL)
        writer.add_name(name)
        writer.add_block_count(config.n_layer)
        writer.add_context_length(config.block_size)
        writer.add_embedding_length(config.n_embd)
        writer.add_feed_forward_length(4 * config.n_embd)
        writer.add_head_count(config.n_head)
        writer.add_layer_norm_eps(float(config.layer_norm_eps))
        writer.add_file_type(int(file_types[format]))
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        if vocabulary is None:
            writer.add_tokenizer_model("none")
            writer.add_vocab_size(config.vocab_size)
        else:
            tokens, types, merges, endoftext = vocabulary
            writer.add_tokenizer_model("gpt2")
            writer.add_tokenizer_pre("gpt-2")
            writer.add_token_list(tokens)
            writer.add_token_types(types)
            writer.add_token_merges(merges)
            if endoftext is not None:  # GPT-2's bos and eos (config.json's bos/eos_token_id)
                writer.add_bos_token_id(endoftext)
                writer.add_eos_token_id(endoftext)
        for gguf_name, data, kind in tensors:
            writer.add_tensor(gguf_name, data, raw_dtype=kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()


def _gpt2_vocabulary(tokenizer, vocab_size: int):
    """(tokens, token types, merges, id of <|endoftext|> or None) of a byte-level BPE tokenizer, as
    llama.cpp's converter lists them: one token per id up to vocab_size (ids the tokenizer lacks
    become "[PAD<id>]", user-defined), added special tokens as control tokens."""
    import gguf
    from tokenizers import Tokenizer

    if isinstance(tokenizer, HFTokenizer):
        tokenizer = tokenizer.backend
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"tokenizer must be a gpt.HFTokenizer or tokenizers.Tokenizer, got {type(tokenizer).__name__}")
    spec = json.loads(tokenizer.to_str())
    model, pre = spec.get("model") or {}, spec.get("pre_tokenizer") or {}
    if model.get("type") != "BPE" or pre.get("type") != "ByteLevel":
        raise ValueError(
            f"only byte-level BPE tokenizers (GPT-2's kind) can be written to GGUF; this one is "
            f"{model.get('type')} with pre-tokenizer {pre.get('type')}"
        )
    by_id = {int(i): token for token, i in model["vocab"].items()}
    types = {}
    for added in spec.get("added_tokens") or []:
        by_id[int(added["id"])] = added["content"]
        types[int(added["id"])] = gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED
    if max(by_id) >= vocab_size:
        raise ValueError(f"the tokenizer has token id {max(by_id)}, outside the model's vocabulary of {vocab_size}")
    tokens, token_types = [], []
    for i in range(vocab_size):
        tokens.append(by_id.get(i, f"[PAD{i}]"))
        token_types.append(int(types.get(i, gguf.TokenType.NORMAL if i in by_id else gguf.TokenType.USER_DEFINED)))
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in model.get("merges") or []]
    endoftext = tokens.index("<|endoftext|>") if "<|endoftext|>" in tokens else None
    return tokens, token_types, merges, endoftext
