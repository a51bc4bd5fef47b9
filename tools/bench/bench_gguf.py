"""Load, memory and speed of one GGUF file in gpt, per --weights choice, each run in a process of
its own (so that RSS is that load's alone), rounds alternated so that a shared machine's load falls
on every choice alike:

    PYTHONPATH=bazel-bin/python python3 tools/bench/bench_gguf.py /tmp/smollm2-1.7b.q4_k_m.gguf \\
        --weights auto,q8_0 --ctx 4096 --pp 128 --tg 32 --rounds 2

Files in real models' shapes: tools/dev/make_gguf.py. Per run: the load (GPT.from_gguf: reading,
converting and repacking the weights; compiling is not part of it), VmRSS after the load, the first
prompt's prefill plus one token (which compiles, or loads the programs from the disk cache), ppN
(prefill of N tokens into an empty cache, after the warm-up) and tgN (N tokens decoded one at a
time), and the peak RSS. The table gives each choice's median over the rounds and prints the
command that made it."""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def run_one(path: str, weights: str, ctx: int, pp: int, tg: int, target_cpu: str) -> dict:
    """One load and run in this process (the child)."""
    import numpy as np

    import gpt

    def rss_gib() -> float:
        with open("/proc/self/status") as status:
            return int(status.read().split("VmRSS:")[1].split()[0]) / 2**20

    start = time.perf_counter()
    options = gpt.CompileOptions(weights=weights, kv_cache="f16", target_cpu=target_cpu)
    model = gpt.GPT.from_gguf(path, options, context=ctx)
    load = time.perf_counter() - start
    after_load = rss_gib()
    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, pp).tolist()
    start = time.perf_counter()
    model.generate(ids, max_new_tokens=1, temperature=0)
    first = time.perf_counter() - start
    model.generate(ids, max_new_tokens=tg + 1, temperature=0)
    stats = model.last_generation
    return {
        "weights": weights,
        "stored": model.options.weights
        + (f" + {len(model.options.weight_formats)} other" if model.options.weight_formats else ""),
        "load_s": load,
        "rss_after_load_gib": after_load,
        "first_token_s": first,
        "pp_tps": stats.prompt_tokens / stats.prompt_seconds,
        "tg_tps": stats.generated_tokens / stats.generate_seconds,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path")
    parser.add_argument("--weights", default="auto", help="CompileOptions.weights choices, comma-separated")
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--pp", type=int, default=128)
    parser.add_argument("--tg", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--target-cpu", default="host", help="CompileOptions.target_cpu, e.g. haswell")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(args.path, args.child, args.ctx, args.pp, args.tg, args.target_cpu)))
        return
    choices = args.weights.split(",")
    results: dict[str, list[dict]] = {w: [] for w in choices}
    for round_ in range(args.rounds):
        order = choices[round_ % len(choices) :] + choices[: round_ % len(choices)]
        for weights in order:
            command = [sys.executable, __file__, args.path, "--child", weights, "--ctx", str(args.ctx)]
            command += ["--pp", str(args.pp), "--tg", str(args.tg), "--target-cpu", args.target_cpu]
            out = subprocess.run(command, capture_output=True, text=True, check=True, env=os.environ)
            results[weights].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print("command: PYTHONPATH=bazel-bin/python python3 " + " ".join(["tools/bench/bench_gguf.py", *sys.argv[1:]]))
    print(
        f"file: {os.path.basename(args.path)} ({os.path.getsize(args.path) / 2**30:.2f} GiB), ctx {args.ctx}, "
        f"{args.rounds} rounds alternated, medians; load avg {os.getloadavg()[0]:.1f} at the end"
    )
    print(
        "| --weights | stored as | load s | RSS after load GiB | first token s | "
        f"pp{args.pp} t/s | tg{args.tg} t/s | peak RSS GiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for weights, runs in results.items():
        med = {
            key: statistics.median(run[key] for run in runs) for key in runs[0] if key.endswith(("_s", "_gib", "_tps"))
        }
        print(
            f"| {weights} | {runs[0]['stored']} | {med['load_s']:.1f} | {med['rss_after_load_gib']:.2f} | "
            f"{med['first_token_s']:.1f} | {med['pp_tps']:.1f} | {med['tg_tps']:.2f} | {med['peak_rss_gib']:.2f} |"
        )


if __name__ == "__main__":
    main()
