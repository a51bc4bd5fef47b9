"""Choosing the next token from logits: greedy, temperature, top-k and top-p (nucleus) sampling."""

import numpy as np

MIN_TEMPERATURE = 1e-6


def check_sampling_args(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not np.isfinite(temperature)
        or temperature < 0
    ):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    # logits / temperature must stay finite: below this, a temperature is an overflow, not a choice.
    if 0 < temperature < MIN_TEMPERATURE:
        raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1):
        raise ValueError(f"top_k must be None or a positive int, got {top_k!r}")
    if top_p is not None and (not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be None or in (0, 1], got {top_p!r}")


def allowed_probabilities(
    logits: np.ndarray, temperature: float, top_k: int | None = None, top_p: float | None = None
) -> np.ndarray:
    """The distribution sampling draws from (temperature > 0): softmax(logits / temperature)
    restricted to the top_k most likely tokens, then to the smallest set whose probability
    reaches top_p (always at least the most likely token), renormalised. float64, sums to 1."""
    scaled = np.asarray(logits, dtype=np.float64) / temperature
    keep = np.ones(scaled.shape, dtype=bool)
    if top_k is not None and top_k < scaled.size:
        # Ties at the k-th value are kept: never drop a token that scores as high as a kept one.
        kth = np.partition(scaled, -top_k)[-top_k]
        keep &= scaled >= kth
    probs = np.exp(scaled - scaled[keep].max()) * keep
    probs /= probs.sum()
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
        # Keep tokens until the mass *before* a token already reaches top_p.
        cut = np.zeros(probs.shape, dtype=bool)
        cut[order] = (cumulative - probs[order]) >= top_p
        probs[cut] = 0.0
        probs /= probs.sum()
    return probs


def sample(
    logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None, rng: np.random.Generator
) -> int:
    """The next token: argmax when temperature == 0, else a draw from allowed_probabilities."""
    if temperature == 0:
        return int(np.argmax(logits))
    probs = allowed_probabilities(logits, temperature, top_k, top_p)
    return int(rng.choice(probs.size, p=probs))
