"""A warm process's start on SmolLM2-135M as shipped: import, load and a first generate, with RSS after each.

    PYTHONPATH=<tree>/bazel-bin/python python3 tools/bench/bench_cold_start.py <cache dir of that tree> <label>

Written for A/B runs of two builds (docs/JOURNAL.md, "The runtime without the compiler"): each
tree with a disk cache of its own, already filled by an earlier run, so that the figures are
those of a process whose programs all come from the cache. Prints whether libLLVM was mapped
(a warm process should not load the compiler) and the last two generated tokens (equal across
builds). Once the side.py of that entry.
"""

import argparse
import sys
import time

start = time.perf_counter()
import gpt  # noqa: E402 (timed)
import gpt.models  # noqa: E402

import_seconds = time.perf_counter() - start


def resident_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache_dir", help="this build's disk-cache directory")
    parser.add_argument("label", help="names this build in the output")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    rss_import = resident_mib()
    start = time.perf_counter()
    options = gpt.CompileOptions(threads=args.threads, weights="auto", cache_dir=args.cache_dir)
    model = gpt.GPT.from_gguf(gpt.models.find("smollm2"), options)
    load_seconds, rss_load = time.perf_counter() - start, resident_mib()
    start = time.perf_counter()
    out = model.generate(list(range(1, 129)), max_new_tokens=2, temperature=0)
    generate_seconds, rss_generate = time.perf_counter() - start, resident_mib()
    with open("/proc/self/maps") as maps:
        llvm_mapped = "libLLVM" in maps.read()
    print(
        f"{args.label:5s} import {import_seconds:.2f}s {rss_import:.0f}MiB | load {load_seconds:.2f}s {rss_load:.0f}MiB"
        f" | generate {generate_seconds:.3f}s {rss_generate:.0f}MiB | hits {model.disk_cache_hits()}"
        f" LLVM mapped {llvm_mapped} out {list(out)[-2:]}"
    )


if __name__ == "__main__":
    sys.exit(main())
