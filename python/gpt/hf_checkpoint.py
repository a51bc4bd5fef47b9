"""HF checkpoints of the Llama family (LlamaForCausalLM, Qwen2ForCausalLM, Phi3ForCausalLM,
Gemma3ForCausalLM): config.json and safetensors (one file, or shards listed in
model.safetensors.index.json) into a GPTConfig and the compiler's weights. GPT-2 directories stay
with gpt.weights.load_pretrained."""

import math
import os

import numpy as np

from gpt import architecture_weights, architectures, model_files
from gpt.config import GPTConfig, RopeScaling
from gpt.errors import ModelFileError
from gpt.model_files import json_kind, short
from gpt.resources import check_fits_in_memory
from gpt.weights import _checked_config, _config_value, _norm_epsilon, _read_config_json, _read_safetensors
from gpt_runtime.model_weights import shard_names

# HF options that change what a Llama-family model computes, at the values implemented here.
_IMPLEMENTED = {
    "hidden_act": ("silu",),
    "attention_bias": (False,),  # Llama's (q, k, v and o biases); Qwen2 has its own q/k/v biases
    "mlp_bias": (False,),
    "pretraining_tp": (1,),
    "use_sliding_window": (False,),  # Qwen2's per-layer windows
}
# Where config.json's sliding_window is the model's attention window (Qwen2's is unused unless
# use_sliding_window, which is refused above).
_WINDOWED = ("phi3",)
# HF rope types: "default" (plain theta_i), Llama 3's scaling and linear (theta_i / factor).
_ROPE_TYPES = ("default", "llama3", "linear")
# Gemma 3's options at the values implemented (its soft-capping is Gemma 2's, None in Gemma 3).
_GEMMA3_IMPLEMENTED = {
    "hidden_activation": ("gelu_pytorch_tanh",),
    "final_logit_softcapping": (None,),
    "attn_logit_softcapping": (None,),
    "use_bidirectional_attention": (False,),
}
# Gemma 3's layer types: sliding-window attention (window `sliding_window`) or full.
_LAYER_TYPES = ("sliding_attention", "full_attention")


def model_type(path: str) -> str | None:
    """config.json's model_type of a checkpoint directory (None when it has none or no config.json;
    gpt.ModelFileError for a config.json that gpt.model_files refuses: a link out of the directory,
    a FIFO, not a JSON object)."""
    config_path = os.path.join(path, "config.json")
    if not os.path.isdir(path) or not model_files.present(path, "config.json"):
        return None
    value = _read_config_json(config_path).get("model_type")
    return value if isinstance(value, str) else None


def architecture_of(model_type_name: str | None) -> architectures.Architecture | None:
    """The Llama-family architecture whose HF model_type this is, or None (GPT-2 and unknown)."""
    for spec in architectures.ARCHITECTURES.values():
        if spec.compiler_names != "gpt2" and model_type_name in spec.hf_model_types:
            return spec
    return None


def eos_token_ids(path: str) -> frozenset[int]:
    """The eos_token_id of a checkpoint directory's generation_config.json and config.json, both
    (an int or a list of ints each; transformers' generate stops at either), read as config.json
    is (gpt.ModelFileError for a file that is not a JSON object, or an eos_token_id that is neither
    null, an integer nor a list of integers). Negative ids are ignored (some savers write -1)."""
    ids = set()
    for name in ("generation_config.json", "config.json"):
        file = os.path.join(path, name)
        value = _read_config_json(file).get("eos_token_id") if model_files.present(path, name) else None
        for item in value if isinstance(value, list) else [value]:
            if item is None and not isinstance(value, list):
                continue
            if isinstance(item, bool) or not isinstance(item, int):
                raise ModelFileError(
                    f"{file}: eos_token_id is {json_kind(value)} {short(value)}, expected an integer or a list of "
                    f"integers"
                )
            if item >= 0:
                ids.add(item)
    return frozenset(ids)


def load_pretrained(path: str) -> tuple[GPTConfig, dict[str, np.ndarray]]:
    """Reads a HF Llama, Qwen2, Phi-3 or Gemma 3 directory into (GPTConfig, the compiler's weights): tensors in any
    float dtype (F32, F16, BF16, F64), a tied head (tie_word_embeddings) or an untied lm_head.
    Raises FileNotFoundError for a missing directory or file, MemoryError for a config that would
    not fit in memory, and gpt.ModelFileError naming the file and the key or tensor otherwise."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no such model directory: {path}")
    config_path = os.path.join(path, "config.json")
    if not model_files.present(path, "config.json"):
        raise FileNotFoundError(f"{path} is not a HF checkpoint: config.json is missing")
    hf = _read_config_json(config_path)
    config = _config(hf, config_path)
    check_fits_in_memory(config, loading=True)  # before reading tensors for a config.json that asks too much
    tensors, source = {}, {}
    for file in _safetensors_files(path):
        for name, tensor in _read_safetensors(file).items():
            if name in source:
                raise ModelFileError(f"{file}: tensor {name} is also in {source[name]} (a tensor is in one shard)")
            # Here, where the file is known: the model's own check names the compiler's fused parameter.
            with np.errstate(over="ignore"):  # an F64 value beyond float32's range: inf, refused
                finite = bool(np.isfinite(tensor.astype(np.float32, copy=False)).all())
            if not finite:
                raise ModelFileError(f"{file}: tensor {name} contains NaN or infinity (as float32)")
            tensors[name], source[name] = tensor, file
    where = os.path.join(path, "model.safetensors")
    if config.tied_head:
        # A tied checkpoint may still carry the head (older savers wrote it): it must be the table.
        head = tensors.pop("lm_head.weight", None)
        table = tensors.get("model.embed_tokens.weight")
        if head is not None and table is not None and not np.array_equal(head, table):
            raise ModelFileError(
                f"{where}: lm_head.weight differs from model.embed_tokens.weight, but config.json "
                f"says tie_word_embeddings"
            )
    # Buffers some savers write, which the model does not take (recomputed from the config).
    for name in [n for n in tensors if n.endswith("rotary_emb.inv_freq")]:
        del tensors[name]
    expected = architectures.hf_shapes(config)
    missing = [name for name in expected if name not in tensors]
    if missing:
        raise ModelFileError(
            f"{where}: missing tensor(s): {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else "")
        )
    unexpected = sorted(name for name in tensors if name not in expected)
    if unexpected:
        raise ModelFileError(f"{where}: unexpected tensor(s) for {config.architecture}: {', '.join(unexpected[:5])}")
    for name, shape in expected.items():
        if tensors[name].shape != shape:
            raise ModelFileError(f"{where}: tensor {name} has shape {tensors[name].shape}, expected {shape}")
    return config, architecture_weights.to_compiler(config, tensors, consume=True)


def _config(hf: dict, path: str) -> GPTConfig:
    """GPTConfig of a Llama-family config.json, refusing what the compiler does not compute."""
    name = _config_value(hf, path, "model_type", str)
    spec = architecture_of(name)
    if spec is None:
        known = ", ".join(
            t for a in architectures.ARCHITECTURES.values() if a.compiler_names != "gpt2" for t in a.hf_model_types
        )
        raise ModelFileError(f"{path}: model_type {short(name)} is not a Llama-family model ({known})")
    _check_implemented(hf, path, _IMPLEMENTED)
    # Required unless a default follows the key.
    sizes = {
        key: _config_value(hf, path, hf_key, int, *default)
        for key, hf_key, *default in (
            ("n_layer", "num_hidden_layers"),
            ("n_head", "num_attention_heads"),
            ("n_embd", "hidden_size"),
            ("n_ff", "intermediate_size"),
            ("vocab_size", "vocab_size"),
            ("n_kv_head", "num_key_value_heads", None),
            # Any head width (Qwen3's, Mistral-Nemo's); None: hidden_size / num_attention_heads.
            ("head_dim", "head_dim", None),
        )
    }
    eps = _norm_epsilon(hf, path, "rms_norm_eps", 1e-6)
    block_size = _config_value(hf, path, "max_position_embeddings", int, 2048)
    tied = hf.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ModelFileError(f"{path}: tie_word_embeddings is {json_kind(tied)} {short(tied)}, expected a boolean")
    base, scaling = _rope(hf, path)
    window = _config_value(hf, path, "sliding_window", int, None) if spec.name in _WINDOWED else None
    gemma = _gemma3(hf, path, sizes["n_layer"]) if spec.name == "gemma3" else {}
    if gemma:
        base, scaling = gemma.pop("rope_base"), gemma.pop("rope_scaling")
    return _checked_config(
        path,
        **sizes,
        block_size=block_size,
        architecture=spec.name,
        layer_norm_eps=eps,
        tied_head=tied,
        rope_base=base,
        rope_scaling=scaling,
        attention_window=window,
        **gemma,
    )


def _check_implemented(hf: dict, path: str, options: dict[str, tuple]) -> None:
    """gpt.ModelFileError naming the first of `options` that config.json sets to another value."""
    for option, implemented in options.items():
        # Of the implemented type too: 0 is not False, 1.0 not 1.
        if option in hf and not any(type(hf[option]) is type(v) and hf[option] == v for v in implemented):
            raise ModelFileError(f"{path}: {option}={short(hf[option])} is not supported (only {implemented[0]!r})")


def _gemma3(hf: dict, path: str, n_layer: int) -> dict:
    """Gemma 3's GPTConfig fields: attention_scale (query_pre_attn_scalar ** -0.5), layer_windows
    (layer_types, or HF's default of every sliding_window_pattern-th layer full), and the rope of
    the full layers (rope_base, rope_scaling) and of the sliding ones (rope_local_base), from
    transformers 5's rope_parameters per layer type or the older rope_theta, rope_scaling and
    rope_local_base_freq."""
    _check_implemented(hf, path, _GEMMA3_IMPLEMENTED)
    scalar = _config_value(hf, path, "query_pre_attn_scalar", float, 256.0)
    if not (math.isfinite(scalar) and scalar > 0):
        raise ModelFileError(f"{path}: query_pre_attn_scalar is {scalar!r}, expected a positive number")
    window = _config_value(hf, path, "sliding_window", int, 4096)
    types = hf.get("layer_types")
    if types is None:
        pattern = _config_value(hf, path, "sliding_window_pattern", int, 6)
        if pattern < 1:
            raise ModelFileError(f"{path}: sliding_window_pattern is {pattern}, expected a positive integer")
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(max(n_layer, 0))]
    if not isinstance(types, list) or len(types) != n_layer or any(t not in _LAYER_TYPES for t in types):
        raise ModelFileError(
            f"{path}: layer_types must list num_hidden_layers ({n_layer}) of {', '.join(_LAYER_TYPES)}, got "
            f"{short(types)}"
        )
    parameters = hf.get("rope_parameters")
    if isinstance(parameters, dict) and "full_attention" in parameters:
        base, scaling = _rope({"rope_parameters": parameters["full_attention"]}, path)
        local, local_scaling = _rope({"rope_parameters": parameters.get("sliding_attention", {})}, path)
        if local_scaling is not None:
            raise ModelFileError(f"{path}: rope_parameters.sliding_attention: a rope scaling is not supported there")
    else:
        base, scaling = _rope(hf, path)
        local = _config_value(hf, path, "rope_local_base_freq", float, 10000.0)
    return dict(
        attention_scale=scalar**-0.5,
        layer_windows=tuple(window if t == "sliding_attention" else 0 for t in types),
        rope_local_base=local,
        rope_base=base,
        rope_scaling=scaling,
    )


def _rope(hf: dict, path: str) -> tuple[float, RopeScaling | None]:
    """(rope_theta, Llama 3 scaling or None) from transformers 5's `rope_parameters` or the older
    `rope_theta` and `rope_scaling` keys (null: absent). Each a JSON object, or gpt.ModelFileError
    naming the key."""
    key = "rope_parameters"
    parameters = hf.get(key)
    if parameters is None:
        key = "rope_scaling"
        scaling = hf.get(key)
        if scaling is not None and not isinstance(scaling, dict):
            raise ModelFileError(f"{path}: rope_scaling is {json_kind(scaling)} {short(scaling)}, expected an object")
        parameters = dict(scaling or {})
        if "rope_theta" in hf:
            parameters["rope_theta"] = hf["rope_theta"]
    if not isinstance(parameters, dict):
        raise ModelFileError(
            f"{path}: rope_parameters is {json_kind(parameters)} {short(parameters)}, expected an object"
        )
    base = _config_value(parameters, path, "rope_theta", float, 10000.0)
    # Rotation of part of each head (Phi-3 configs carry the key, at 1.0): not implemented.
    partial = parameters.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
    if partial not in (None, 1, 1.0) or isinstance(partial, bool):
        raise ModelFileError(f"{path}: partial_rotary_factor={short(partial)} is not supported (only 1.0)")
    rope_type = parameters.get("rope_type", parameters.get("type", "default"))
    if not isinstance(rope_type, str):
        raise ModelFileError(f"{path}: {key}.rope_type is {json_kind(rope_type)} {short(rope_type)}, expected a string")
    if rope_type not in _ROPE_TYPES:
        raise ModelFileError(f"{path}: rope type {short(rope_type)} is not supported (only {', '.join(_ROPE_TYPES)})")
    if rope_type == "default":
        return base, None
    if rope_type == "linear":
        # theta_i / factor: Llama 3's scaling with every wavelength (each >= 2 pi) past its
        # low-frequency bound of original / low_freq_factor = 1.
        factor = _config_value(parameters, path, "factor", float)
        try:
            return base, RopeScaling(factor, 1.0, 2.0, 1)
        except ValueError as e:
            raise ModelFileError(f"{path}: {e}") from None
    try:
        scaling = RopeScaling(
            factor=_config_value(parameters, path, "factor", float),
            low_freq_factor=_config_value(parameters, path, "low_freq_factor", float),
            high_freq_factor=_config_value(parameters, path, "high_freq_factor", float),
            original_max_position_embeddings=_config_value(parameters, path, "original_max_position_embeddings", int),
        )
    except ValueError as e:
        raise ModelFileError(f"{path}: {e}") from None
    return base, scaling


def _safetensors_files(path: str) -> list[str]:
    """model.safetensors, or the shards model.safetensors.index.json lists (in order, each once)."""
    single = os.path.join(path, "model.safetensors")
    if model_files.present(path, "model.safetensors"):
        return [single]
    index_path = os.path.join(path, "model.safetensors.index.json")
    if not model_files.present(path, "model.safetensors.index.json"):
        raise FileNotFoundError(f"{path} has neither model.safetensors nor model.safetensors.index.json")
    index = _read_config_json(index_path)
    files = []
    for name in shard_names(index.get("weight_map"), index_path, ModelFileError, short):
        file = os.path.join(path, name)
        if not model_files.present(path, name):
            raise FileNotFoundError(f"{index_path} lists {name}, which is missing")
        files.append(file)
    return files
