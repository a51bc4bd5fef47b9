"""Forward-pass numerics against the independent numpy reference, on several shapes, sequence
lengths, position embeddings and pipeline levels."""

import numpy as np
import pytest

import gpt
from reference import gpt2_logits
from shapes import GPT2_SMALL, MID, NANO, RTOL, config, exercising_weights, relative_error, token_ids

LENGTHS = (1, 7, 64, 128)


@pytest.fixture(scope="module", params=[("nano", NANO), ("mid", MID), ("gpt2-small", GPT2_SMALL)], ids=lambda p: p[0])
def learned_model(request):
    cfg = config(request.param[1])
    weights = exercising_weights(cfg)
    return cfg, weights, gpt.GPT.from_weights(cfg, weights)


@pytest.mark.parametrize("length", LENGTHS)
def test_learned_positions_match_reference(learned_model, length):
    cfg, weights, model = learned_model
    ids = token_ids(cfg, length, seed=length)
    logits = model.forward(ids)
    assert logits.shape == (length, cfg.vocab_size) and logits.dtype == np.float32
    expected = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head)
    assert relative_error(logits, expected) < RTOL


@pytest.mark.parametrize("shape", [NANO, MID], ids=["nano", "mid"])
@pytest.mark.parametrize("length", LENGTHS)
def test_rope_matches_reference(shape, length):
    cfg = config(shape, pos_embedding="rope")
    weights = exercising_weights(cfg, seed=3)
    assert "transformer.wpe.weight" not in weights
    logits = gpt.GPT.from_weights(cfg, weights).forward(token_ids(cfg, length, seed=length))
    expected = gpt2_logits(weights, token_ids(cfg, length, seed=length), cfg.n_layer, cfg.n_head, "rope")
    assert relative_error(logits, expected) < RTOL


def test_rope_depends_on_position():
    """Swapping two earlier tokens changes the last logits under RoPE (attention sees order)."""
    cfg = config(NANO, pos_embedding="rope")
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg))
    a = model.forward([5, 9, 11, 3])[-1]
    b = model.forward([9, 5, 11, 3])[-1]
    assert np.abs(a - b).max() > 1e-4


@pytest.mark.parametrize("shape", [NANO, MID], ids=["nano", "mid"])
@pytest.mark.parametrize("pos_embedding", ["learned", "rope"])
def test_pipeline_levels_agree(shape, pos_embedding):
    cfg = config(shape, pos_embedding)
    weights = exercising_weights(cfg, seed=5)
    ids = token_ids(cfg, 37, seed=9)
    expected = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, pos_embedding)
    results = {}
    for pipeline in gpt.config.PIPELINES:
        model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(pipeline=pipeline))
        results[pipeline] = model.forward(ids)
        assert relative_error(results[pipeline], expected) < RTOL, pipeline
    assert relative_error(results["baseline"], results["default"]) < RTOL


def test_padding_does_not_leak_into_real_positions():
    """7 tokens run in the 8-token bucket: logits equal those of the same prefix run in 64."""
    cfg = config(NANO)
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg))
    ids = token_ids(cfg, 40)
    assert model.bucket_for(7) == 8 and model.bucket_for(40) == 64
    np.testing.assert_allclose(model.forward(ids[:7]), model.forward(ids)[:7], rtol=0, atol=1e-5)


@pytest.mark.parametrize("shape", [NANO, MID], ids=["nano", "mid"])
def test_thread_counts_agree(shape):
    """Threads split matmuls into independent pieces (no reduction is split), so 1, 2 and 3
    threads give the same logits; all match the reference."""
    cfg = config(shape, "rope")
    weights = exercising_weights(cfg, seed=6)
    ids = token_ids(cfg, 50, seed=1)
    expected = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, "rope")
    results = []
    for threads in (1, 2, 3):
        model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(threads=threads))
        results.append(model.forward(ids))
        cache = model.new_cache(64)
        model.prefill(ids[:40], cache)
        decoded = [model.decode(int(t), cache) for t in ids[40:]]
        assert relative_error(np.stack(decoded), results[-1][40:]) < RTOL
    for logits in results:
        assert relative_error(logits, expected) < RTOL
    np.testing.assert_array_equal(results[0], results[1])
