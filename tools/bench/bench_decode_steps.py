"""Decode step times of a GPT-2-small-shaped model (random weights): min, p10 and median in ms.

    PYTHONPATH=<tree>/bazel-bin/python python3 tools/bench/bench_decode_steps.py <weight format> <vocab size>

Written for A/B runs of two builds (docs/JOURNAL.md, "The weights in one block" and "Decode in
256-bit registers"): 5 runs of 64 decode steps after a 1-token prefill, each step timed on its
own. A vocabulary of 256 leaves the layers alone (no 155 MB LM head). NT=<threads> in the
environment, or --threads, sets the threads (2); --no-disk-cache compiles in memory. Once the
step.py of those entries.
"""

import argparse
import os
import time

import numpy as np

import gpt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("weights", choices=gpt.config.WEIGHT_FORMATS, help="the weight format")
    parser.add_argument("vocab", type=int, help="vocabulary size (50257: GPT-2's; 256: the layers alone)")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("NT", "2")))
    parser.add_argument("--cache-dir", default="/tmp/mem/dec", help="the disk cache's directory")
    parser.add_argument("--no-disk-cache", action="store_true", help="compile in memory (disk_cache=False)")
    args = parser.parse_args()

    cfg = gpt.GPTConfig(n_layer=12, n_head=12, n_embd=768, vocab_size=args.vocab, block_size=1024)
    options = gpt.CompileOptions(
        threads=args.threads, weights=args.weights, cache_dir=args.cache_dir, disk_cache=not args.no_disk_cache
    )
    model = gpt.GPT.random(cfg, seed=0, options=options)
    cache = model.new_cache()
    model.prefill([1], cache)
    model.decode(2, cache)  # compiles the step
    steps = []
    for _ in range(5):
        cache = model.new_cache()
        model.prefill([1], cache)
        for i in range(64):
            start = time.perf_counter()
            model.decode(i % 200, cache)
            steps.append(time.perf_counter() - start)
    ms = np.array(steps) * 1e3
    summary = f"min {ms.min():.2f} p10 {np.percentile(ms, 10):.2f} median {np.median(ms):.2f}"
    print(f"{args.weights} {args.vocab} ms/step {summary}")


if __name__ == "__main__":
    main()
