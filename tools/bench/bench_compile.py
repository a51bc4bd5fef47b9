"""Compile time and peak memory against depth: cold compiles of forward and of the decode step.

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/bench/bench_compile.py

Prints a markdown table, preceded by the command that produced it. Each depth runs in a process of
its own, so that its peak resident memory (ru_maxrss of that process: Python, the weights and the
compiler together) is its own; the disk cache is off, so every compile is cold. A depth that runs
past --timeout seconds is reported as such and the deeper ones are skipped.
"""

import argparse
import json
import resource
import subprocess
import sys
import time

from machine import describe_cpu


def child(n_layer, n_head, n_embd, pipeline):
    """Runs in the measuring process: compiles forward (3 tokens) and decode, prints JSON."""
    import gpt

    cfg = gpt.GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=256, block_size=64)
    model = gpt.GPT.random(cfg, seed=0, options=gpt.CompileOptions(pipeline=pipeline, disk_cache=False))
    start = time.perf_counter()
    model.forward([1, 2, 3])
    forward_s = time.perf_counter() - start
    cache = model.new_cache()
    start = time.perf_counter()
    model.decode(1, cache)
    decode_s = time.perf_counter() - start
    print(
        json.dumps(
            {
                "forward": forward_s,
                "forward_compile": sum(model.compiled_lengths().values()),
                "decode": decode_s,
                "decode_compile": sum(model.compiled_steps().values()),
                "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="2,8,24,48,96", help="comma-separated n_layer values")
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--pipeline", default="default")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per depth")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child, args.n_head, args.n_embd, args.pipeline)
        return

    print("command: PYTHONPATH=bazel-bin/python python3 tools/bench/bench_compile.py " + " ".join(argv))
    print("cpu: " + describe_cpu())
    print()
    print(
        f"n_head={args.n_head}, n_embd={args.n_embd}, vocab_size=256, block_size=64, pipeline={args.pipeline}; "
        "forward over 3 tokens, then one decode step (cache of 64); disk cache off"
    )
    print()
    print("| n_layer | forward compile (s) | decode compile (s) | peak RSS (MB) |")
    print("|---|---|---|---|")
    for n_layer in [int(n) for n in args.layers.split(",")]:
        command = [sys.executable, __file__, "--child", str(n_layer), "--n-head", str(args.n_head)]
        command += ["--n-embd", str(args.n_embd), "--pipeline", args.pipeline]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, check=True)
        except subprocess.TimeoutExpired:
            print(f"| {n_layer} | over {args.timeout:.0f} s (stopped) | - | - |", flush=True)
            break
        except subprocess.CalledProcessError as error:
            sys.exit(f"n_layer={n_layer} failed:\n{error.stderr}")
        r = json.loads(done.stdout.splitlines()[-1])
        print(f"| {n_layer} | {r['forward_compile']:.2f} | {r['decode_compile']:.2f} | {r['rss_mb']:.0f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
