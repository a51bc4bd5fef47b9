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
from gpt.kept_formats import FORMAT_ROWS, KEPT_QUANTIZED

# Bytes per matmul weight the compiled model stores in each format (lane words and scales: the
# compiler's table), and a GGUF file's blocks of it hold (its block's bytes over its weights).
_BYTES_PER_WEIGHT = {row.name: row.stored_bytes_per_weight for row in FORMAT_ROWS}
_FILE_BYTES_PER_WEIGHT = {row.name: row.block_bytes / row.block_values for row in FORMAT_ROWS}
# The LM head's format: 4-bit models keep their tied embedding in q8_0.
_HEAD_FORMAT = {row.name: row.head_format for row in FORMAT_ROWS}
# Bytes per cached key or value in each KV cache format (CompileOptions.kv_cache; q8_0 as weights).
_BYTES_PER_CACHED_VALUE = {"f32": 4.0, "bf16": 2.0, "f16": 2.0, "q8_0": 34 / 32}
_GIB = 2**30


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a model of a configuration holds once built, with a cache of its whole context filled by
    one prefill. Attention is computed in tiles (online softmax, cc/conversion/OnlineSoftmax.h), so
    no [T, T] score matrix is ever held, and prefill computes the LM head for its last position only."""

    weights_f32: int  # the float32 arrays a loader or initialiser hands over (none for kept blocks)
    stored_weights: int  # the compiled model's own copies (packed matmul weights, LM head), and kept blocks
    kv_cache: int  # one cache of block_size positions, in the cache's format
    activations: int  # a prefill of block_size tokens: hidden states, q/k/v, the MLP's widest tensor

    @property
    def total(self) -> int:
        return self.weights_f32 + self.stored_weights + self.kv_cache + self.activations


def estimate_memory(
    config: GPTConfig,
    weights: str = "f32",
    target_cpu: str = "host",
    *,
    kv_cache: str = "f32",
    kept_quantized: bool = False,
) -> MemoryEstimate:
    """Computed from the shapes alone (nothing is allocated), as lower bounds of what a model needs.
    `kept_quantized`: the matmul weights (and a q8_0 embedding) arrive as a file's own blocks, which
    the model repacks with no float32 copy (GPT.from_gguf in the file's format), so they are counted
    once, in their format, instead of as float32 arrays beside the model's copy."""
    layers, width, vocab, length = config.n_layer, config.n_embd, config.vocab_size, config.block_size
    multiple = _gpt.tile_parameters(target_cpu)["vocab_multiple"]
    padded_vocab = -(-vocab // multiple) * multiple  # the LM head's columns (GPTConfig::paddedVocabSize)
    q = config.n_head * config.head_size  # the width of the queries (an explicit head_dim may differ from n_embd)
    kv = config.n_kv_head * config.head_size  # the width of keys and values (grouped-query attention)
    up = 2 * config.n_ff if config.mlp in ("swiglu", "geglu") else config.n_ff  # a gated MLP's gate and up
    # q, k, v, projection, the MLP's up (and gate) and down.
    matmul = (width * (q + 2 * kv) + q * width + width * up + config.n_ff * width) * layers
    embedding = vocab * width
    other = 13 * width * layers + 2 * width
    if config.pos_embedding == "learned":
        other += length * width
    if not config.tied_head:
        other += vocab * width
    head = width * padded_vocab * _BYTES_PER_WEIGHT[_HEAD_FORMAT[weights]]
    # A block-quantized untied model stores a q8_0 copy of its token table beside the head's.
    copies = 2 if not config.tied_head and weights in KEPT_QUANTIZED else 1
    stored = matmul * _BYTES_PER_WEIGHT[weights] + copies * head
    if kept_quantized:
        # The blocks are held while they are repacked. The [V, D] tables (the embedding, and an
        # untied head) are kept as q8_0 blocks (gpt.kept_formats converts Q6_K ones a row at a
        # time), with no float32 copy.
        tables = 1 if config.tied_head else 2
        given_f32 = other - (tables - 1) * vocab * width
        held_blocks = matmul * _FILE_BYTES_PER_WEIGHT[weights] + tables * embedding * _FILE_BYTES_PER_WEIGHT["q8_0"]
    else:
        given_f32, held_blocks = matmul + embedding + other, 0
    # Live at once in a prefill's layer: the residual stream and its normalized copy, q, k and v,
    # the attention output, and the MLP's up (and gate) activations; one row of logits.
    activations = length * (4 * width + 2 * kv + up) + padded_vocab
    return MemoryEstimate(
        weights_f32=4 * given_f32,
        stored_weights=int(stored + held_blocks),
        kv_cache=int(2 * layers * length * kv * _BYTES_PER_CACHED_VALUE[kv_cache]),
        activations=4 * activations,
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


def check_fits_in_memory(
    config: GPTConfig,
    weights: str = "f32",
    target_cpu: str = "host",
    *,
    kv_cache: str = "f32",
    kept_quantized: bool = False,
    loading: bool = False,
) -> MemoryEstimate:
    """Raises MemoryError, naming the sizes, when a model of `config` would not fit in memory (see
    estimate_memory for the arguments). The message says how to ask for less: a shorter context,
    a smaller cache format, fewer bytes per weight. `loading`: a loader's check before it reads a
    file's tensors, of the weights alone, since the context the model will serve (and so its cache)
    is the caller's choice, checked when the model is built (GPT(..., context=N))."""
    estimate = estimate_memory(config, weights, target_cpu, kv_cache=kv_cache, kept_quantized=kept_quantized)
    if loading:
        estimate = dataclasses.replace(estimate, kv_cache=0, activations=0)
    limit, source = memory_limit()
    if estimate.total > limit:
        labels = {
            "weights_f32": "weights f32",
            "stored_weights": "stored weights",
            "kv_cache": f"kv cache ({kv_cache})",
        }
        labels["activations"] = "activations"
        parts = ", ".join(f"{label} {getattr(estimate, name) / _GIB:.2f}" for name, label in labels.items())
        raise MemoryError(
            f"{config} with {weights} weights needs about {estimate.total / _GIB:.2f} GiB ({parts} GiB), more "
            f"than the {limit / _GIB:.2f} GiB this process can use ({source}); a shorter context (context=N, "
            f"--ctx N), a smaller KV cache format (kv_cache) or quantized weights need less"
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
