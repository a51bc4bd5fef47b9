"""The start of a GGUF model in gpt and in llama.cpp: a process's import, load and first token, the
first start (nothing cached) and later ones (gpt's programs and packed weights from its disk cache).

    PYTHONPATH=bazel-bin/python python3 tools/bench/bench_start.py /tmp/smollm2-1.7b.q4_k_m.gguf --rounds 3

Each run is a process of its own, so that its RSS is its own and nothing is shared in memory:
- gpt, first start: an empty cache directory of its own (`CompileOptions(cache_dir=...)`), so the
  load converts and repacks the file's blocks and writes the packed weights, and the first token
  compiles its programs;
- gpt, later start: the same directory, so the load reads the packed weights (gpt.weight_cache) and
  the first token loads its programs;
- llama.cpp (llama-cpp-python, built as requirements-peers.txt says): `Llama(path)`, which maps the
  file.
Every process: import, load (`GPT.from_gguf(weights="auto")` or `Llama(...)`, a context of --ctx,
the KV cache in f16 as llama.cpp's), then the first token of a 16-token prompt (prefill and one
decode step), with VmRSS after the load and the peak. The model file is in the page cache for every
run (a first read of it from disk is the disk's speed for both).

Fresh memory is warmed before every run. A virtual machine hands the memory its processes free back
to its host within seconds (free page reporting), and the next process that touches as many fresh
pages waits for the host to back them again: on the AMD EPYC VM of 2026-11-30, 4 GiB touched in
8.8 s after 90 s idle and in 0.7 s right after. Whichever run came first in a round paid that, on
top of its own work. Each run is therefore preceded by touching and freeing --warm-gib of memory
(default: the file's size times 1.5 plus 1 GiB, what either engine allocates, within what is free),
so that every engine starts alike; --warm-gib 0 measures the cold case. Later starts and llama.cpp's take
turns over --rounds rounds; the table gives medians and the command that made it.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PROMPT = list(range(1000, 1016))


def rss_mib(field: str = "VmRSS") -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run_gpt(path: str, ctx: int, threads: int, cache_dir: str) -> dict:
    start = time.perf_counter()
    import gpt

    imported = time.perf_counter()
    options = gpt.CompileOptions(weights="auto", kv_cache="f16", threads=threads, cache_dir=cache_dir)
    model = gpt.GPT.from_gguf(path, options, context=ctx)
    loaded = time.perf_counter()
    rss_loaded = rss_mib()
    cache = model.new_cache(len(PROMPT) + 1)
    logits = model.prefill(PROMPT, cache)
    model.decode(int(logits[-1].argmax()), cache)
    first = time.perf_counter()
    return dict(
        import_s=imported - start,
        load_s=loaded - imported,
        first_token_s=first - loaded,
        rss_loaded_mib=rss_loaded,
        peak_mib=rss_mib("VmHWM"),
        packed_weights_from_cache=model._packed_weights_hit,
        programs_from_cache=model.disk_cache_hits(),
    )


def run_llama_cpp(path: str, ctx: int, threads: int) -> dict:
    start = time.perf_counter()
    import llama_cpp

    imported = time.perf_counter()
    llm = llama_cpp.Llama(
        model_path=path, n_ctx=ctx, n_threads=threads, n_threads_batch=threads, flash_attn=True, verbose=False
    )
    loaded = time.perf_counter()
    rss_loaded = rss_mib()
    llm.eval(PROMPT)
    llm.eval([int(llm.scores[len(PROMPT) - 1].argmax())])
    first = time.perf_counter()
    return dict(
        import_s=imported - start,
        load_s=loaded - imported,
        first_token_s=first - loaded,
        rss_loaded_mib=rss_loaded,
        peak_mib=rss_mib("VmHWM"),
    )


def child(args) -> None:
    if args.engine == "llama.cpp":
        result = run_llama_cpp(args.path, args.ctx, args.threads)
    else:
        result = run_gpt(args.path, args.ctx, args.threads, args.cache_dir)
    print(json.dumps(result), flush=True)


def warm_free_memory(gib: float) -> None:
    """Touches and frees `gib` GiB of anonymous memory, so that the next process's fresh pages are
    backed by the host (see the module's docstring)."""
    if gib > 0:
        import numpy as np

        pages = np.ones(int(gib * 2**30), dtype=np.uint8)
        del pages


def default_warm_gib(path: str) -> float:
    available = 0.0
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) / 2**20
    size = os.path.getsize(path) / 2**30
    return max(0.0, min(1.5 * size + 1.0, available - size - 2.0))


def spawn(args, engine: str, cache_dir: str = "") -> dict:
    warm_free_memory(args.warm_gib)
    command = [sys.executable, os.path.abspath(__file__), args.path, "--child", engine, "--ctx", str(args.ctx)]
    command += ["--threads", str(args.threads), "--cache-dir", cache_dir]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{engine}: {result}", file=sys.stderr, flush=True)
    return result


def main(argv) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="a GGUF file")
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--warm-gib", type=float, help="GiB of memory touched and freed before each run (0: none; see above)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.engine = args.child
        child(args)
        return
    from machine import describe_cpu

    if args.warm_gib is None:
        args.warm_gib = default_warm_gib(args.path)

    with open(args.path, "rb") as f:  # into the page cache, for every run alike
        while f.read(1 << 24):
            pass
    runs = {"gpt, first start": [], "gpt, later start": [], "llama.cpp": []}
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            fresh = os.path.join(scratch, f"round-{round_index}")  # nothing cached
            runs["gpt, first start"].append(spawn(args, "gpt", fresh))
            order = [("gpt, later start", "gpt"), ("llama.cpp", "llama.cpp")]
            for name, engine in order if round_index % 2 == 0 else order[::-1]:
                runs[name].append(spawn(args, engine, fresh))
    print(f"command: PYTHONPATH=bazel-bin/python python3 tools/bench/bench_start.py {' '.join(argv)}")
    print(
        f"cpu: {describe_cpu()}; {args.threads} threads; medians of {args.rounds} rounds; "
        f"{args.warm_gib:.1f} GiB of memory warmed before each run\n"
    )
    print("| engine | import s | load s | first token s | load + first token s | RSS after load MiB | peak MiB |")
    print("|---|---|---|---|---|---|---|")
    for name, results in runs.items():

        def median(key, results=results):
            return statistics.median(r[key] for r in results)

        total = statistics.median(r["load_s"] + r["first_token_s"] for r in results)
        print(
            f"| {name} | {median('import_s'):.2f} | {median('load_s'):.2f} | {median('first_token_s'):.2f} "
            f"| {total:.2f} | {median('rss_loaded_mib'):.0f} | {median('peak_mib'):.0f} |"
        )
    later = runs["gpt, later start"]
    if not all(r["packed_weights_from_cache"] for r in later):
        print("\nwarning: a later start did not read its packed weights from the cache")


if __name__ == "__main__":
    main(sys.argv[1:])
