"""Decode of one GGUF file loaded in several weight formats, in one process, the formats' runs
alternated: the median decode step of each and the GB/s of stored weights it streams.

    PYTHONPATH=bazel-bin/python python3 tools/bench/bench_decode_formats.py /tmp/smollm2-1.7b.q4_k_m.gguf \\
        --formats auto,q4_1,q4_0,q8_0 --threads 1

A format written FORMAT@auto (q8_0@auto, listed after auto) stores the weights `auto` keeps in FORMAT
and every other one as `auto` does (its weight_formats): how a file ran before `auto` kept one of its
types (a Q5_K_M file's Q5_K tensors as q8_0 beside its Q6_K ones as q6_k).

Each round runs, for every format in turn, a 16-token prefill and 48 decode steps (each timed) into a
cache of 128 positions; a format's figure is the median of its rounds' median steps. One process
holds every model, so that each round sees the machine's memory bandwidth of the same minutes. The
packed-weight cache is off (nothing is written beside the runs) and programs compile into a
temporary directory that is removed at the end.
"""

import argparse
import shutil
import statistics
import tempfile
import time
import types

from compare_llamacpp import decode_weight_bytes
from machine import describe_cpu

import gpt


def median_step(model: gpt.GPT, steps: int = 48) -> float:
    cache = model.new_cache(128)
    token = int(model.prefill(list(range(1000, 1016)), cache).argmax())
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        token = int(model.decode(token, cache).argmax())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="a GGUF file")
    parser.add_argument(
        "--formats", default="auto,q4_0,q8_0", help="CompileOptions.weights values (or FORMAT@auto), comma-separated"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="bench_decode_formats-")
    try:
        models = {}
        for name in args.formats.split(","):
            weights, _, alongside = name.partition("@")
            formats = dict(models[alongside].options.weight_formats) if alongside else {}
            options = gpt.CompileOptions(
                weights=weights,
                weight_formats=formats,
                kv_cache="f16",
                threads=args.threads,
                cache_dir=directory,
                weight_cache_max_bytes=0,
            )
            models[name] = gpt.GPT.from_gguf(args.path, options, context=4096)
        steps = {weights: [] for weights in models}
        for _ in range(args.rounds):
            for weights, model in models.items():
                steps[weights].append(median_step(model))
        print(
            f"command: PYTHONPATH=bazel-bin/python python3 tools/bench/bench_decode_formats.py {args.path} "
            f"--formats {args.formats} --threads {args.threads} --rounds {args.rounds}"
        )
        print(f"cpu: {describe_cpu()}; {args.threads} thread(s)\n")
        print("| weights | stored MB | median step ms (rounds) | GB/s of stored weights |")
        print("|---|---|---|---|")
        for weights, model in models.items():
            stored = decode_weight_bytes(types.SimpleNamespace(model=model)) / 1e6
            step = statistics.median(steps[weights])
            rounds = ", ".join(f"{s * 1e3:.1f}" for s in steps[weights])
            print(f"| {weights} | {stored:.0f} | {step * 1e3:.2f} ({rounds}) | {stored / 1e3 / step:.1f} |")
    finally:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
