"""GPT-2 small forward and decode compiled for several target CPUs, run on this machine.

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/bench/bench_targets.py

Each target (CompileOptions(target_cpu=...)) gets its own vector width, dot-product instructions
and register tiles; the targets this CPU cannot run are skipped and named. The rounds are
interleaved (target A, B, ... then again), so that the machine's noise falls on every row alike;
each figure is the median over --rounds. Prints the command, this CPU (model name and the ISA
features that matter) and a markdown table.
"""

import argparse
import statistics
import sys
import time

import numpy as np
from machine import describe_cpu

import gpt

GPT2_SMALL = dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="host,haswell,skylake-avx512,znver4")
    parser.add_argument("--seq_lens", default="32,128")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--weights", default="f32", help="comma-separated formats (gpt.config.WEIGHT_FORMATS)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv[1:])
    cfg = gpt.GPTConfig(**GPT2_SMALL)
    seq_lens = [int(t) for t in args.seq_lens.split(",")]
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, size=max(seq_lens))
    models, skipped = {}, []
    for target in args.targets.split(","):
        for weights in args.weights.split(","):
            options = gpt.CompileOptions(threads=args.threads, weights=weights, target_cpu=target, disk_cache=False)
            model = gpt.GPT.random(cfg, seed=0, options=options)
            try:
                for t in seq_lens:
                    model.forward(ids[:t])  # compiles each bucket
            except ValueError as error:  # compile-only here
                skipped.append(f"{target} ({str(error).split(';')[0]})")
                break
            models[f"{target} | {weights}"] = model
    forward = {(target, t): [] for target in models for t in seq_lens}
    decode = {target: [] for target in models}
    for _ in range(args.rounds):
        for target, model in models.items():
            for t in seq_lens:
                start = time.perf_counter()
                model.forward(ids[:t])
                forward[target, t].append(time.perf_counter() - start)
            cache = model.new_cache()
            model.prefill(ids[:16].tolist(), cache)
            start = time.perf_counter()
            for token in ids[16:32].tolist():
                model.decode(token, cache)
            decode[target].append((time.perf_counter() - start) / 16)
    print("$ PYTHONPATH=bazel-bin/python python3 tools/bench/bench_targets.py " + " ".join(argv[1:]))
    print(f"\nCPU: {describe_cpu()}; GPT-2 small, {args.threads} threads, median of {args.rounds} rounds\n")
    header = [f"forward T={t} (ms)" for t in seq_lens] + ["decode (ms/token)"]
    print("| target_cpu | weights | " + " | ".join(header) + " |")
    print("|---|---|" + "---|" * len(header))
    for target in models:
        cells = [f"{1000 * statistics.median(forward[target, t]):.1f}" for t in seq_lens]
        cells.append(f"{1000 * statistics.median(decode[target]):.2f}")
        print(f"| {target} | " + " | ".join(cells) + " |")
    for line in skipped:
        print(f"\nnot run here: {line}")


if __name__ == "__main__":
    main(sys.argv)
