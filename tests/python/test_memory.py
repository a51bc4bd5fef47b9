"""Memory stays flat: long decoding with cache resets, and models made and dropped over and
over, leave the resident set where it was after warm-up (tools/memory_flatness.py runs the longer
version: 20,000 steps and 500 models with every entry point)."""

import gc
import os

import pytest

import gpt
from shapes import NANO, config

CFG = config(NANO)
MIB = 2**20
# Under AddressSanitizer freed memory waits in a quarantine of up to 256 MB, so the resident set
# grows by design; this measures the plain build.
pytestmark = pytest.mark.skipif(os.environ.get("GPT_SANITIZE") == "1", reason="ASan's quarantine holds freed memory")


def resident_bytes():
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def test_twenty_thousand_decode_steps_with_cache_resets():
    model = gpt.GPT.random(CFG, options=gpt.CompileOptions(disk_cache=False))
    cache = model.new_cache(64)

    def decode(steps):
        for step in range(steps):
            if len(cache) == cache.max_len:
                cache.reset()
            model.decode(step % CFG.vocab_size, cache)

    decode(2_000)  # warm-up: programs compiled, allocator pools filled
    gc.collect()
    before = resident_bytes()
    decode(20_000)
    gc.collect()
    assert resident_bytes() - before < 2 * MIB, (before, resident_bytes())


def test_models_made_and_dropped_return_their_memory(tmp_path):
    options = gpt.CompileOptions(cache_dir=str(tmp_path))  # each model loads its program from disk

    def cycle(times, run):
        for _ in range(times):
            model = gpt.GPT.random(CFG, options=options)
            if run:
                model.forward([1, 2, 3])
            del model

    cycle(15, run=True)
    gc.collect()
    before = resident_bytes()
    cycle(60, run=True)  # compiled code, MLIR context, packed weights: all released
    cycle(500, run=False)
    gc.collect()
    assert resident_bytes() - before < 4 * MIB, (before, resident_bytes())
