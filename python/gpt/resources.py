"""Memory a model needs, checked before anything is allocated.

A configuration is plain numbers, so a typo (or a hostile config.json / GGUF header) can ask for
terabytes; numpy would then fail somewhere inside initialisation, or the kernel would kill the
process. Instead every constructor asks `check_fits_in_memory` first, which refuses with an error
that names what the model would need and what this process may use.
"""

import dataclasses
import os
import resource

from gpt import _gpt
from gpt.config import GPTConfig

# Bytes per matmul weight in each format (q8_0: 32 one-byte codes + an fp16 scale per block of
# 32; q4_0: 32 four-bit codes + the scale; q4_1: the codes, the scale and an fp16 min).
_BYTES_PER_WEIGHT = {"f32": 4.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32}
# The LM head's format: 4-bit models keep their tied embedding in q8_0.
_HEAD_FORMAT = {"f32": "f32", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q8_0", "q4_1": "q8_0"}
_GIB = 2**30


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a model of a configuration holds once built and running at full length."""

    weights_f32: int  # every parameter as the float32 arrays a loader or initialiser makes
    stored_weights: int  # the compiled model's own copies: packed matmul weights and LM head
    kv_cache: int  # one cache of block_size positions
    activations: int  # forward over block_size tokens: logits, attention scores, hidden states

    @property
    def total(self) -> int:
        return self.weights_f32 + self.stored_weights + self.kv_cache + self.activations


def estimate_memory(config: GPTConfig, weights: str = "f32", target_cpu: str = "host") -> MemoryEstimate:
    """Computed from the shapes alone (nothing is allocated), as lower bounds of what a model needs."""
    layers, width, vocab, length = config.n_layer, config.n_embd, config.vocab_size, config.block_size
    multiple = _gpt.tile_parameters(target_cpu)["vocab_multiple"]
    padded_vocab = -(-vocab // multiple) * multiple  # the LM head's columns (GPTConfig::paddedVocabSize)
    kv = config.n_kv_head * config.head_size  # the width of keys and values (grouped-query attention)
    up = 2 * config.n_ff if config.mlp == "swiglu" else config.n_ff  # SwiGLU's gate and up
    # q, k, v, projection, the MLP's up (and gate) and down.
    matmul = (width * (width + 2 * kv) + width * width + width * up + config.n_ff * width) * layers
    other = 13 * width * layers + vocab * width + 2 * width
    if config.pos_embedding == "learned":
        other += length * width
    if not config.tied_head:
        other += vocab * width
    stored = matmul * _BYTES_PER_WEIGHT[weights] + width * padded_vocab * _BYTES_PER_WEIGHT[_HEAD_FORMAT[weights]]
    return MemoryEstimate(
        weights_f32=4 * (matmul + other),
        stored_weights=int(stored),
        kv_cache=4 * 2 * layers * length * kv,
        activations=4 * (length * padded_vocab + config.n_head * length * length + 16 * length * width),
    )


def memory_limit() -> tuple[int, str]:
    """(bytes this process may use, where the bound comes from): the smallest of the machine's
    memory, the cgroup's limit and the address-space rlimit minus what is already mapped."""
    limits = []
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    limits.append((int(line.split()[1]) * 1024, "the machine's memory"))
    except OSError:
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**62:
            limits.append((int(text), f"the cgroup limit ({path})"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append((max(0, soft - _mapped_bytes()), "the address-space limit (RLIMIT_AS) less what is mapped"))
    if not limits:
        return 2**63, "no known limit"
    return min(limits)


def check_fits_in_memory(config: GPTConfig, weights: str = "f32", target_cpu: str = "host") -> MemoryEstimate:
    """Raises MemoryError, naming the sizes, when a model of `config` would not fit in memory."""
    estimate = estimate_memory(config, weights, target_cpu)
    limit, source = memory_limit()
    if estimate.total > limit:
        parts = ", ".join(
            f"{name.replace('_', ' ')} {getattr(estimate, name) / _GIB:.2f}"
            for name in ("weights_f32", "stored_weights", "kv_cache", "activations")
        )
        raise MemoryError(
            f"{config} with {weights} weights needs about {estimate.total / _GIB:.2f} GiB ({parts} GiB), "
            f"more than the {limit / _GIB:.2f} GiB this process can use ({source})"
        )
    return estimate


def _mapped_bytes() -> int:
    try:
        with open(f"/proc/{os.getpid()}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
