"""Decode of one GGUF file by several builds of the gpt package, taking turns: a compiler change's
effect on the decode step, measured where the machine's memory bandwidth drifts by tens of percent
within minutes.

    bazel build //python:gpt && cp -rL bazel-bin/python /tmp/before_py    # at the old commit
    bazel build //python:gpt && cp -rL bazel-bin/python /tmp/after_py     # at the new one
    python3 tools/bench/bench_decode_packages.py /tmp/smollm2-1.7b.q4_k_m.gguf \\
        before=/tmp/before_py after=/tmp/after_py --rounds 24

Each package runs in a process of its own (two builds of `gpt` cannot share one), which loads the
file (the KV cache in f16, context 1024, programs compiled into a temporary directory), prefills 16
tokens and then waits. In each round the processes take turns, in alternating order, at `--steps`
timed decode steps; between turns the driver sleeps long enough for the last one's OpenMP threads to
stop spinning (libomp's default KMP_BLOCKTIME is 200 ms). A package's figure is the median of its
rounds' median steps, and the ratio is against the first package named.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from machine import describe_cpu

# What each process runs: load, prefill, then per line on stdin that many timed decode steps, printing
# their median in ms. The cache starts again before it would fill.
WORKER = """
import statistics, sys, time
import gpt
path, cache_dir, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
options = gpt.CompileOptions(threads=threads, cache_dir=cache_dir, kv_cache="f16", weight_cache_max_bytes=0)
model = gpt.GPT.from_gguf(path, options, context=1024)
prompt = list(range(1000, 1016))
cache, position = model.new_cache(1024), len(prompt)
token = int(model.prefill(prompt, cache).argmax())
print("ready", flush=True)
for line in sys.stdin:
    steps = int(line)
    if position + steps >= 1024:
        cache, position = model.new_cache(1024), len(prompt)
        token = int(model.prefill(prompt, cache).argmax())
    position += steps
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        token = int(model.decode(token, cache).argmax())
        times.append(time.perf_counter() - start)
    print(statistics.median(times) * 1e3, flush=True)
"""

# Longer than libomp's default KMP_BLOCKTIME (200 ms), after which a finished turn's threads sleep.
PAUSE_BETWEEN_TURNS_S = 0.3


def start_worker(path: str, package: str, cache_dir: str, threads: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=package)
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, path, cache_dir, str(threads)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = worker.stdout.readline().strip()
    if line != "ready":
        worker.kill()
        raise RuntimeError(f"the package at {package} did not load {path} (its process printed {line!r})")
    return worker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="a GGUF file")
    parser.add_argument("packages", nargs="+", help="NAME=DIRECTORY, a copy of bazel-bin/python each")
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--steps", type=int, default=24, help="timed decode steps per turn")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    named = dict(spec.split("=", 1) for spec in args.packages)
    if len(named) < 2 or any(not os.path.isdir(directory) for directory in named.values()):
        parser.error("name two or more packages as NAME=DIRECTORY, each an existing directory")
    directory = tempfile.mkdtemp(prefix="bench_decode_packages-")
    workers = {}
    try:
        for index, (name, package) in enumerate(named.items()):
            workers[name] = start_worker(args.path, package, os.path.join(directory, str(index)), args.threads)
        steps = {name: [] for name in workers}
        for round_index in range(args.rounds):
            order = list(workers) if round_index % 2 == 0 else list(reversed(workers))
            for name in order:
                time.sleep(PAUSE_BETWEEN_TURNS_S)
                workers[name].stdin.write(f"{args.steps}\n")
                workers[name].stdin.flush()
                steps[name].append(float(workers[name].stdout.readline()))
    finally:
        for worker in workers.values():
            worker.stdin.close()
            worker.wait()
        shutil.rmtree(directory)
    print(
        f"command: python3 tools/bench/bench_decode_packages.py {args.path} {' '.join(args.packages)} "
        f"--rounds {args.rounds} --steps {args.steps} --threads {args.threads}"
    )
    print(f"cpu: {describe_cpu()}; {args.threads} thread(s)\n")
    print("| package | median step ms | against the first | fastest and slowest round ms |")
    print("|---|---|---|---|")
    first = statistics.median(steps[next(iter(steps))])
    for name, rounds in steps.items():
        step = statistics.median(rounds)
        print(f"| {name} | {step:.2f} | {step / first:.3f}x | {min(rounds):.1f} to {max(rounds):.1f} |")


if __name__ == "__main__":
    main()
