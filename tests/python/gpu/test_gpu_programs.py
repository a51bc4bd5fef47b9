"""The CUDA target's programs, run by gpt_runtime's numpy emulator (each launch's `op` computed on
host buffers, no GPU) against the CPU compiler's logits on the same weights: this checks the
dispatch formation (buffer bindings, offsets, strides, fused epilogues, the cache writes and the
last-row selection) of forward, prefill and decode, at several shapes, bucket paddings and both
weight dtypes. The kernels' own arithmetic is checked on a GPU by tools/gpu/gpu_localize.py."""

import numpy as np
import pytest

import gpt
from gpt import gpu_export, models
from gpt.config import RopeScaling
from gpt_runtime import emulator
from perturbed_models import perturbed_model

SHAPES = {
    "one-head": dict(n_layer=1, n_head=1, n_embd=32, vocab_size=50, block_size=64),
    # A head size (20) that is no multiple of the warp: the attention kernel's idle lanes.
    "ragged-head": dict(n_layer=1, n_head=4, n_embd=80, vocab_size=70, block_size=64),
    "gpt2-like": dict(n_layer=2, n_head=4, n_embd=128, vocab_size=300, block_size=64),
    "odd-vocab": dict(n_layer=3, n_head=6, n_embd=192, vocab_size=1000, block_size=96),
    # The Llama family: RMSNorm, rotary positions (both layouts, Llama 3's scaling), SwiGLU,
    # grouped-query attention, an untied head; Qwen2's q/k/v biases.
    "llama-gqa": dict(
        architecture="llama", n_layer=2, n_head=4, n_kv_head=2, n_embd=128, n_ff=192, vocab_size=300, block_size=64
    ),
    "llama-untied-interleaved": dict(
        architecture="llama",
        n_layer=2,
        n_head=4,
        n_kv_head=1,
        n_embd=128,
        n_ff=160,
        vocab_size=260,
        block_size=64,
        tied_head=False,
        rope_layout="interleaved",
        rope_base=500000.0,
        rope_scaling=RopeScaling(
            factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=32
        ),
    ),
    "qwen2": dict(
        architecture="qwen2", n_layer=2, n_head=4, n_kv_head=2, n_embd=128, n_ff=192, vocab_size=300, block_size=64
    ),
}
TOKENS = (1, 8, 32)
# f32 programs compute what the CPU does up to summation order; bf16 ones round the matmul weights.
TOLERANCE = {"f32": 2e-5, "bf16": 1e-2}


def relative_error(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


def model_for(shape):
    return perturbed_model(gpt.GPTConfig(**SHAPES[shape]), seed=2, perturbation_seed=5)


@pytest.fixture(scope="module", params=list(SHAPES))
def model(request):
    return model_for(request.param)


def emulated(model, weights):
    parts = gpu_export.compile_artifact(model, "cuda:sm_90", TOKENS, weights)
    manifest = parts["manifest"]
    tensors = gpu_export.stored_weights(manifest, model._compiler_weights())
    return manifest, emulator.Memory(manifest, {name: array for name, (_, array) in tensors.items()})


def program(manifest, entry, tokens):
    return next(p for p in manifest["programs"] if p["entry"] == entry and p["tokens"] == tokens)


@pytest.mark.parametrize("weights", ["f32", "bf16"])
@pytest.mark.parametrize("count", [1, 5, 8, 27])
def test_forward_matches_the_cpu(model, weights, count):
    manifest, memory = emulated(model, weights)
    ids = np.random.default_rng(count).integers(0, model.config.vocab_size, size=count)
    bucket = min(t for t in TOKENS if t >= count)
    forward = program(manifest, "forward", bucket)
    emulator.write_inputs(memory, forward, ids, np.arange(bucket))
    emulator.run_program(memory, forward)
    got = emulator.read_logits(memory, forward, count, model.config.vocab_size)
    assert relative_error(got, model.forward(ids)) < TOLERANCE[weights]


@pytest.mark.parametrize("weights", ["f32", "bf16"])
def test_prefill_then_decode_match_the_cpu(model, weights):
    """A 13-token prefill padded to the 32-token step program, then 4 decode steps, each checked."""
    manifest, memory = emulated(model, weights)
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, model.config.vocab_size, size=13)
    cache = model.new_cache()
    want = model.prefill(prompt, cache)
    prefill = program(manifest, "step", 32)
    emulator.write_inputs(memory, prefill, prompt, np.arange(32), last_row=len(prompt) - 1, cache_offset=0)
    emulator.run_program(memory, prefill)
    assert (
        relative_error(emulator.read_logits(memory, prefill, 1, model.config.vocab_size)[0], want) < TOLERANCE[weights]
    )
    decode = program(manifest, "step", 1)
    position = len(prompt)
    for token in rng.integers(0, model.config.vocab_size, size=4):
        want = model.decode(int(token), cache)
        emulator.write_inputs(memory, decode, [token], [position], last_row=0, cache_offset=position)
        emulator.run_program(memory, decode)
        got = emulator.read_logits(memory, decode, 1, model.config.vocab_size)[0]
        assert relative_error(got, want) < TOLERANCE[weights]
        position += 1


def test_padded_rows_past_the_cache_are_not_written():
    """A 32-token step program at offset 50 of a 64-position cache: rows 50..63 take the new keys,
    and nothing is written past the cache (the emulator's cache_write follows the kernel's bound)."""
    model = model_for("gpt2-like")
    manifest, memory = emulated(model, "f32")
    step = program(manifest, "step", 32)
    ids = np.arange(5)
    emulator.write_inputs(memory, step, ids, 50 + np.arange(32) % 14, last_row=4, cache_offset=50)
    emulator.run_program(memory, step)
    key = manifest["cache"]["layers"][0]["key"]
    cache = memory.buffers[key].view(np.float32).reshape(4, 64, 32)
    assert np.abs(cache[:, 50:55]).max() > 0
    assert not np.abs(cache[:, :50]).any()


def test_unsupported_ops_are_named():
    config = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=100, block_size=32, attention_window=8)
    with pytest.raises(ValueError, match="no mask or window"):
        gpu_export.compile_artifact(gpt.GPT.random(config), "cuda:sm_90", (1,))


def test_smollm2_runs_through_the_gpu_programs():
    """The real model (SmolLM2-135M-Instruct from its GGUF file: 30 layers, GQA 9/3, tied head):
    its bf16 GPU programs, emulated, against the CPU model's logits and greedy choice."""
    # The file's values in f32 (the default, "auto", would run the CPU model in q4_1).
    model = gpt.GPT.from_gguf(models.find("smollm2"), gpt.CompileOptions(weights="f32"))
    ids = model.tokenizer.encode("The capital of France is")
    parts = gpu_export.compile_artifact(model, "cuda:sm_90", (8,), "bf16")
    manifest = parts["manifest"]
    tensors = gpu_export.stored_weights(manifest, model._compiler_weights())
    memory = emulator.Memory(manifest, {name: array for name, (_, array) in tensors.items()})
    forward = program(manifest, "forward", 8)
    emulator.write_inputs(memory, forward, ids, np.arange(8))
    emulator.run_program(memory, forward)
    got = emulator.read_logits(memory, forward, len(ids), model.config.vocab_size)
    want = model.forward(ids)
    assert relative_error(got, want) < 2e-2
    assert np.argmax(got[-1]) == np.argmax(want[-1])


@pytest.mark.parametrize("shape", ["gpt2-like", "llama-gqa", "llama-untied-interleaved", "qwen2"])
def test_hf_recipes_rebuild_the_stored_weights(shape):
    """Each weight buffer's `hf` recipe, applied to the model's HF-named weights (state_dict), gives
    exactly the tensor the artifact stores: what a device check relies on to fill a weight-less
    artifact from a HF model."""
    model = model_for(shape)
    manifest = gpu_export.compile_artifact(model, "cuda:sm_90", (1,), "f32")["manifest"]
    stored = gpu_export.stored_weights(manifest, model._compiler_weights())
    hf = model.state_dict()
    for buffer in manifest["buffers"]:
        if buffer["role"] != "weight":
            continue
        recipe = buffer["hf"]
        tensors = [hf[name].T if recipe["transpose"] else hf[name] for name in recipe["names"]]
        rebuilt = np.concatenate(tensors, axis=recipe["axis"]) if len(tensors) > 1 else tensors[0]
        np.testing.assert_array_equal(rebuilt, stored[buffer["name"]][1], err_msg=buffer["name"])
