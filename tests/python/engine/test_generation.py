"""KV-cached prefill/decode against the uncached forward pass, the cache's contract, and generate()."""

import dataclasses
import re
import threading

import numpy as np
import pytest

import gpt
from gpt.cli import EMBEDDED_MODEL
from shapes import GPT2_SMALL, MID, NANO, RTOL, config, exercising_weights, relative_error, token_ids

SHAPES = [("nano", NANO), ("mid", MID), ("gpt2-small", GPT2_SMALL)]


@pytest.mark.parametrize("pos_embedding", ["learned", "rope"])
@pytest.mark.parametrize("name, shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_prefill_then_100_decode_steps_match_forward(name, shape, pos_embedding):
    cfg = config(shape, pos_embedding)
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg, seed=21))
    sequence = token_ids(cfg, 116, seed=5)  # 16 prompt tokens + 100 decoded ones
    # Causal attention: row t of one forward over the whole sequence is the logits after t + 1 tokens.
    expected = model.forward(sequence)
    cache = model.new_cache()
    logits = model.prefill(sequence[:16], cache)
    assert len(cache) == 16
    assert relative_error(logits, expected[15]) < RTOL
    for t in range(16, 116):
        logits = model.decode(int(sequence[t]), cache)
        assert relative_error(logits, expected[t]) < RTOL, f"decode step at position {t}"
    assert len(cache) == 116


@pytest.mark.parametrize("pos_embedding", ["learned", "rope"])
def test_greedy_generation_with_and_without_cache_is_identical(pos_embedding):
    cfg = config(MID, pos_embedding)
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg, seed=2))
    prompt = token_ids(cfg, 16, seed=3)
    cached = model.generate(prompt, max_new_tokens=40)
    assert cached == model.generate(prompt, max_new_tokens=40, use_cache=False)
    assert len(cached) == 40


def test_interleaved_caches_equal_separate_runs():
    cfg = config(NANO, "rope")
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg))
    prompts = [token_ids(cfg, n, seed=n) for n in (5, 11, 3)]
    tokens = [token_ids(cfg, 20, seed=100 + i) for i in range(3)]

    def run_alone(i):
        cache = model.new_cache(64)
        out = [model.prefill(prompts[i], cache)]
        out += [model.decode(int(t), cache) for t in tokens[i]]
        return np.stack(out)

    alone = [run_alone(i) for i in range(3)]
    caches = [model.new_cache(64) for _ in range(3)]
    together = [[model.prefill(prompts[i], caches[i])] for i in range(3)]
    for step in range(20):
        for i in (2, 0, 1):
            together[i].append(model.decode(int(tokens[i][step]), caches[i]))
    for i in range(3):
        np.testing.assert_array_equal(np.stack(together[i]), alone[i])


def test_chunked_prefill_equals_one_prefill():
    cfg = config(NANO)
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg))
    ids = token_ids(cfg, 30)
    one, two = model.new_cache(), model.new_cache()
    whole = model.prefill(ids, one)
    model.prefill(ids[:13], two)
    assert relative_error(model.prefill(ids[13:], two), whole) < RTOL
    assert len(one) == len(two) == 30


def test_prefill_near_the_end_of_the_context_does_not_overflow():
    """17 tokens at position 104 of a 128-position context: the 32-token bucket would not fit, so
    the step is compiled for exactly 17 tokens; the logits still match forward. A cache of 64
    positions runs the context's programs (its slots are the context's), so the 17 tokens it
    takes at position 40 fill a bucket of 32."""
    cfg = config(NANO)
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg))
    ids = token_ids(cfg, 121)
    cache = model.new_cache()
    model.prefill(ids[:104], cache)
    logits = model.prefill(ids[104:], cache)
    assert (17, 128) in model.compiled_steps()
    assert relative_error(logits, model.forward(ids)[-1]) < RTOL
    short = model.new_cache(64)
    model.prefill(ids[:40], short)
    assert relative_error(model.prefill(ids[40:57], short), model.forward(ids[:57])[-1]) < RTOL
    assert (32, 128) in model.compiled_steps() and short.slots == 128


def test_decode_never_recompiles_as_the_position_grows():
    cfg = config(NANO)
    model = gpt.GPT.random(cfg)
    cache = model.new_cache(128)
    model.prefill([1, 2, 3], cache)
    model.decode(4, cache)
    compiled = model.compiled_steps()
    for t in range(60):
        model.decode(t % 256, cache)
    assert model.compiled_steps() == compiled
    assert (1, 128) in compiled


@pytest.mark.parametrize("pipeline", ["baseline", "default"])
def test_decode_never_reads_key_blocks_past_its_position(pipeline):
    """Fused attention walks the cache in blocks of 32 positions and stops after the block that
    holds the current position. Poisoning every later block with NaN (which any read would
    spread through 0 * NaN) must leave decode's logits finite and correct."""
    cfg = config(NANO)
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg), gpt.CompileOptions(pipeline=pipeline))
    ids = token_ids(cfg, 6)
    expected = model.forward(ids)[-1]
    cache = model.new_cache(128)
    model.prefill(ids[:5], cache)
    cache._keys[:, :, 32:] = np.nan
    cache._values[:, :, 32:] = np.nan
    logits = model.decode(int(ids[5]), cache)
    assert np.isfinite(logits).all()
    assert relative_error(logits, expected) < RTOL


# What programs call for heap buffers: the workspace of cc/runtime/support/Workspace.cpp.
HEAP = {"_mlir_memref_to_llvm_alloc", "_mlir_memref_to_llvm_aligned_alloc", "_mlir_memref_to_llvm_free"}


def _callees(ir):
    return set(re.findall(r"llvm\.call @(\w+)", ir))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name, shape", [("nano", NANO), ("mid", MID)])
def test_decode_step_never_allocates_on_the_heap(name, shape, threads):
    """The decode program as the JIT compiles it (LLVM dialect) allocates nothing on the heap (the
    runtime's workspace, cc/runtime/support/Workspace.cpp, or malloc): its temporaries live in its
    stack frame and its logits in the buffer the runtime passes. The forward pass over 128 tokens,
    whose activations are too large for the stack, shows that the check sees heap allocation where
    there is some, and that it goes through the workspace."""
    model = gpt.GPT.random(config(shape), options=gpt.CompileOptions(threads=threads))
    step = _callees(model.ir("llvm", entry="step", cache_len=shape["block_size"]))
    assert "gpt_block_cached" in step
    assert not step & (HEAP | {"malloc", "aligned_alloc", "free"}), step
    if name == "mid":
        forward = _callees(model.ir("llvm", entry="forward", seq_len=128))
        assert forward & HEAP and not forward & {"malloc", "aligned_alloc", "free"}, forward
    # And the program still computes the right thing.
    ids = token_ids(model.config, 5)
    cache = model.new_cache()
    model.prefill(ids[:4], cache)
    assert relative_error(model.decode(int(ids[4]), cache), model.forward(ids)[-1]) < RTOL


# -- the cache's contract ---------------------------------------------------------------------


def test_cache_properties_and_reset():
    cfg = config(NANO)
    model = gpt.GPT.random(cfg)
    cache = model.new_cache()
    assert cache.max_len == cfg.block_size and len(cache) == 0 and cache.model is model
    first = model.prefill([7, 8, 9], cache)
    cache.reset()
    assert len(cache) == 0
    np.testing.assert_array_equal(model.prefill([7, 8, 9], cache), first)


def test_full_cache_raises_and_is_unchanged():
    cfg = config(NANO)
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg))
    cache = model.new_cache(8)
    model.prefill([1, 2, 3, 4, 5, 6], cache)
    keys, values = cache._keys.copy(), cache._values.copy()
    with pytest.raises(ValueError, match=r"KV cache is full: 6 \+ 3 tokens exceed max_len=8"):
        model.prefill([1, 2, 3], cache)
    model.decode(7, cache)
    model.decode(8, cache)
    keys, values = cache._keys.copy(), cache._values.copy()
    with pytest.raises(ValueError, match="KV cache is full"):
        model.decode(9, cache)
    assert len(cache) == 8
    np.testing.assert_array_equal(cache._keys, keys)
    np.testing.assert_array_equal(cache._values, values)


class _FailingStep:
    """The model's compiled entry points, except that the cached step raises."""

    def __init__(self, compiled):
        self._compiled = compiled

    def __getattr__(self, name):
        return getattr(self._compiled, name)

    def step(self, *args):
        raise RuntimeError("step failed")


def test_a_step_that_raises_does_not_advance_the_cache(monkeypatch):
    cfg = config(NANO)
    model = gpt.GPT.random(cfg)
    cache = model.new_cache(16)
    model.prefill([1, 2, 3], cache)
    with monkeypatch.context() as patch:
        patch.setattr(model, "_compiled", _FailingStep(model._compiled))
        with pytest.raises(RuntimeError, match="step failed"):
            model.prefill([4, 5], cache)
        with pytest.raises(RuntimeError, match="step failed"):
            model.decode(4, cache)
    assert len(cache) == 3
    model.decode(4, cache)
    assert len(cache) == 4


def test_cache_of_another_model_is_rejected():
    cfg = config(NANO)
    a, b = gpt.GPT.random(cfg, seed=0), gpt.GPT.random(cfg, seed=1)
    cache = a.new_cache()
    with pytest.raises(ValueError, match="belongs to another model"):
        b.prefill([1, 2], cache)
    with pytest.raises(ValueError, match="belongs to another model"):
        b.decode(1, cache)
    assert len(cache) == 0


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda m, c: m.decode(256, c), ValueError, "token id 256 is out of range"),
        (lambda m, c: m.decode(1.0, c), TypeError, "token must be an int"),
        (lambda m, c: m.prefill([], c), ValueError, "at least one token"),
        (lambda m, c: m.prefill([1], object()), TypeError, "cache must be a gpt.KVCache"),
        (lambda m, c: m.new_cache(0), ValueError, r"max_len must be an int in \[1, block_size=128\]"),
        (lambda m, c: m.new_cache(129), ValueError, "max_len must be"),
    ],
)
def test_bad_cached_calls_raise(call, error, message):
    model = gpt.GPT.random(config(NANO))
    cache = model.new_cache()
    with pytest.raises(error, match=message):
        call(model, cache)
    assert len(cache) == 0


# -- generate ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nano():
    cfg = config(NANO)
    return gpt.GPT.from_weights(cfg, exercising_weights(cfg, seed=8))


def test_same_seed_same_tokens_different_seed_different_tokens(nano):
    kwargs = dict(max_new_tokens=30, temperature=1.0, top_k=50, top_p=0.95)
    a = nano.generate([1, 2, 3], seed=7, **kwargs)
    assert a == nano.generate([1, 2, 3], seed=7, **kwargs)
    assert a != nano.generate([1, 2, 3], seed=8, **kwargs)
    assert a == nano.generate([1, 2, 3], seed=7, use_cache=False, **kwargs)


def test_stream_yields_the_same_tokens(nano):
    kwargs = dict(max_new_tokens=25, temperature=0.9, top_k=20, seed=3)
    stream = nano.generate([5, 6], stream=True, **kwargs)
    assert not isinstance(stream, list)
    assert list(stream) == nano.generate([5, 6], **kwargs)


def test_stop_token_ends_generation_and_is_not_returned(nano):
    full = nano.generate([1, 2, 3], max_new_tokens=30, temperature=1.0, seed=11)
    stop_at = full[10]
    first = full.index(stop_at)
    assert nano.generate([1, 2, 3], max_new_tokens=30, temperature=1.0, seed=11, stop=[stop_at]) == full[:first]
    streamed = list(nano.generate([1, 2, 3], max_new_tokens=30, temperature=1.0, seed=11, stop=[stop_at], stream=True))
    assert streamed == full[:first] and stop_at not in streamed


def test_last_generation_counts_the_tokens_of_the_last_run():
    model = gpt.GPT.random(config(NANO))
    assert model.last_generation is None
    model.generate([1, 2, 3], max_new_tokens=7)
    stats = model.last_generation
    assert isinstance(stats, gpt.GenerationStats)
    assert (stats.prompt_tokens, stats.generated_tokens) == (3, 7)
    assert min(stats.prompt_seconds, stats.generate_seconds, stats.compile_seconds) >= 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.generated_tokens = 0
    full = model.generate([4, 5], max_new_tokens=10, temperature=1.0, seed=1)
    stop_at = full[6]
    model.generate([4, 5], max_new_tokens=10, temperature=1.0, seed=1, stop=[stop_at])
    assert model.last_generation.prompt_tokens == 2
    assert model.last_generation.generated_tokens == full.index(stop_at)  # the stop token is not counted
    stream = model.generate([6, 7, 8, 9], max_new_tokens=5, stream=True)
    next(stream)
    next(stream)
    assert (model.last_generation.prompt_tokens, model.last_generation.generated_tokens) == (4, 2)
    list(stream)
    assert model.last_generation.generated_tokens == 5
    assert stats.generated_tokens == 7  # an earlier record is a snapshot, not a view


def test_generate_returns_new_tokens_only(nano):
    out = nano.generate([9, 9, 9], max_new_tokens=7)
    assert len(out) == 7 and all(isinstance(t, int) for t in out)
    assert nano.generate([9, 9, 9], max_new_tokens=0) == []


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(max_new_tokens=126), r"3 prompt tokens \+ max_new_tokens=126 exceed block_size=128"),
        (dict(max_new_tokens=-1), "max_new_tokens must be an int >= 0"),
        (dict(max_new_tokens=5, temperature=-0.5), "temperature must be a finite number >= 0"),
        (dict(max_new_tokens=5, temperature=1e-310), "temperature must be 0 .greedy. or at least 1e-06"),
        (dict(max_new_tokens=5, temperature=True), "temperature must be a finite number >= 0"),
        (dict(max_new_tokens=5, temperature=1.0, top_k=0), "top_k must be None or a positive int"),
        (dict(max_new_tokens=5, temperature=1.0, top_p=1.5), r"top_p must be None or in \(0, 1\]"),
        (dict(max_new_tokens=5, stop=[300]), "token id 300 is out of range"),
    ],
)
def test_bad_generate_arguments_raise_before_running(nano, kwargs, message):
    with pytest.raises(ValueError, match=message):
        nano.generate([1, 2, 3], stream=True, **kwargs)  # raised at the call, not at the first next()


def test_a_cache_in_use_by_another_call_is_refused_and_unchanged():
    model = gpt.GPT.random(config(NANO), options=gpt.CompileOptions(disk_cache=False))
    cache = model.new_cache(32)
    model.prefill([1, 2, 3], cache)
    keys = cache._keys.copy()
    # A step running in another thread holds the cache until told to finish.
    holding, finish = threading.Event(), threading.Event()

    def step_in_another_thread():
        cache._claim.run(lambda: (holding.set(), finish.wait(10)))

    other = threading.Thread(target=step_in_another_thread)
    other.start()
    holding.wait(10)
    with pytest.raises(RuntimeError, match="KVCache is in use by another call"):
        model.decode(4, cache)
    with pytest.raises(RuntimeError, match="KVCache is in use by another call"):
        cache.reset()
    finish.set()
    other.join()
    assert len(cache) == 3 and np.array_equal(cache._keys, keys)
    model.decode(4, cache)
    assert len(cache) == 4


def test_two_threads_on_one_cache_never_corrupt_it():
    model = gpt.GPT.random(config(NANO), options=gpt.CompileOptions(disk_cache=False, threads=1))
    cache = model.new_cache(128)
    model.prefill([1], cache)
    outcomes = []

    def decode_many():
        for token in range(60):
            try:
                model.decode(token % 256, cache)
                outcomes.append("ok")
            except RuntimeError:
                outcomes.append("busy")
            except ValueError:
                outcomes.append("full")

    threads = [threading.Thread(target=decode_many) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Every successful step added exactly one position, and each one was written.
    assert len(cache) == 1 + outcomes.count("ok") <= cache.max_len
    written = np.abs(cache._keys[:, :, : len(cache)]).sum(axis=(0, 1, 3))
    assert np.all(written > 0)


def test_a_model_that_knows_its_eos_stops_there_unless_told_not_to(tmp_path):
    """A HF Llama directory's eos_token_id (generation_config.json's and config.json's) ends
    generate() by default, where transformers' generate ends; `stop_at_eos=False` goes on. Models
    made from a config, and GPT-2 checkpoints, have no end_of_generation: unchanged."""
    import json

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    shape = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    hf_config = LlamaConfig(
        vocab_size=300, intermediate_size=96, max_position_embeddings=128, initializer_range=0.3, **shape
    )
    LlamaForCausalLM(hf_config).save_pretrained(tmp_path, safe_serialization=True)
    prompt = [5, 17, 42, 9]
    full = gpt.GPT.from_pretrained(str(tmp_path)).generate(prompt, 24, stop_at_eos=False)
    k = next(k for k in range(3, 24) if full[k] not in full[:k])
    never = next(t for t in range(300) if t not in full)  # config.json's EOS: never reached here
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(saved | {"eos_token_id": never}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [full[k], 999]}))

    model = gpt.GPT.from_pretrained(str(tmp_path))
    assert model.end_of_generation == {full[k], never}  # 999 is past the vocabulary: it cannot end anything
    assert model.generate(prompt, 24) == full[:k]
    assert list(model.generate(prompt, 24, stream=True)) == full[:k]
    assert model.generate(prompt, 24, use_cache=False) == full[:k]
    assert model.generate(prompt, 24, stop_at_eos=False) == full
    assert model.generate(prompt, 24, stop=[full[1]]) == full[:1]  # `stop` adds to the EOS
    with torch.no_grad():
        theirs = LlamaForCausalLM.from_pretrained(tmp_path).eval()
        expected = theirs.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)[0, len(prompt) :]
    assert expected.tolist() == full[:k] + [full[k]]  # transformers returns the EOS it stopped at
    with pytest.raises(TypeError, match="stop_at_eos must be a bool"):
        model.generate(prompt, 24, stop_at_eos=None)

    assert gpt.GPT.random(config(NANO)).end_of_generation == frozenset()
    # The embedded byte-level model's config.json names a newline its eos_token_id: GPT-2's is
    # <|endoftext|> between documents, and text goes on past it.
    assert gpt.GPT.from_pretrained(EMBEDDED_MODEL).end_of_generation == frozenset()
