"""The software prefetch of weight lanes (--gpt-prefetch-decode-lanes), chosen by the target CPU:
on sapphirerapids every block-quantized format's one-row matmuls (decode) and its matmuls of a few
row tiles (a step of a few tokens: speculative verification, a short prompt) prefetch their lanes
1 KiB ahead, on znver4 none do, and a prefill's matmuls of many row tiles are left to the hardware.
Cross-compiled, so whatever the host; the logits do not change (a prefetch has no effect on
values), which the host's own run checks where it is one of the two."""

import re

import numpy as np
import pytest

import gpt
from shapes import MID, config, token_ids

FORMATS = ("q4_0", "q8_0", "q4_k", "q6_k")


def prefetches(model, rows):
    """The prefetch intrinsics of the step program for `rows` tokens, in its LLVM IR."""
    return len(re.findall(r"llvm\.intr\.prefetch", model.ir("llvm", entry="step", seq_len=rows, cache_len=64)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_decode_prefetches_its_lanes_where_the_target_chooses_to(fmt):
    models = {
        target: gpt.GPT.random(
            config(MID), options=gpt.CompileOptions(weights=fmt, disk_cache=False, target_cpu=target)
        )
        for target in ("sapphirerapids", "znver4")
    }
    chosen, none = prefetches(models["sapphirerapids"], 1), prefetches(models["znver4"], 1)
    # Four lines (two panels, two cache lines of lanes) for every two-panel read of a matmul's loop.
    assert chosen > 0 and chosen % 4 == 0, chosen
    assert none == 0
    # A step of 2 tokens (one tile of rows) prefetches its one-panel reads too: two lines each.
    few, many = prefetches(models["sapphirerapids"], 2), prefetches(models["sapphirerapids"], 32)
    assert prefetches(models["znver4"], 2) == 0
    # A prefill of 32 tokens (8 tiles of 4 rows on AVX-512) gets none in its matmuls: each tile
    # after the first finds the panel in the cache. Its logits row (the LM head of the last row) is
    # the only one-row matmul it has, the same prefetches as decode's head.
    assert many < chosen
    assert few > many and (few - many) % 2 == 0, (few, many)


def test_the_prefetch_changes_no_logit():
    host = gpt.GPT.random(config(MID), options=gpt.CompileOptions(weights="q4_k", disk_cache=False))
    if prefetches(host, 1) == 0:
        pytest.skip("this host's CPU does not prefetch its decode lanes")
    weights = host.state_dict()
    plain = gpt.GPT.from_weights(
        config(MID), weights, gpt.CompileOptions(weights="q4_k", disk_cache=False, target_cpu="skylake-avx512")
    )
    ids = [int(t) for t in token_ids(config(MID), 12)]

    def decoded(model):
        cache = model.new_cache(32)
        prompt = model.prefill(ids[:8], cache)  # 8 rows: two tiles, prefetched as well
        return np.array([prompt] + [model.decode(t, cache) for t in ids[8:]])

    # skylake-avx512: no prefetch, and its code without VNNI is the host's bit for bit
    # (test_kquant_targets), so any difference would be the prefetch's.
    np.testing.assert_array_equal(decoded(host), decoded(plain))
