"""Random models whose biases are nonzero and norm scales away from 1, so that a dropped bias or
a weight written as another shows in the GPU tests' comparisons (GPT-2 initialisation otherwise)."""

import numpy as np

import gpt
from gpt import architecture_weights
from gpt.weights import random_weights


def perturbed_model(config: gpt.GPTConfig, seed: int, perturbation_seed: int) -> gpt.GPT:
    rng = np.random.default_rng(perturbation_seed)
    weights = random_weights(config, seed=seed)  # the compiler's parameters
    for name, value in weights.items():
        if name.endswith(".bias"):
            weights[name] = rng.normal(0.0, 0.05, value.shape).astype(np.float32)
        elif value.ndim == 1:
            weights[name] = (1.0 + rng.normal(0.0, 0.2, value.shape)).astype(np.float32)
    hf = weights if config.architecture == "gpt2" else architecture_weights.from_compiler(config, weights)
    return gpt.GPT.from_weights(config, hf)
