"""Model weights: GPT-2 initialisation, validation of user-supplied weights, HF checkpoints."""

import json
import math
import os
import struct
from collections.abc import Collection, Mapping
from typing import NoReturn

import numpy as np

from gpt import _gpt, architectures, model_files
from gpt.config import GPTConfig
from gpt.errors import ModelFileError
from gpt.resources import check_fits_in_memory

# Tensors that HF GPT-2 checkpoints carry but the model does not take as weights: the tied LM
# head and the causal-mask buffers of older checkpoints.
_IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")
_IGNORED_NAMES = ("lm_head.weight",)
# HF GPT2Config fields that change the computation, at the value this compiler implements.
_IMPLEMENTED_OPTIONS = {
    "tie_word_embeddings": True,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "add_cross_attention": False,
}
# Tensor dtypes of a safetensors checkpoint that load_pretrained reads (as float32).
_SAFETENSORS_DTYPES = ("F32", "F16", "BF16", "F64")
# config.json is read whole: HF's are a few KB (GPT-2's 0.7 KB; large label maps some hundred KB).
_CONFIG_JSON_MAX_BYTES = 16 << 20
# The safetensors library refuses headers over 100 MB (safetensors' MAX_HEADER_SIZE).
_SAFETENSORS_MAX_HEADER_BYTES = 100_000_000


def expected_shapes(config: GPTConfig) -> dict[str, tuple]:
    """The compiler's parameter name -> shape, for every weight the model needs, in the order of
    its parameter table (cc/builder/Parameters.cpp): HF GPT-2's names and shapes for GPT-2; for
    the Llama family gpt.architecture_weights.to_compiler's (fused, [in, out] matmul weights)."""
    table = _gpt.supplied_parameters(config)
    return {name: tuple(shape) for name, shape in table}


def random_weights(config: GPTConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """The compiler's parameters (expected_shapes: HF names for GPT-2) in GPT-2 initialisation
    (as in HF transformers and nanoGPT): N(0, 0.02) for embeddings and linear layers,
    N(0, 0.02 / sqrt(2 n_layer)) for the residual projections, zero biases, unit norm scales.
    Deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    residual_std = 0.02 / np.sqrt(2 * config.n_layer)
    weights = {}
    for name, shape in expected_shapes(config).items():
        # Norm scales are the 1-D weights (GPT-2's ln_*, Llama's *_layernorm and model.norm).
        if len(shape) == 1 and name.endswith(".weight"):
            weights[name] = np.ones(shape, np.float32)
        elif name.endswith(".bias"):
            weights[name] = np.zeros(shape, np.float32)
        else:
            std = residual_std if name.endswith(("c_proj.weight", "o_proj.weight", "down_proj.weight")) else 0.02
            weights[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
    return weights


def validate_weights(
    config: GPTConfig, weights: Mapping[str, object], copy: bool = True, given_quantized: Collection[str] = ()
) -> dict[str, np.ndarray]:
    """Checks names, shapes and dtypes, raising ValueError that names the offending parameter;
    returns dense, read-only float32 arrays: copies, so that the caller editing its arrays later
    cannot change the model (with copy=False, the caller's arrays themselves when they already
    are dense float32, for arrays nobody else holds). Parameters named in `given_quantized` come
    quantized instead (from a GGUF file) and may be absent."""
    if not isinstance(weights, Mapping):
        raise TypeError(f"weights must be a mapping of parameter name to array, got {type(weights).__name__}")
    expected = {name: shape for name, shape in expected_shapes(config).items() if name not in given_quantized}
    missing = [name for name in expected if name not in weights]
    if missing:
        raise ValueError(f"missing parameter(s): {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""))
    unexpected = [
        name
        for name in weights
        if name not in expected
        and name not in given_quantized
        and name not in _IGNORED_NAMES
        and not name.endswith(_IGNORED_SUFFIXES)
    ]
    if unexpected:
        raise ValueError(f"unexpected parameter(s) for this config: {', '.join(sorted(unexpected)[:5])}")
    checked = {}
    for name, shape in expected.items():
        value = weights[name]
        if not isinstance(value, np.ndarray):
            raise ValueError(f"parameter {name} must be a numpy array, got {type(value).__name__}")
        if value.dtype not in (np.float32, np.float16, np.float64):
            raise ValueError(
                f"parameter {name} has dtype {value.dtype}; expected float32 (float16/float64 are converted)"
            )
        if value.shape != shape:
            raise ValueError(f"parameter {name} has shape {value.shape}, expected {shape}")
        with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes inf: refused below
            array = np.array(value, dtype=np.float32, order="C", copy=True if copy else None)
        if not np.all(np.isfinite(array)):
            raise ValueError(f"parameter {name} contains NaN or infinity (as float32)")
        if array is value:  # the caller's own array: read-only through a view, never its flag
            array = value.view()
        array.flags.writeable = False
        checked[name] = array
    return checked


def load_pretrained(path: str):
    """Reads a HF GPT-2 directory (config.json + model.safetensors) into (GPTConfig, weights).
    Raises FileNotFoundError for a missing directory or file, MemoryError for a config that would
    not fit in memory, and gpt.ModelFileError (a ValueError) naming the file and the key or tensor
    for anything else."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no such model directory: {path}")
    config_path = os.path.join(path, "config.json")
    weights_path = os.path.join(path, "model.safetensors")
    for required in (config_path, weights_path):
        if not model_files.present(path, os.path.basename(required)):
            raise FileNotFoundError(f"{path} is not a GPT-2 checkpoint: {os.path.basename(required)} is missing")
    hf = _read_config_json(config_path)
    activation = _config_value(hf, config_path, "activation_function", str, "gelu_new")
    if activation not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ModelFileError(f"{config_path}: activation_function {activation!r} is not supported (tanh GELU only)")
    model_type = _config_value(hf, config_path, "model_type", str, "gpt2")
    if model_type != "gpt2":
        # from_pretrained sends the Llama family's model types to gpt.hf_checkpoint: any other is unknown.
        supported = ", ".join(t for spec in architectures.ARCHITECTURES.values() for t in spec.hf_model_types)
        raise ModelFileError(
            f"{config_path}: model_type {_short(model_type)} is not supported (supported model types: {supported})"
        )
    # Options that change what the model computes: refused unless at the value implemented here
    # (of its type too: 1 is not True).
    for option, implemented in _IMPLEMENTED_OPTIONS.items():
        if option in hf and (type(hf[option]) is not type(implemented) or hf[option] != implemented):
            raise ModelFileError(
                f"{config_path}: {option}={_short(hf[option])} is not supported (only {implemented!r})"
            )
    block_size = _config_value(hf, config_path, "n_positions", int, None)
    if block_size is None:
        block_size = _config_value(hf, config_path, "n_ctx", int, 1024)
    eps = _norm_epsilon(hf, config_path, "layer_norm_epsilon", 1e-5)
    sizes = {key: _config_value(hf, config_path, key, int) for key in ("n_layer", "n_head", "n_embd", "vocab_size")}
    pos_embedding = _config_value(hf, config_path, "pos_embedding", str, "learned")
    # HF's name for a sliding window (Mistral, Qwen2; null: none).
    window = _config_value(hf, config_path, "sliding_window", int, None)
    config = _checked_config(
        config_path,
        **sizes,
        block_size=block_size,
        pos_embedding=pos_embedding,
        layer_norm_eps=eps,
        attention_window=window,
    )
    check_fits_in_memory(config, loading=True)  # before reading tensors for a config.json that asks too much
    tensors = _read_safetensors(weights_path)
    # Checkpoints saved from GPT2Model (not GPT2LMHeadModel) lack the "transformer." prefix.
    if not any(name.startswith("transformer.") for name in tensors):
        tensors = {f"transformer.{name}": value for name, value in tensors.items()}
    # The LM head is the tied embedding: a checkpoint whose own head differs would silently lose it.
    head, embedding = tensors.get("lm_head.weight"), tensors.get("transformer.wte.weight")
    if head is not None and embedding is not None and not np.array_equal(head, embedding):
        raise ModelFileError(
            f"{weights_path}: lm_head.weight differs from transformer.wte.weight (an untied LM head is not supported)"
        )
    try:  # names, shapes and finite values, here so that the error names the file
        return config, validate_weights(config, tensors, copy=False)
    except ValueError as e:
        raise ModelFileError(f"{weights_path}: {e}") from None


def _read_config_json(path: str) -> dict:
    """config.json (or another JSON file of a model directory) as a dict, read as a file from a
    stranger (gpt.model_files): a regular file inside its directory, bounded in size, UTF-8, JSON,
    an object. Every failure is a ModelFileError naming the file (json's own errors do not)."""
    return model_files.read_json_object(os.path.dirname(path), os.path.basename(path), _CONFIG_JSON_MAX_BYTES)


_REQUIRED = object()


def _norm_epsilon(hf: dict, path: str, key: str, default: float) -> float:
    """config.json's `key`, a norm's epsilon: a positive finite number, or gpt.ModelFileError."""
    eps = _config_value(hf, path, key, float, default)
    if not (math.isfinite(eps) and eps > 0):
        raise ModelFileError(f"{path}: {key} is {eps!r}, expected a positive finite number")
    return eps


def _checked_config(path: str, **fields) -> GPTConfig:
    """GPTConfig(**fields), or gpt.ModelFileError naming `path` with the reason GPTConfig refuses them."""
    try:
        return GPTConfig(**fields)
    except ValueError as e:
        raise ModelFileError(f"{path}: {e}") from None


def _config_value(hf: dict, path: str, key: str, kind: type, default=_REQUIRED):
    """hf[key] checked to be of `kind` (int: not a bool; float: any JSON number; None where the
    default is None), or `default` when absent."""
    if key not in hf:
        if default is _REQUIRED:
            raise ModelFileError(f"{path} lacks {key!r}")
        return default
    value = hf[key]
    if value is None and default is None:
        return None
    expected = (int, float) if kind is float else kind
    if isinstance(value, bool) or not isinstance(value, expected):
        names = {int: "an integer", float: "a number", str: "a string"}
        raise ModelFileError(f"{path}: {key} is {_json_kind(value)} {_short(value)}, expected {names[kind]}")
    if kind is float:
        try:
            return float(value)
        except OverflowError:  # an integer of hundreds of digits
            raise ModelFileError(f"{path}: {key} is {_short(value)}, too large for a float") from None
    return value


_json_kind = model_files.json_kind
_short = model_files.short


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as float32 (F16 and BF16 widened exactly; F64 is
    rounded later, as from_weights rounds float64 arrays), with errors that name the file and the
    tensor. The safetensors library reads the header and the numpy-representable tensors; numpy
    has no bfloat16, so BF16 tensors are read from their byte range in the file (_bf16_tensor).
    The file is a stranger's: a regular file inside its model directory (a link out of it, a
    FIFO or a device is refused: gpt.model_files), opened by its real path; messages name `path`."""
    from safetensors import SafetensorError, safe_open

    real = model_files.regular_file_inside(os.path.dirname(path), os.path.basename(path))
    header = _safetensors_header(path, real)  # its length and JSON checked before safe_open reads it
    tensors = {}
    try:
        with safe_open(real, framework="numpy") as f:
            for name in f.keys():
                dtype = f.get_slice(name).get_dtype()
                if dtype not in _SAFETENSORS_DTYPES:
                    raise ModelFileError(
                        f"{path}: tensor {name} has dtype {dtype}, which is not a floating-point format "
                        f"this loader reads (supported: {', '.join(_SAFETENSORS_DTYPES)})"
                    )
                if dtype == "BF16":
                    tensors[name] = _bf16_tensor(path, real, header, name, f.get_slice(name).get_shape())
                elif dtype == "F16":
                    tensors[name] = f.get_tensor(name).astype(np.float32)  # exact
                else:
                    tensors[name] = f.get_tensor(name)
    except SafetensorError as e:
        raise ModelFileError(f"{path} is not a readable safetensors file: {e}") from None
    return tensors


def _safetensors_header(path: str, real: str) -> tuple[dict, int]:
    """(the JSON header, the offset of the data buffer) of a safetensors file. The documented
    layout: an 8-byte little-endian header length N, N bytes of JSON giving each tensor's dtype,
    shape and `data_offsets` [begin, end) relative to the data buffer that follows, little-endian
    data. Checked here as far as its length, its JSON and its kind go (never reading more than
    the file holds); safe_open validates the entries (offsets inside the file, sizes matching
    shapes) before any tensor is read. `real` is the file's checked real path, which is opened;
    messages name `path`."""

    def refuse(problem: str) -> NoReturn:
        raise ModelFileError(f"{path} is not a readable safetensors file: {problem}")

    size = os.path.getsize(real)
    if size < 8:
        refuse(f"{size} bytes, too short for the 8-byte header length")
    with open(real, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        if header_len > min(size - 8, _SAFETENSORS_MAX_HEADER_BYTES):
            refuse(
                f"the header length is {header_len} bytes; the file has {size - 8} after it "
                f"(and safetensors reads at most {_SAFETENSORS_MAX_HEADER_BYTES})"
            )
        raw = f.read(header_len)
    try:
        header = json.loads(raw.decode("utf-8"))
    except RecursionError:
        refuse("its JSON header nests too deeply")
    except ValueError as e:  # UnicodeDecodeError and json.JSONDecodeError are ValueErrors
        refuse(f"its header is not UTF-8 JSON: {e}")
    if not isinstance(header, dict):
        refuse(f"its header is a JSON {type(header).__name__}, expected an object")
    return header, 8 + header_len


def _bf16_tensor(path: str, real: str, header: tuple[dict, int], name: str, shape) -> np.ndarray:
    """A BF16 tensor of a safetensors file as float32: each value's 16 bits become the high half
    of a float32, which is exact (numpy has no bfloat16, so safe_open cannot return it)."""
    entries, data_start = header
    try:
        begin, end = (int(offset) for offset in entries[name]["data_offsets"])
    except (KeyError, TypeError, ValueError):  # safe_open read this entry: only a parser difference gets here
        raise ModelFileError(f"{path}: tensor {name} has no readable data_offsets in the header") from None
    count = int(np.prod(shape, dtype=np.int64))
    if end - begin != 2 * count:
        raise ModelFileError(f"{path}: tensor {name} has {end - begin} bytes for {count} BF16 values")
    with open(real, "rb") as f:
        f.seek(data_start + begin)
        bits = np.fromfile(f, dtype="<u2", count=count)
    if bits.size != count:
        raise ModelFileError(f"{path}: tensor {name} is truncated")
    return (bits.astype(np.uint32) << 16).view(np.float32).reshape(shape)
