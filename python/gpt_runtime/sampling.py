"""Choosing the next token from logits: greedy, temperature, top-k and top-p (nucleus) sampling; and
the checks of generate's sampling settings and token ids that gpt and gpt_runtime share."""

import numpy as np

MIN_TEMPERATURE = 1e-6


def check_token_ids(ids, block_size: int, vocab_size: int) -> np.ndarray:
    """`ids` as a contiguous int64 array; ValueError or TypeError naming the problem unless it is a
    1-D sequence of 1 to block_size integer ids in [0, vocab_size)."""
    array = np.asarray(ids)
    if array.ndim != 1:
        raise ValueError(f"ids must be a 1-D sequence of token ids, got shape {array.shape}")
    if array.size == 0:
        raise ValueError("ids must contain at least one token")
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"token ids must be integers, got dtype {array.dtype}")
    if array.size > block_size:
        raise ValueError(f"sequence of {array.size} tokens is longer than block_size={block_size}")
    bad = (array < 0) | (array >= vocab_size)
    if bad.any():
        raise ValueError(f"token id {int(array[bad][0])} is out of range [0, vocab_size={vocab_size})")
    return np.ascontiguousarray(array, dtype=np.int64)


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
