"""Forward-pass benchmark: compile time (cold and cached) and latency per pipeline level.

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/bench/bench_forward.py

Prints a markdown table, preceded by the command that produced it. Every latency is the median of
up to --repeats runs after one warm-up call; a configuration slower than --budget seconds per run
is measured fewer times (the count is printed), since the baseline level is meant to be slow.
"""

import argparse
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


def measure(shape, pipeline, threads, seq_len, repeats, budget, attention_window=None):
    cfg = gpt.GPTConfig(**SHAPES[shape], attention_window=attention_window)
    # No disk cache: the compile column is a cold compile, never a load of an earlier run's object.
    model = gpt.GPT.random(
        cfg, seed=0, options=gpt.CompileOptions(pipeline=pipeline, threads=threads, disk_cache=False)
    )
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, size=seq_len)
    start = time.perf_counter()
    model.forward(ids)  # compiles the bucket, then runs once
    first = time.perf_counter() - start
    compile_s = model.compiled_lengths()[model.bucket_for(seq_len)]
    times = []
    while len(times) < repeats:
        start = time.perf_counter()
        model.forward(ids)  # cache hit: no compilation
        times.append(time.perf_counter() - start)
        if sum(times) > budget:
            break
    assert model.compiled_lengths()[model.bucket_for(seq_len)] == compile_s  # nothing recompiled
    return compile_s, first - compile_s, statistics.median(times), len(times)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="nano,mid,gpt2-small")
    parser.add_argument("--pipelines", default="baseline,fused,vectorized,default")
    parser.add_argument(
        "--threads",
        default="1,2",
        help="thread counts for the vectorized levels (baseline and fused are single-threaded)",
    )
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds of timed runs per configuration")
    parser.add_argument("--attention-window", type=int, default=None, help="sliding-window attention (GPTConfig)")
    args = parser.parse_args(argv)

    print("command: PYTHONPATH=bazel-bin/python python3 tools/bench/bench_forward.py " + " ".join(argv))
    print("cpu: " + describe_cpu())
    print()
    print(
        "| model | pipeline | threads | T | compile, cold (s) | forward, 1st call after compile (ms) "
        "| forward, cached (ms, median) | runs | baseline / this |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        baseline = None  # this shape's baseline latency, when measured (first) in this run
        for pipeline in args.pipelines.split(","):
            thread_counts = [int(t) for t in args.threads.split(",")] if pipeline in ("vectorized", "default") else [1]
            for threads in thread_counts:
                compile_s, first_run, latency, runs = measure(
                    shape, pipeline, threads, args.seq_len, args.repeats, args.budget, args.attention_window
                )
                if pipeline == "baseline":
                    baseline = latency
                ratio = f"{baseline / latency:.1f}x" if baseline else "-"
                print(
                    f"| {shape} | {pipeline} | {threads} | {args.seq_len} | {compile_s:.2f} | {first_run * 1e3:.1f} "
                    f"| {latency * 1e3:.1f} | {runs} | {ratio} |",
                    flush=True,
                )


if __name__ == "__main__":
    main(sys.argv[1:])
