"""Memory stays flat: long decoding with cache resets, and models made and dropped over and
over, leave the resident set where it was after warm-up (tools/bench/memory_flatness.py runs the longer
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


def test_freed_heap_goes_back_to_the_system():
    """_gpt.release_freed_memory (called after binding weights, after each compile and at the end
    of from_gguf) hands glibc's free heap pages back: 200 MiB of small blocks malloc'd and freed
    stay resident until it runs, and are gone after."""
    import ctypes

    from gpt import _gpt

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    _gpt.release_freed_memory()
    before = resident_bytes()
    # 64 KiB blocks: below glibc's mmap threshold, so they come from the heap, touched page by page.
    blocks = [libc.malloc(64 * 1024) for _ in range(3200)]
    for block in blocks:
        libc.memset(block, 1, 64 * 1024)
    # The last block stays: glibc gives back a free top of the heap by itself, but not a free hole
    # below a block in use, which is what a load's temporaries leave under the weights it keeps.
    for block in blocks[:-1]:
        libc.free(block)
    held = resident_bytes()
    _gpt.release_freed_memory()
    after = resident_bytes()
    libc.free(blocks[-1])
    assert held - before > 150 * MIB, (before, held)
    assert held - after > 150 * MIB, (held, after)
