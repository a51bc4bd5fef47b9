"""Batched decode benchmark: aggregate tokens/s of GPT.step_batch over a paged KV pool at several
batch sizes, against single-stream GPT.decode on a contiguous KVCache, in one run.

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/bench/bench_batch.py

Every sequence first gets a --context-token prompt (one step_batch per sequence, the same program
for all), then the batch decodes --steps tokens per round, one step_batch call per token for all
B sequences together. Compilation is excluded (a warm-up round compiles each program). Decode
steps per second times B is the aggregate throughput; "vs decode" divides it by model.decode's
tokens/s at the same context length.

The last row is model.forward over --prefill-tokens tokens (a prompt's prefill), in tokens/s: the
batched step does a prefill's matmul work per token (every token through every weight), in
matrices of B rows instead of T, so forward's tokens/s over decode's is the ceiling of the
"vs decode" column at any batch size, whatever the memory bandwidth lets decode do.

--breakdown adds two rows per batch size: the step with every sequence reading the same blocks (its
attention's keys and values stay in cache) and model.forward over as many tokens (the same matmuls,
no paged attention); the gaps to the step's own row are what attention's memory traffic and the
whole paged attention cost.

--pages small,huge measures every row twice, the weights in small pages (GPT_HUGE_PAGES=0) and in
transparent huge pages (the default), one model each, the two taking turns row by row.
"""

import argparse
import os
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


def decode_seconds(model, prompt, steps, repeats):
    """Median seconds per model.decode token after `prompt`, single stream."""
    times = []
    for _ in range(repeats + 1):  # the first round compiles
        cache = model.new_cache(len(prompt) + steps)
        model.prefill(prompt, cache)
        start = time.perf_counter()
        for i in range(steps):
            model.decode(int(prompt[i % len(prompt)]), cache)
        times.append((time.perf_counter() - start) / steps)
    return statistics.median(times[1:])


def forward_seconds(model, tokens, repeats):
    """Median seconds of one model.forward over `tokens` tokens (the first call compiles)."""
    ids = np.arange(tokens) % model.config.vocab_size
    model.forward(ids)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.forward(ids)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def batch_step_seconds(model, prompt, batch, steps, repeats, block_size, shared=False):
    """Median seconds per step_batch call decoding one token for each of `batch` sequences. With
    `shared`, every sequence's table lists the same blocks for the prompt's whole blocks (only the
    blocks the steps write into are their own), so attention reads 1/batch of the keys and values
    and they stay in cache: the step's cost with attention's memory traffic taken away."""
    per_sequence = -(-(len(prompt) + steps) // block_size)
    pool = model.new_block_pool(batch * per_sequence, block_size)
    tables = np.arange(batch * per_sequence).reshape(batch, per_sequence)
    if shared:
        whole = len(prompt) // block_size
        tables[:, :whole] = tables[0, :whole]
    times = []
    for _ in range(repeats + 1):  # the first round compiles
        for b in range(batch):
            model.step_batch(pool, prompt, [len(prompt)], [0], tables[b : b + 1])
        start = time.perf_counter()
        for i in range(steps):
            ids = np.full(batch, prompt[i % len(prompt)])
            model.step_batch(pool, ids, [1] * batch, [len(prompt) + i] * batch, tables)
        times.append((time.perf_counter() - start) / steps)
    return statistics.median(times[1:])


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="gpt2-small", choices=SHAPES)
    parser.add_argument("--batches", default="1,4,16,32")
    parser.add_argument("--context-tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=None, help="default: all cores")
    parser.add_argument("--prefill-tokens", type=int, default=128)
    parser.add_argument("--pages", default="huge", help="huge, small or small,huge: where the weights live")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="for each batch size, also the step with every sequence on the same blocks and model.forward "
        "over as many tokens (the step's matmuls without the paged attention)",
    )
    args = parser.parse_args(argv)
    print("command: PYTHONPATH=bazel-bin/python python3 tools/bench/bench_batch.py " + " ".join(argv))
    print("cpu: " + describe_cpu())
    cfg = gpt.GPTConfig(**SHAPES[args.shape])
    pages = args.pages.split(",")
    if not pages or any(p not in ("huge", "small") for p in pages):
        parser.error(f"--pages takes huge, small or both, comma-separated; got {args.pages!r}")
    models = {}
    for kind in pages:  # the weights are allocated (and packed) when the model is built
        os.environ["GPT_HUGE_PAGES"] = "1" if kind == "huge" else "0"
        models[kind] = gpt.GPT.random(cfg, seed=0, options=gpt.CompileOptions(threads=args.threads))
    prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, size=args.context_tokens)
    single = {kind: decode_seconds(model, prompt, args.steps, args.repeats) for kind, model in models.items()}
    print()
    print(f"{args.shape}, decode after {args.context_tokens} tokens, median of {args.repeats} rounds")
    print()
    print("| path | weights in | sequences | ms per step | tokens/s | vs decode |")
    print("|---|---|---:|---:|---:|---:|")
    for kind in pages:
        print(
            f"| model.decode (KVCache) | {kind} pages | 1 | {single[kind] * 1e3:.1f} | {1 / single[kind]:.1f} | 1.00x |"
        )
    for batch in (int(b) for b in args.batches.split(",")):
        for kind, model in models.items():
            seconds = batch_step_seconds(model, prompt, batch, args.steps, args.repeats, args.block_size)
            rate = batch / seconds
            print(
                f"| step_batch (paged) | {kind} pages | {batch} | {seconds * 1e3:.1f} | {rate:.1f} "
                f"| {rate * single[kind]:.2f}x |"
            )
            if args.breakdown and batch > 1:
                shared = batch_step_seconds(model, prompt, batch, args.steps, args.repeats, args.block_size, True)
                forward = forward_seconds(model, batch, args.repeats)
                for path, took in (
                    ("step_batch, all on the same blocks", shared),
                    (f"model.forward ({batch} tokens)", forward),
                ):
                    print(
                        f"| {path} | {kind} pages | {batch} | {took * 1e3:.1f} | {batch / took:.1f} "
                        f"| {batch / took * single[kind]:.2f}x |"
                    )
    for kind, model in models.items():
        seconds = forward_seconds(model, args.prefill_tokens, args.repeats)
        rate = args.prefill_tokens / seconds
        print(
            f"| model.forward ({args.prefill_tokens} tokens: the ceiling) | {kind} pages | 1 | {seconds * 1e3:.1f} "
            f"| {rate:.1f} | {rate * single[kind]:.2f}x |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
