"""Resident memory over long runs: a table of the RSS of one process while it decodes 20,000
tokens (resetting its KV cache whenever it fills) and while it makes and drops 500 models, each of
which runs forward, prefill and decode (programs loaded from a disk cache of their own).

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/bench/memory_flatness.py

A leak of anything per step (buffers, logits) or per model (compiled code, the MLIR context,
packed weights) would show as a column that keeps growing; tests/python/package/test_memory.py checks a
shorter run of the same.
"""

import argparse
import gc
import sys
import tempfile
import time

import gpt

CONFIG = gpt.GPTConfig(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=128)


def resident_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def decoding(steps: int, every: int) -> list[tuple[int, float]]:
    model = gpt.GPT.random(CONFIG, options=gpt.CompileOptions(disk_cache=False))
    cache = model.new_cache(64)
    rows = []
    for step in range(steps + 1):
        if step % every == 0:
            gc.collect()
            rows.append((step, resident_mib()))
        if len(cache) == cache.max_len:
            cache.reset()
        model.decode(step % CONFIG.vocab_size, cache)
    return rows


def models(count: int, every: int, cache_dir: str) -> list[tuple[int, float]]:
    options = gpt.CompileOptions(cache_dir=cache_dir)
    rows = []
    for made in range(count + 1):
        if made % every == 0:
            gc.collect()
            rows.append((made, resident_mib()))
        model = gpt.GPT.random(CONFIG, options=options)
        model.forward([1, 2, 3])
        cache = model.new_cache()
        model.prefill([1, 2, 3], cache)
        model.decode(4, cache)
        del model, cache
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--models", type=int, default=500)
    args = parser.parse_args()
    start = time.perf_counter()
    steps = decoding(args.steps, args.steps // 10)
    with tempfile.TemporaryDirectory() as cache_dir:
        made = models(args.models, args.models // 10, cache_dir)
    print(f"$ {' '.join(['python3', *sys.argv])}   ({time.perf_counter() - start:.0f} s)")
    print(f"{'decode steps':>12} {'RSS MiB':>8} | {'models made':>11} {'RSS MiB':>8}")
    for (step, step_rss), (count, model_rss) in zip(steps, made, strict=False):
        print(f"{step:>12} {step_rss:>8.1f} | {count:>11} {model_rss:>8.1f}")
    print(
        f"after warm-up (second row to last): decode {steps[-1][1] - steps[1][1]:+.1f} MiB, "
        f"models {made[-1][1] - made[1][1]:+.1f} MiB"
    )


if __name__ == "__main__":
    main()
