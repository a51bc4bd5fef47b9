"""The sampler on constructed logits: the allowed set of top-k / top-p, temperature, greedy."""

import numpy as np
import pytest

from gpt.sampling import allowed_probabilities, sample

LOGITS = np.log(np.array([0.05, 0.4, 0.1, 0.3, 0.15]))  # probabilities at temperature 1


def test_greedy_is_argmax_whatever_the_rng():
    for seed in range(5):
        assert sample(LOGITS, 0.0, None, None, np.random.default_rng(seed)) == 1


def test_top_k_keeps_exactly_the_k_most_likely():
    probs = allowed_probabilities(LOGITS, 1.0, top_k=2)
    assert set(np.nonzero(probs)[0]) == {1, 3}
    np.testing.assert_allclose(probs[[1, 3]], [0.4 / 0.7, 0.3 / 0.7])


def test_top_p_keeps_the_smallest_nucleus():
    # Sorted: 0.4, 0.3, 0.15, 0.1, 0.05. Mass before each: 0, 0.4, 0.7, 0.85, 0.95.
    assert set(np.nonzero(allowed_probabilities(LOGITS, 1.0, top_p=0.7))[0]) == {1, 3}
    assert set(np.nonzero(allowed_probabilities(LOGITS, 1.0, top_p=0.71))[0]) == {1, 3, 4}
    assert set(np.nonzero(allowed_probabilities(LOGITS, 1.0, top_p=0.01))[0]) == {1}


def test_top_k_then_top_p():
    probs = allowed_probabilities(LOGITS, 1.0, top_k=3, top_p=0.8)  # among {1,3,4}: 0.47, 0.35, 0.18
    assert set(np.nonzero(probs)[0]) == {1, 3}


@pytest.mark.parametrize("top_k, top_p, allowed", [(2, None, {1, 3}), (None, 0.5, {1, 3}), (3, 0.9, {1, 3, 4})])
def test_samples_never_leave_the_allowed_set(top_k, top_p, allowed):
    rng = np.random.default_rng(0)
    drawn = {sample(LOGITS, 1.0, top_k, top_p, rng) for _ in range(2000)}
    assert drawn == allowed


def test_temperature_sharpens_and_flattens():
    cold = allowed_probabilities(LOGITS, 0.1)
    hot = allowed_probabilities(LOGITS, 10.0)
    assert cold[1] > 0.9
    assert hot.max() - hot.min() < 0.05


def test_sampling_follows_the_distribution():
    rng = np.random.default_rng(1)
    counts = np.bincount([sample(LOGITS, 1.0, None, None, rng) for _ in range(20000)], minlength=5)
    np.testing.assert_allclose(counts / 20000, np.exp(LOGITS), atol=0.015)


def test_ties_at_the_kth_logit_are_kept():
    probs = allowed_probabilities(np.array([1.0, 2.0, 2.0, 0.0]), 1.0, top_k=1)
    assert set(np.nonzero(probs)[0]) == {1, 2}
