"""Model shapes the numerics tests run on, and weights that exercise every parameter."""

import numpy as np

import gpt
from gpt.weights import random_weights

NANO = dict(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=128)
MID = dict(n_layer=4, n_head=8, n_embd=256, vocab_size=1000, block_size=256)
GPT2_SMALL = dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024)

# Relative tolerance of every numerics test: max |logits - reference| <= 1e-4 * max |reference|.
RTOL = 1e-4


def config(shape, pos_embedding="learned"):
    return gpt.GPTConfig(**shape, pos_embedding=pos_embedding)


def exercising_weights(cfg, seed=0):
    """GPT-2 initialisation plus random LayerNorm scales and biases: the plain initialisation
    has unit scales and zero biases, which would hide a bias or LayerNorm bug."""
    weights = random_weights(cfg, seed)
    rng = np.random.default_rng(seed + 1000)
    for name, value in weights.items():
        if name.endswith(".bias"):
            weights[name] = (rng.standard_normal(value.shape) * 0.02).astype(np.float32)
        elif name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            weights[name] = (1.0 + rng.standard_normal(value.shape) * 0.1).astype(np.float32)
    return weights


def token_ids(cfg, length, seed=0):
    return np.random.default_rng(seed).integers(0, cfg.vocab_size, size=length)


def relative_error(actual, expected):
    return float(np.abs(np.asarray(actual) - expected).max() / np.abs(expected).max())
