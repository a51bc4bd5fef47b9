"""Generation benchmark: KV-cached vs uncached greedy generation, prefill and decode latency.

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/bench/bench_generate.py

For each model, after a 16-token prompt, generates 20 and 100 new tokens greedily with the cache
and with use_cache=False (which recomputes the whole sequence every step), in the same run, and
reports total times and their ratio, decode ms/token and prefill ms. Compilation is excluded:
every program is compiled by a warm-up run first. Times are medians over --repeats runs.
"""

import argparse
import functools
import statistics
import sys
import time

import numpy as np
from machine import describe_cpu

import gpt

SHAPES = {
    "nano": dict(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=1024),
    "mid": dict(n_layer=4, n_head=8, n_embd=256, vocab_size=1000, block_size=1024),
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024),
}


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="nano,gpt2-small")
    parser.add_argument("--pipelines", default="default", help="comma-separated pipeline levels")
    parser.add_argument("--new-tokens", default="20,100")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="default: all cores")
    args = parser.parse_args(argv)
    print("command: PYTHONPATH=bazel-bin/python python3 tools/bench/bench_generate.py " + " ".join(argv))
    print("cpu: " + describe_cpu())
    print()
    print(
        "| model | pipeline | new tokens | cached total (ms) | uncached total (ms) | uncached / cached "
        "| prefill 16 tok (ms) | decode (ms/token) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for shape, pipeline in ((s, p) for s in args.shapes.split(",") for p in args.pipelines.split(",")):
        cfg = gpt.GPTConfig(**SHAPES[shape])
        model = gpt.GPT.random(cfg, seed=0, options=gpt.CompileOptions(pipeline=pipeline, threads=args.threads))
        prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, size=16)
        for new in (int(n) for n in args.new_tokens.split(",")):
            # Warm-up: compiles every program both paths need (forward buckets up to 16 + new).
            model.generate(prompt, new)
            model.generate(prompt, new, use_cache=False)
            cached = median_time(functools.partial(model.generate, prompt, new), args.repeats)
            uncached = median_time(functools.partial(model.generate, prompt, new, use_cache=False), args.repeats)
            model.generate(prompt, new)
            stats = model.last_generation
            prefill_ms = stats.prompt_seconds * 1e3
            decode_ms = stats.generate_seconds * 1e3 / max(1, stats.generated_tokens - 1)
            print(
                f"| {shape} | {pipeline} | {new} | {cached * 1e3:.1f} | {uncached * 1e3:.1f} "
                f"| {uncached / cached:.1f}x | {prefill_ms:.2f} | {decode_ms:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
