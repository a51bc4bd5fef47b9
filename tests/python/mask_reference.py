"""Dense attention masks for the tests, written from the papers' definitions one (query, key)
pair at a time, apart from gpt.masks (which builds them with array operations)."""

import numpy as np


def dense(tokens, visible):
    """[tokens, tokens] bool: [i, j] = visible(i, j)."""
    return np.array([[visible(i, j) for j in range(tokens)] for i in range(tokens)], dtype=bool)


def causal(tokens):
    return dense(tokens, lambda i, j: j <= i)


def sliding_window(tokens, window):
    return dense(tokens, lambda i, j: i - window < j <= i)


def strided(tokens, stride):
    """Child et al. 2019, strided: the previous `stride` positions and every stride-th before."""
    return dense(tokens, lambda i, j: j <= i and (i - j < stride or (i - j) % stride == 0))


def fixed(tokens, block, summary):
    """Child et al. 2019, fixed: the own block, and the last `summary` cells of every block."""
    return dense(tokens, lambda i, j: j <= i and (j // block == i // block or j % block >= block - summary))


def prefix_lm(tokens, prefix):
    return dense(tokens, lambda i, j: j < prefix or j <= i)


def document(segment_ids):
    return dense(len(segment_ids), lambda i, j: j <= i and segment_ids[i] == segment_ids[j])


def block_pattern(pattern, block):
    tokens = len(pattern) * block
    return dense(tokens, lambda i, j: bool(pattern[i // block][j // block]))


def local_and_global(tokens, window, every):
    """A user's mask: the `window` latest positions, and every `every`-th position (global tokens)."""
    return dense(tokens, lambda i, j: j <= i and (i - j < window or j % every == 0))


def chunks_and_window(tokens, chunk, window):
    """A user's mask that looks ahead: each chunk of `chunk` positions sees itself both ways, and
    each query also sees the `window` positions before it."""
    return dense(tokens, lambda i, j: j // chunk == i // chunk or (j <= i and j >= i - window))


def sinks_and_window(tokens, sinks, window):
    """A user's mask (attention sinks, as StreamingLLM keeps them): the first `sinks` positions
    and the `window` latest ones."""
    return dense(tokens, lambda i, j: j <= i and (j < sinks or i - j < window))
