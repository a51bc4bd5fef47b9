"""Model weights: GPT-2 initialisation, validation of user-supplied weights, HF checkpoints."""

import json
import os
from collections.abc import Mapping

import numpy as np

from gpt import _gpt
from gpt.config import GPTConfig

# Tensors that HF GPT-2 checkpoints carry but the model does not take as weights: the tied LM
# head and the causal-mask buffers of older checkpoints.
_IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")
_IGNORED_NAMES = ("lm_head.weight",)


def expected_shapes(config: GPTConfig) -> dict[str, tuple]:
    """HF GPT-2 parameter name -> shape, for every weight the model needs, in the order the
    compiler's parameter table (cc/builder/Parameters.cpp) lists them."""
    table = _gpt.supplied_parameters(**config.shape_arguments())
    return {name: tuple(shape) for name, shape in table}


def random_weights(config: GPTConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """GPT-2 initialisation (as in HF transformers and nanoGPT): N(0, 0.02) for embeddings and
    linear layers, N(0, 0.02 / sqrt(2 n_layer)) for the residual projections, zero biases, unit
    LayerNorm scales. Deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    residual_std = 0.02 / np.sqrt(2 * config.n_layer)
    weights = {}
    for name, shape in expected_shapes(config).items():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            weights[name] = np.ones(shape, np.float32)
        elif name.endswith(".bias"):
            weights[name] = np.zeros(shape, np.float32)
        else:
            std = residual_std if name.endswith("c_proj.weight") else 0.02
            weights[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
    return weights


def validate_weights(config: GPTConfig, weights: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Checks names, shapes and dtypes, raising ValueError that names the offending parameter;
    returns dense float32 arrays (the caller's arrays themselves when they already are)."""
    if not isinstance(weights, Mapping):
        raise TypeError(f"weights must be a mapping of parameter name to array, got {type(weights).__name__}")
    expected = expected_shapes(config)
    missing = [name for name in expected if name not in weights]
    if missing:
        raise ValueError(f"missing parameter(s): {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""))
    unexpected = [
        name
        for name in weights
        if name not in expected and name not in _IGNORED_NAMES and not name.endswith(_IGNORED_SUFFIXES)
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
        if not np.all(np.isfinite(value)):
            raise ValueError(f"parameter {name} contains NaN or infinity")
        checked[name] = np.ascontiguousarray(value, dtype=np.float32)
    return checked


def load_pretrained(path: str):
    """Reads a HF GPT-2 directory (config.json + model.safetensors) into (GPTConfig, weights)."""
    from safetensors.numpy import load_file

    if not os.path.isdir(path):
        raise FileNotFoundError(f"no such model directory: {path}")
    config_path = os.path.join(path, "config.json")
    weights_path = os.path.join(path, "model.safetensors")
    for required in (config_path, weights_path):
        if not os.path.isfile(required):
            raise FileNotFoundError(f"{path} is not a GPT-2 checkpoint: {os.path.basename(required)} is missing")
    with open(config_path, encoding="utf-8") as f:
        hf = json.load(f)
    activation = hf.get("activation_function", "gelu_new")
    if activation not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"{config_path}: activation_function {activation!r} is not supported (tanh GELU only)")
    try:
        config = GPTConfig(
            n_layer=hf["n_layer"],
            n_head=hf["n_head"],
            n_embd=hf["n_embd"],
            vocab_size=hf["vocab_size"],
            block_size=hf.get("n_positions", hf.get("n_ctx", 1024)),
            pos_embedding=hf.get("pos_embedding", "learned"),
            layer_norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        )
    except KeyError as e:
        raise ValueError(f"{config_path} lacks {e.args[0]!r}") from None
    tensors = load_file(weights_path)
    # Checkpoints saved from GPT2Model (not GPT2LMHeadModel) lack the "transformer." prefix.
    if not any(name.startswith("transformer.") for name in tensors):
        tensors = {f"transformer.{name}": value for name, value in tensors.items()}
    return config, tensors
