"""The CUDA target's kernels, their own arithmetic, checked without a GPU: every launch of every
program (forward, prefill, decode; f32 and bf16; GPT-2 and the Llama family) is run from its
`gpu.func` source by an SPMD interpreter (gpu_interpreter.py: all threads in lockstep, masks for
divergence, shuffles within warps, workgroup memory per block) and compared with
gpt_runtime.emulator's numpy result for the same launch from the same memory. The emulator is
checked against the CPU compiler by test_gpu_programs.py; on a GPU, tools/gpu/gpu_localize.py makes
the same comparison with the PTX."""

import copy

import numpy as np
import pytest

import gpt
from gpt import gpu_export
from gpt.config import RopeScaling
from gpt_runtime import emulator
from gpu_interpreter import argument_arrays, parse_globals, run_launch
from perturbed_models import perturbed_model

SHAPES = {
    # A 80-position cache: the step programs split attention over 16 warps (forward, 12 keys: 1).
    "gpt2": dict(n_layer=1, n_head=2, n_embd=64, vocab_size=70, block_size=80),
    # Head size 20: the attention kernel's idle lanes; width 80: ragged norm and gather blocks.
    "ragged-head": dict(n_layer=1, n_head=4, n_embd=80, vocab_size=50, block_size=72),
    "llama": dict(
        architecture="llama",
        n_layer=1,
        n_head=4,
        n_kv_head=2,
        n_embd=128,
        # FFN 1056: the down projection's matvec runs its unrolled trips (512 values a lane-wide
        # stride in f32, 1024 in bf16) and then a ragged tail of single loads.
        n_ff=1056,
        vocab_size=70,
        block_size=48,
        tied_head=False,
        rope_layout="interleaved",
        rope_scaling=RopeScaling(
            factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8
        ),
    ),
}
TOKENS = (1, 12)  # 12 rows: the tiled matmul (a partial 64-row tile), 1: the matvec


def model_for(shape):
    return perturbed_model(gpt.GPTConfig(**SHAPES[shape]), seed=4, perturbation_seed=9)


def check_program(parts, memory, program, inputs):
    """Runs `program` launch by launch in the interpreter; each launch's output must match the
    emulator's from the same starting memory. Returns the worst relative difference."""
    module, globals_ = parts["gpu"], parse_globals(parts["gpu"])
    emulator.write_inputs(memory, program, **inputs)
    worst = 0.0
    for index, launch in enumerate(program["launches"]):
        reference = copy.deepcopy(memory)
        region, count = emulator.emulate_launch(reference, launch)
        run_launch(module, globals_, launch, argument_arrays(module, launch["kernel"], memory, launch["args"]))
        got, want = memory.floats(region, count), reference.floats(region, count)
        error = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
        assert np.isfinite(got).all() and error < 1e-4, (index, launch["kernel"], error)
        worst = max(worst, error)
    return worst


@pytest.mark.parametrize("weights", ["f32", "bf16"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_kernel_matches_the_emulator(shape, weights):
    model = model_for(shape)
    parts = gpu_export.compile_artifact(model, "cuda:sm_90", TOKENS, weights)
    manifest = parts["manifest"]
    tensors = gpu_export.stored_weights(manifest, model._compiler_weights())
    memory = emulator.Memory(manifest, {name: array for name, (_, array) in tensors.items()})
    programs = {(p["entry"], p["tokens"]): p for p in manifest["programs"]}
    vocab = model.config.vocab_size
    rng = np.random.default_rng(3)
    ids = rng.integers(0, vocab, size=9)
    check_program(parts, memory, programs["forward", 12], dict(ids=ids, positions=np.arange(12)))
    check_program(parts, memory, programs["forward", 1], dict(ids=ids[:1], positions=[0]))
    # Prefill 9 tokens padded to 12, then two decode steps against the cache they filled.
    check_program(
        parts, memory, programs["step", 12], dict(ids=ids, positions=np.arange(12), last_row=8, cache_offset=0)
    )
    for position in (9, 10):
        token = rng.integers(0, vocab, size=1)
        check_program(
            parts, memory, programs["step", 1], dict(ids=token, positions=[position], last_row=0, cache_offset=position)
        )
