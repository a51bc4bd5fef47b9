"""Decode speed of GPT-2 small (random weights): ms/token, median and best of 5 runs of 64 steps.

    PYTHONPATH=<tree>/bazel-bin/python python3 tools/bench/bench_decode_runs.py <label> f32|bf16

Written for A/B runs of two builds (docs/JOURNAL.md, "Decode over two weight panels at once"):
run each tree's build in turn with its own label; the label also names the disk-cache directory
(/tmp/mem/dec-<label>), so that the two builds never share compiled programs. Once the dec.py of
that entry.
"""

import argparse
import time

import numpy as np

import gpt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("label", help="names this build in the output and its cache directory")
    parser.add_argument("weights", choices=gpt.config.WEIGHT_FORMATS, help="the weight format")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=64, help="decode steps per run")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    cfg = gpt.GPTConfig(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024)
    options = gpt.CompileOptions(threads=args.threads, weights=args.weights, cache_dir="/tmp/mem/dec-" + args.label)
    model = gpt.GPT.random(cfg, seed=0, options=options)
    cache = model.new_cache()
    model.prefill([1], cache)
    model.decode(2, cache)  # compiles the step
    per_token_ms = []
    for _ in range(args.runs):
        cache = model.new_cache()
        model.prefill([1], cache)
        start = time.perf_counter()
        for i in range(args.steps):
            model.decode(i % 1000, cache)
        per_token_ms.append((time.perf_counter() - start) / args.steps * 1000)
    print(f"{args.label} {args.weights} ms/token median {np.median(per_token_ms):.2f} best {min(per_token_ms):.2f}")


if __name__ == "__main__":
    main()
