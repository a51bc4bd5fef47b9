"""Where a model keeps its own copies of the weights (runtime/WeightArena.h): every laid-out
argument back to back in one block, on a 2 MiB boundary, the whole block advised to transparent
huge pages. Per-weight allocations left each weight's tail past its last 2 MiB in small pages,
which cost decode speed (docs/PERFORMANCE.md, "The weights in one block")."""

import os

import numpy as np
import pytest

import gpt
from shapes import MID, config, exercising_weights

HUGE_PAGE = 2 << 20
CACHE_LINE = 64
THP = "/sys/kernel/mm/transparent_hugepage/enabled"
# Under AddressSanitizer a poisoned red zone follows each weight (WeightArena.cpp), so the weights
# are neither back to back nor in the block sized for them: this checks the plain build.
pytestmark = pytest.mark.skipif(os.environ.get("GPT_SANITIZE") == "1", reason="ASan's red zones change the layout")


def mappings():
    """[(start, end, VmFlags)] of this process, from /proc/self/smaps."""
    result = []
    with open("/proc/self/smaps", encoding="ascii") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                start, end = (int(part, 16) for part in head.split("-"))
                result.append([start, end, ()])
            elif line.startswith("VmFlags:"):
                result[-1][2] = tuple(line.split()[1:])
    return result


def flags_over(start, end):
    """The VmFlags of every mapping that overlaps [start, end); asserts they cover all of it."""
    covering = sorted((s, e, f) for s, e, f in mappings() if s < end and e > start)
    assert covering and covering[0][0] <= start and covering[-1][1] >= end, (hex(start), hex(end))
    for (_, e, _), (s, _, _) in zip(covering[:-1], covering[1:], strict=True):
        assert e == s, "a hole in the block"
    return [f for _, _, f in covering]


def bound_model(weights_format):
    # MID's matmul weights are 0.25 to 1 MiB each and 13 MiB in all (f32): most of them smaller
    # than a huge page, so only one block can put them all in huge pages.
    cfg = config(MID)
    return gpt.GPT(cfg, exercising_weights(cfg), gpt.CompileOptions(weights=weights_format, disk_cache=False))


@pytest.mark.parametrize("weights_format", ["f32", "bf16", "q8_0", "q4_1"])
def test_stored_arguments_lie_back_to_back_in_one_block(weights_format):
    model = bound_model(weights_format)
    blocks = model._compiled.weight_blocks()
    stored = sorted(model._compiled.stored_arguments(), key=lambda argument: argument[1])
    # One block: the arena was sized from the arguments' shapes before any was laid out.
    assert len(blocks) == 1, blocks
    start, length = blocks[0]
    names = {name for name, _, _ in stored}
    assert "lm_head.weight_t" in names and "transformer.h.3.mlp.c_fc.weight" in names, names
    end_of_previous = start
    for name, address, size in stored:
        assert address % CACHE_LINE == 0, name
        # Back to back: each argument starts at the first cache line after the one before it.
        assert address == end_of_previous, (name, address - end_of_previous)
        end_of_previous = address + (size + CACHE_LINE - 1) // CACHE_LINE * CACHE_LINE
    assert end_of_previous <= start + length
    # Whole 2 MiB ranges: the block's unused end is less than one huge page.
    if length >= HUGE_PAGE:
        assert start % HUGE_PAGE == 0 and length % HUGE_PAGE == 0
        assert start + length - end_of_previous < HUGE_PAGE


@pytest.mark.skipif(not os.path.exists(THP), reason="this kernel has no transparent huge pages")
def test_the_whole_block_is_advised_to_huge_pages():
    model = bound_model("f32")
    [(start, length)] = model._compiled.weight_blocks()
    assert length >= HUGE_PAGE
    # "hg" is MADV_HUGEPAGE's mark: advice, set whether or not the kernel finds huge pages.
    assert all("hg" in flags for flags in flags_over(start, start + length))
    # The model still computes with the weights it was given.
    weights = exercising_weights(config(MID))
    name = "transformer.h.2.mlp.c_proj.weight"
    np.testing.assert_array_equal(model._compiled.stored_weight(name), weights[name])


@pytest.mark.skipif(not os.path.exists(THP), reason="this kernel has no transparent huge pages")
def test_gpt_huge_pages_0_keeps_small_pages(monkeypatch):
    monkeypatch.setenv("GPT_HUGE_PAGES", "0")
    model = bound_model("f32")
    [(start, length)] = model._compiled.weight_blocks()
    assert not any("hg" in flags for flags in flags_over(start, start + length))
