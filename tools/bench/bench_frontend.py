"""Imported PyTorch modules (gpt.compile_module) against gpt.GPT.forward, eager PyTorch and
torch.compile (Inductor) on the same weights, in one run.

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/bench/bench_frontend.py

Prints a markdown table, preceded by the command that produced it: median forward latency over
--repeats rounds after a warm-up round (each round runs every implementation once, in turn), and
each row's ratio to gpt.GPT.forward; also the fastest run of each (less sensitive to other
processes on a shared machine). Models: HF GPT2LMHeadModel (attn_implementation "sdpa"
and "eager") of the --shape, with random weights (a checkpoint's values do not change the
time), and gpt.GPT.from_weights of the same state dict.
"""

import argparse
import statistics
import sys
import time

import numpy as np
import torch
from machine import describe_cpu
from transformers import GPT2Config, GPT2LMHeadModel

import gpt

SHAPES = {
    "nano": dict(n_layer=2, n_head=4, n_embd=64, vocab_size=256, n_positions=1024),
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, n_positions=1024),
}


def hf_model(shape, attn_implementation):
    torch.manual_seed(0)
    config = GPT2Config(**SHAPES[shape], use_cache=False, attn_implementation=attn_implementation)
    return GPT2LMHeadModel(config).eval()


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="gpt2-small", choices=sorted(SHAPES))
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-inductor", action="store_true", help="leave out torch.compile (slow to compile)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    options = gpt.CompileOptions(threads=args.threads, disk_cache=False)

    reference = hf_model(args.shape, "sdpa")
    weights = {name: value.detach().numpy() for name, value in reference.state_dict().items()}
    weights = {name: value for name, value in weights.items() if name.startswith("transformer.")}
    cfg = SHAPES[args.shape]
    config = gpt.GPTConfig(
        n_layer=cfg["n_layer"],
        n_head=cfg["n_head"],
        n_embd=cfg["n_embd"],
        vocab_size=cfg["vocab_size"],
        block_size=cfg["n_positions"],
    )
    ids = np.random.default_rng(0).integers(0, cfg["vocab_size"], size=(1, args.seq_len))
    idx = torch.from_numpy(ids)

    # (what, compile seconds or None, run); every run is timed in turn, round-robin, so that the
    # load of a shared machine falls on all of them alike.
    runners = []
    builder = gpt.GPT.from_weights(config, weights, options)
    start = time.perf_counter()
    builder.forward(ids[0])
    runners.append(("gpt.GPT.forward (builder)", time.perf_counter() - start, lambda: builder.forward(ids[0])))
    with torch.no_grad():
        expected = reference(idx).logits[0].numpy()
        assert np.abs(builder.forward(ids[0]) - expected).max() <= 1e-4 * np.abs(expected).max()
        for impl in ("sdpa", "eager"):
            module = hf_model(args.shape, impl)
            module.load_state_dict(reference.state_dict())
            start = time.perf_counter()
            compiled = gpt.compile_module(module, (idx,), options)
            compile_s = time.perf_counter() - start
            got = compiled(idx).logits[0].numpy()
            assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max(), f"{impl}: wrong logits"
            runners.append((f"gpt.compile_module(HF, {impl})", compile_s, lambda c=compiled: c(idx)))
            runners.append((f"PyTorch eager (HF, {impl})", None, lambda m=module: m(idx)))
        if not args.skip_inductor:
            inductor = torch.compile(reference)
            start = time.perf_counter()
            inductor(idx)
            runners.append(("torch.compile Inductor (HF, sdpa)", time.perf_counter() - start, lambda: inductor(idx)))
        times = [[] for _ in runners]
        for _ in range(args.repeats + 1):  # the first round warms up
            for i, (_, _, run) in enumerate(runners):
                start = time.perf_counter()
                run()
                times[i].append(time.perf_counter() - start)
    rows = [
        (what, compile_s, statistics.median(t[1:]), min(t[1:]))
        for (what, compile_s, _), t in zip(runners, times, strict=True)
    ]

    print("command: PYTHONPATH=bazel-bin/python python3 tools/bench/bench_frontend.py " + " ".join(argv))
    print("cpu: " + describe_cpu())
    print(
        f"\nforward over {args.seq_len} tokens, {args.shape}, fp32, {args.threads} threads, median of {args.repeats}\n"
    )
    print(
        "| implementation | compile s (incl. first run) | forward ms, median | vs gpt.GPT.forward | min ms | vs, min |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    base, base_min = rows[0][2], rows[0][3]
    for what, compile_s, seconds, fastest in rows:
        compiled_text = f"{compile_s:.1f}" if compile_s is not None else "-"
        print(
            f"| {what} | {compiled_text} | {seconds * 1e3:.1f} | {seconds / base:.2f}x "
            f"| {fastest * 1e3:.1f} | {fastest / base_min:.2f}x |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
