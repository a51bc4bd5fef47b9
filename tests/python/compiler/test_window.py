"""Sliding-window attention (GPTConfig.attention_window): forward numerics against the numpy
reference's dense window mask, the rolling KV cache (O(W) memory, cached generation equal to
recomputation, rope generation past block_size), and bad windows."""

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

import gpt
from reference import gpt2_logits
from shapes import NANO, RTOL, config, exercising_weights, relative_error, token_ids

LENGTH = 40  # longer than every window below but the last


def windowed(shape, pos_embedding, window, **changes):
    return dataclasses.replace(config(shape, pos_embedding), attention_window=window, **changes)


@pytest.mark.parametrize("pipeline", gpt.config.PIPELINES)
@pytest.mark.parametrize("pos_embedding", ["learned", "rope"])
@pytest.mark.parametrize("window", [1, 3, 16, LENGTH])
def test_forward_matches_reference(pipeline, pos_embedding, window):
    cfg = windowed(NANO, pos_embedding, window)
    weights = exercising_weights(cfg, seed=window)
    ids = token_ids(cfg, LENGTH, seed=window)
    logits = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(pipeline=pipeline)).forward(ids)
    expected = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, pos_embedding, window=window)
    assert relative_error(logits, expected) < RTOL


@pytest.mark.parametrize("pos_embedding", ["learned", "rope"])
def test_window_covering_the_sequence_is_causal_attention(pos_embedding):
    full = config(NANO, pos_embedding)
    weights = exercising_weights(full, seed=2)
    ids = token_ids(full, LENGTH, seed=2)
    causal = gpt.GPT.from_weights(full, weights).forward(ids)
    for window in (LENGTH, NANO["block_size"], 10**6):
        model = gpt.GPT.from_weights(dataclasses.replace(full, attention_window=window), weights)
        np.testing.assert_array_equal(model.forward(ids), causal)


def test_window_changes_the_result():
    """A window shorter than the sequence hides keys: the last logits differ from causal ones."""
    full = config(NANO)
    weights = exercising_weights(full)
    ids = token_ids(full, LENGTH)
    causal = gpt.GPT.from_weights(full, weights).forward(ids)[-1]
    local = gpt.GPT.from_weights(dataclasses.replace(full, attention_window=4), weights).forward(ids)[-1]
    assert np.abs(causal - local).max() > 1e-3


def test_ir_carries_the_window():
    cfg = windowed(NANO, "learned", 3)
    model = gpt.GPT.random(cfg)
    assert "window = 3 : i64" in model.ir("transformer")
    assert "window = 3 : i64" in model.ir("transformer", entry="step")
    assert "window" not in gpt.GPT.random(config(NANO)).ir("transformer")


@pytest.mark.parametrize("pos_embedding", ["learned", "rope"])
@pytest.mark.parametrize("window", [1, 3, 16])
def test_cache_holds_the_window(pos_embedding, window):
    model = gpt.GPT.random(windowed(NANO, pos_embedding, window))
    cache = model.new_cache()
    cfg = model.config
    assert cache.slots == window and cache.rolling
    assert cache._keys.shape == cache._values.shape == (cfg.n_layer, cfg.n_head, window, cfg.head_size)
    # A cache shorter than the window does not roll: it is full at max_len, as without a window.
    short = model.new_cache(max_len=1) if window > 1 else None
    if short is not None:
        assert short.slots == 1 and not short.rolling


def test_window_past_block_size_keeps_block_size_slots():
    model = gpt.GPT.random(windowed(NANO, "learned", 1000))
    cache = model.new_cache()
    assert cache.slots == NANO["block_size"] and not cache.rolling


@pytest.mark.parametrize("pos_embedding", ["learned", "rope"])
@pytest.mark.parametrize("window", [1, 3, 16])
def test_prefill_and_decode_match_reference(pos_embedding, window):
    """A prompt longer than the window, then decode steps well past it: every step's logits are
    the reference's last row for the sequence so far."""
    cfg = windowed(NANO, pos_embedding, window)
    weights = exercising_weights(cfg, seed=7)
    model = gpt.GPT.from_weights(cfg, weights)
    ids = token_ids(cfg, 60, seed=window)
    expected = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, pos_embedding, window=window)
    cache = model.new_cache()
    prompt = 20
    assert relative_error(model.prefill(ids[:prompt], cache), expected[prompt - 1]) < RTOL
    for position in range(prompt, len(ids)):
        logits = model.decode(int(ids[position]), cache)
        assert relative_error(logits, expected[position]) < RTOL, position
    assert len(cache) == len(ids)


@pytest.mark.parametrize("pipeline", gpt.config.PIPELINES)
@pytest.mark.parametrize("pos_embedding", ["learned", "rope"])
@pytest.mark.parametrize("window", [1, 3, 16])
def test_cached_generation_equals_recomputation(pipeline, pos_embedding, window):
    cfg = windowed(NANO, pos_embedding, window)
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg, seed=11), gpt.CompileOptions(pipeline=pipeline))
    prompt = token_ids(cfg, 21, seed=3)
    cached = model.generate(prompt, 50)
    assert cached == model.generate(prompt, 50, use_cache=False)
    sampled = dict(temperature=0.9, top_k=40, seed=5)
    assert model.generate(prompt, 30, **sampled) == model.generate(prompt, 30, use_cache=False, **sampled)


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(threads):
    cfg = windowed(NANO, "rope", 5)
    weights = exercising_weights(cfg, seed=13)
    ids = token_ids(cfg, LENGTH, seed=13)
    model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(threads=threads))
    expected = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, "rope", window=5)
    assert relative_error(model.forward(ids), expected) < RTOL
    cache = model.new_cache()
    model.prefill(ids[:9], cache)
    for position in range(9, LENGTH):
        logits = model.decode(int(ids[position]), cache)
    assert relative_error(logits, expected[-1]) < RTOL


@pytest.mark.parametrize("weights_format", ["bf16", "q8_0"])
def test_window_is_orthogonal_to_weight_formats(weights_format):
    """In a low-precision format a window that covers the sequence changes nothing, and cached
    generation with a short window equals recomputation."""
    full = config(NANO, "rope")
    weights = exercising_weights(full, seed=17)
    ids = token_ids(full, LENGTH, seed=17)
    options = gpt.CompileOptions(weights=weights_format)
    causal = gpt.GPT.from_weights(full, weights, options).forward(ids)
    covering = gpt.GPT.from_weights(dataclasses.replace(full, attention_window=LENGTH), weights, options)
    np.testing.assert_array_equal(covering.forward(ids), causal)
    local = gpt.GPT.from_weights(dataclasses.replace(full, attention_window=6), weights, options)
    assert local.generate(ids[:12], 30) == local.generate(ids[:12], 30, use_cache=False)


def test_rope_generation_goes_past_block_size():
    """With rotary positions and a window, positions keep growing past block_size while the
    cache stays W slots: every step matches the reference over the whole sequence."""
    cfg = windowed(dict(NANO, block_size=32), "rope", 8)
    weights = exercising_weights(cfg, seed=19)
    model = gpt.GPT.from_weights(cfg, weights)
    ids = token_ids(cfg, 80, seed=19)
    expected = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, "rope", window=8)
    cache = model.new_cache()
    assert cache._keys.shape[2] == 8
    model.prefill(ids[:10], cache)
    for position in range(10, len(ids)):
        logits = model.decode(int(ids[position]), cache)
        assert relative_error(logits, expected[position]) < RTOL, position
    tokens = model.generate(ids[:10], 70)
    assert len(tokens) == 70
    with pytest.raises(ValueError, match="use_cache=True only"):
        model.generate(ids[:10], 70, use_cache=False)


def test_learned_positions_still_stop_at_block_size():
    cfg = windowed(dict(NANO, block_size=32), "learned", 8)
    model = gpt.GPT.random(cfg)
    with pytest.raises(ValueError, match="exceed block_size=32"):
        model.generate(list(range(10)), 30)
    cache = model.new_cache()
    model.prefill(list(range(32)), cache)
    with pytest.raises(ValueError, match="KV cache is full: 32 \\+ 1 tokens exceed block_size=32"):
        model.decode(1, cache)
    assert len(cache) == 32


@pytest.mark.parametrize("window", [0, -1, 2.5, True, "8"])
def test_bad_window(window):
    with pytest.raises(ValueError, match=f"GPTConfig.attention_window must be None or an int >= 1, got {window!r}"):
        gpt.GPTConfig(**NANO, attention_window=window)


def test_gguf_refuses_a_window(tmp_path):
    """GGUF's gpt2 architecture has no window: saving one would silently drop it."""
    from gpt.gguf_file import save_gguf

    model = gpt.GPT.random(windowed(NANO, "learned", 4))
    with pytest.raises(ValueError, match="attention_window=4 cannot be written"):
        save_gguf(model, model.config, tmp_path / "m.gguf")


def test_cli_ir_takes_a_window():
    command = [sys.executable, "-m", "gpt", "ir", "--stage=transformer", "--n_layer=1", "--attention_window=5"]
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
    env = dict(os.environ, PYTHONPATH=package_root)
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env, timeout=600).stdout
    assert "window = 5 : i64" in out
