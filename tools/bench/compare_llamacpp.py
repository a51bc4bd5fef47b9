"""gpt side by side with llama.cpp on a real GGUF file: token ids, logits, greedy tokens, speed, memory.

    PYTHONPATH=bazel-bin/python python3 tools/bench/compare_llamacpp.py            # SmolLM2-135M Q4_1
    PYTHONPATH=bazel-bin/python python3 tools/bench/compare_llamacpp.py --no-speed # correctness only

llama.cpp is llama-cpp-python, built from source for this CPU as requirements-peers.txt says; it
runs the file as shipped (SmolLM2's Q4_1 layers through its q4_1 x q8_1 kernels, the Q8_0
embedding); gpt computes in the --formats it is compiled for: q4_1 keeps the file's Q4_1 blocks
(and its Q8_0 embedding) as they are; f32, bf16, q8_0 and q4_0 widen the Q4_1 tensors to float32
at load and convert them from there.

Correctness, in this process (tools/bench/compare_llamacpp_correctness.py):
- token ids of varied texts: gpt's `model.tokenizer.encode(text, add_special_tokens)` against
  `Llama.tokenize(text, add_bos, special=True)`, with and without the BOS/EOS the file asks for;
  the same texts with special-token markup read as plain text (llama.cpp's special=False; on gpt's
  side the tokenizers library's `encode_special_tokens`, which gpt itself does not offer); and
  `model.tokenizer.decode` against `Llama.detokenize`;
- logits teacher-forced over llama.cpp's own greedy continuations (--teacher-tokens each) of
  several prompts: three chat prompts in the file's template and an English paragraph. Top-1
  agreement and KL(llama.cpp || gpt) per continuation, pooled over all of them (issue 27's
  measure), and over the paragraph's own human-written tokens, where the model is least sure; and
  both engines against a third opinion when torch and transformers are installed: transformers'
  LlamaForCausalLM in float32 on the file as its own GGUF loader dequantizes it (the model the file
  defines, with no activation quantization);
- greedy decoding of --greedy-tokens tokens from a chat prompt (gpt's cached `generate` at
  temperature 0, llama.cpp's argmax of its logits), EOS not stopping either: the common prefix.

Speed and memory, each engine in a subprocess of its own (so that RSS is that engine's alone, and
an engine's allocations do not slow the next): ppN (N prompt tokens through prefill into an empty
cache of N) and tgN (N tokens decoded one at a time from an empty cache of N), as
tools/bench/gpt_bench.py and llama-bench run them (its runner classes, tools/bench/bench_runners.py), with
fixed random tokens, after a warm-up run that compiles. Each engine runs once per round, --rounds
rounds, the order rotated every round, so that the load of this shared machine falls on all of
them alike; before each run the parent waits (up to --quiet-wait seconds) for the CPUs to be 90%
idle. Each run times --repetitions repetitions of at least --min-seconds; the table gives the
median and the best t/s over all of them (on a machine shared with other jobs, the best is the
least disturbed).
--llama-formats adds llama.cpp rows on the file converted by llama.cpp itself (llama-quantize's
code, --allow-requantize) to gpt's formats, so that each format meets its own kernels.
Memory, from /proc/self/status: VmRSS after loading, the same after glibc's malloc_trim (the part
that is free heap memory kept from the load's temporaries), VmRSS after the tests, how much of it
is libLLVM's and libMLIR's mapped code and data (/proc/self/smaps), and VmHWM.
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types

import numpy as np
from compare_llamacpp_correctness import correctness
from machine import describe_cpu

TOOLS = os.path.dirname(os.path.abspath(__file__))


# -- subprocess side --------------------------------------------------------------------------


def memory_kib():
    """{'VmRSS': KiB, 'VmHWM': KiB} of this process."""
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(value.split()[0])
    return values


def compiler_libraries_kib():
    """Resident KiB of this process's mappings of libLLVM and libMLIR: the compiler's share of RSS,
    which a process serving cached programs carries only because the extension links them."""
    total, counting = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if fields and "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's header line
                path = fields[5] if len(fields) > 5 else ""
                counting = "libLLVM" in path or "libMLIR" in path
            elif counting and fields[0] == "Rss:":
                total += int(fields[1])
    return total


def import_runners(with_gpt):
    """tools/bench/bench_runners.py, tools/bench/gpt_bench.py's runners and timing loop, which these rows share.
    It imports gpt at the top; the llama.cpp subprocess gets an empty stand-in module instead, since
    LlamaCppRunner does not use gpt and importing gpt (libMLIR, LLVM) would add about 75 MB to
    llama.cpp's RSS."""
    if not with_gpt:
        sys.modules.setdefault("gpt", types.ModuleType("gpt"))
    sys.path.insert(0, TOOLS)
    import bench_runners

    return bench_runners


def decode_weight_bytes(runner):
    """Bytes of weights one decode step of gpt's model reads: everything it stores and reads in place,
    less a token table it only gathers a row of (an untied model's lookup copy)."""
    model = runner.model
    stored = sum(n for name, _, n in model._compiled.stored_arguments() if "embed_tokens" not in name)
    in_place = [name for name in model._compiled.borrowed_parameters() if "embed_tokens" not in name]
    shapes = dict(model._compiled.supplied_parameters())
    return stored + sum(4 * int(np.prod(shapes[name])) for name in in_place)


def print_decode_floor(args, results, tests):
    """gpt's decode against the time to read its weights once at the read bandwidth of this machine
    (bench_runners.read_bandwidth at --threads), probed just before and after each of gpt's runs (speed):
    this machine's bandwidth moves with its neighbours' (17 to 32 GB/s within one hour of 2026-11-29), so
    a probe minutes away from the decode it is compared with says little. Nothing without a plain
    decode test (tgN: a pp4096 run alone has no probes)."""
    plain = plain_decode_tests(tests)
    if not plain:
        return
    print(
        f"\nDecode against the weight-streaming floor (read bandwidth at {args.threads} threads, "
        "probed around each run):\n"
    )
    print(
        "| engine | test | weight bytes per token | read GB/s around the runs | floor ms/token | decode ms/token "
        "| decode / floor |"
    )
    print("|---|---|---|---|---|---|---|")
    for engine, rows in results.items():
        if not engine.startswith("gpt:") or not rows:
            continue
        weight_bytes = rows[0]["decode_weight_bytes"]
        probes = [b for row in rows for b in row["read_bandwidth"]]
        bandwidth = statistics.median(probes)
        shown = f"{min(probes) / 1e9:.1f} to {max(probes) / 1e9:.1f} (median {bandwidth / 1e9:.1f})"
        for test in plain:
            rate = statistics.median(r for row in rows for r in row["rates"][test])
            floor_ms, ours_ms = 1e3 * weight_bytes / bandwidth, 1e3 / rate
            print(
                f"| {engine} | {test} | {weight_bytes / 1e6:.0f} MB | {shown} | {floor_ms:.1f} | {ours_ms:.1f} "
                f"| {ours_ms / floor_ms:.2f}x |"
            )


def parse_test(test):
    """("pp" or "tg", N, depth) of "ppN", "tgN" or "tgN@D" (N tokens decoded after D in the cache)."""
    name, _, depth = test.partition("@")
    if name[:2] not in ("pp", "tg") or not name[2:].isdigit() or (depth and (name[:2] != "tg" or not depth.isdigit())):
        raise ValueError(f"--tests: {test!r} is not ppN, tgN or tgN@D")
    return name[:2], int(name[2:]), int(depth or 0)


def plain_decode_tests(tests):
    """The tgN tests of `tests` (not tgN@D): the ones print_decode_floor compares with the floor."""
    return [t for t in tests if parse_test(t)[0] == "tg" and not parse_test(t)[2]]


def worker(args):
    """One engine's rows, printed as one JSON line."""
    engine, _, weight_format = args.worker.partition(":")
    bench = import_runners(with_gpt=engine == "gpt")
    start = time.perf_counter()
    if engine == "gpt":
        import gpt

        class GGUFRunner(bench.OursRunner):
            def __init__(self, path, threads, weight_format):
                # The KV cache in f16, as llama.cpp keeps its own by default.
                options = gpt.CompileOptions(threads=threads, weights=weight_format, kv_cache="f16")
                # Room for the longest test (tgN@D needs D + N positions), as llama-bench sizes its context.
                needed = max(sum(parse_test(t)[1:]) for t in args.tests.split(","))
                self.model = gpt.GPT.from_gguf(path, options, context=max(needed, 4096))
                self.caches = {}

        runner = GGUFRunner(args.path, args.threads, weight_format)
        vocab = runner.model.config.vocab_size
    else:
        runner = bench.LlamaCppRunner(args.path, args.threads)
        vocab = runner.llm.n_vocab()
    load_seconds = time.perf_counter() - start
    loaded = memory_kib()["VmRSS"]
    # What the engine holds, apart from the free memory glibc keeps in its heap after the load's
    # temporaries (gpt widens the file's tensors to float32 before packing them).
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    trimmed = memory_kib()["VmRSS"]
    # The first token of a 16-token prompt, as a user waits for it after the load: it compiles (or
    # loads from the disk cache) the programs of that prompt and of one decode step.
    first_ids = np.random.default_rng(1).integers(0, vocab, size=17).tolist()
    start = time.perf_counter()
    runner.generate_after(first_ids[:16], first_ids[16:])
    first_token_seconds = time.perf_counter() - start
    if engine == "gpt":
        # A first load writes the packed weights to the disk cache in the background (gpt.weight_cache);
        # the throughput tests below measure the steady state, as llama-bench does, not that write.
        import gpt.weight_cache

        gpt.weight_cache.wait()
    rates, warmup_seconds = {}, {}
    for test in args.tests.split(","):
        kind, count, depth = parse_test(test)
        ids = np.random.default_rng(0).integers(0, vocab, size=count).tolist()
        if depth:  # tgN@D: N tokens decoded after D prefilled (llama-bench -d D), only the N timed
            context = np.random.default_rng(2).integers(0, vocab, size=depth).tolist()
            start = time.perf_counter()
            runner.generate_after(context, ids)  # warm-up: compiles
            warmup_seconds[test] = time.perf_counter() - start
            rates[test] = [count / runner.generate_after(context, ids) for _ in range(args.repetitions)]
            continue
        run = {"pp": runner.prompt, "tg": runner.generate}[kind]
        start = time.perf_counter()
        run(ids)  # warm-up: compiles
        warmup_seconds[test] = time.perf_counter() - start
        rates[test] = [bench.measure(run, ids, count, args.min_seconds) for _ in range(args.repetitions)]
    memory = memory_kib()
    print(
        json.dumps(
            dict(
                rates=rates,
                load_seconds=load_seconds,
                first_token_seconds=first_token_seconds,
                warmup_seconds=warmup_seconds,
                rss_loaded_kib=loaded,
                rss_trimmed_kib=trimmed,
                rss_after_kib=memory["VmRSS"],
                hwm_kib=memory["VmHWM"],
                compiler_libraries_kib=compiler_libraries_kib(),
                decode_weight_bytes=decode_weight_bytes(runner) if engine == "gpt" else None,
            )
        ),
        flush=True,
    )


# -- speed ------------------------------------------------------------------------------------


def run_worker(args, engine, path):
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        engine,
        "--path",
        path,
        "--threads",
        str(args.threads),
        "--tests",
        args.tests,
        "--repetitions",
        str(args.repetitions),
        "--min-seconds",
        str(args.min_seconds),
    ]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def cpu_idle(seconds):
    """The fraction of this machine's CPU time that was idle over the next `seconds` (/proc/stat)."""

    def times():
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return values[3] + values[4], sum(values)  # idle + iowait, all

    idle0, total0 = times()
    time.sleep(seconds)
    idle1, total1 = times()
    return (idle1 - idle0) / max(total1 - total0, 1)


def wait_for_quiet(max_seconds, idle=0.9, window=2.0):
    """Waits, up to `max_seconds`, for a `window` in which the CPUs are at least `idle` idle;
    returns the idle fraction of the last window. The other jobs of a shared machine come and go:
    an engine started while they run is measured against them."""
    deadline = time.monotonic() + max_seconds
    while True:
        seen = cpu_idle(window)
        if seen >= idle or time.monotonic() >= deadline:
            return seen


def mib(kib_values):
    return f"{statistics.median(kib_values) / 1024:.0f}"


# llama.cpp's file types for --llama-formats (llama_ftype), as llama-quantize names them.
LLAMA_FTYPES = {
    "f32": "LLAMA_FTYPE_ALL_F32",
    "bf16": "LLAMA_FTYPE_MOSTLY_BF16",
    "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
    "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
}


def requantize(path, fmt, directory):
    """The GGUF file at `path` converted to `fmt` by llama.cpp's own llama_model_quantize, as
    `llama-quantize --allow-requantize` does (its default choice of types for the tied embedding:
    Q6_K under q4_0), written in `directory`."""
    import llama_cpp

    out = os.path.join(directory, f"{os.path.splitext(os.path.basename(path))[0]}-{fmt}.gguf")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, LLAMA_FTYPES[fmt])
    params.allow_requantize = True
    if llama_cpp.llama_model_quantize(path.encode(), out.encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama_model_quantize to {fmt} failed")
    return out


def speed(args, directory):
    tests = args.tests.split(",")
    engines = {f"gpt:{fmt}": args.path for fmt in args.formats.split(",")}
    engines["llama.cpp:"] = args.path
    for fmt in filter(None, args.llama_formats.split(",")):
        engines[f"llama.cpp:{fmt}"] = requantize(args.path, fmt, directory)
    order = list(engines)
    results = {engine: [] for engine in order}
    loads, idles = [], []
    bench = import_runners(with_gpt=False)
    for round_index in range(args.rounds):
        shift = round_index % len(order)
        for engine in order[shift:] + order[:shift]:
            idles.append(wait_for_quiet(args.quiet_wait))
            loads.append(os.getloadavg()[0])
            probe = engine.startswith("gpt:") and bool(plain_decode_tests(tests))
            before = bench.read_bandwidth(args.threads) if probe else None
            result = run_worker(args, engine, engines[engine])
            # In this process, not the worker's: the probe's 1 GiB array stays out of its RSS.
            result["read_bandwidth"] = [before, bench.read_bandwidth(args.threads)] if probe else []
            results[engine].append(result)
            rates = ", ".join(f"{t} {statistics.mean(result['rates'][t]):.1f}" for t in tests)
            print(
                f"round {round_index + 1} {engine.rstrip(':')}: {rates} t/s (CPUs {idles[-1]:.0%} idle before)",
                file=sys.stderr,
                flush=True,
            )

    def rate(engine, test):
        pooled = [rate for r in results[engine] for rate in r["rates"][test]]
        return statistics.median(pooled), max(pooled)

    print(
        f"### Speed and memory ({args.threads} threads; t/s: median and best of {args.rounds} interleaved "
        f"rounds x {args.repetitions} repetitions; before the runs, 1-minute load average {min(loads):.2f} "
        f"to {max(loads):.2f} (median {statistics.median(loads):.2f}), CPUs idle {min(idles):.0%} to "
        f"{max(idles):.0%} over 2 s)\n"
    )
    header = " | ".join(f"{t} t/s (best) | {t} / llama.cpp as shipped (best)" for t in tests)
    print(
        f"| backend | weights | {header} | load s | load + first token s | RSS loaded MiB | RSS loaded, trimmed MiB "
        "| RSS after tests MiB | of which libLLVM + libMLIR MiB | peak RSS MiB |"
    )
    print("|---|---|" + "---|---|" * len(tests) + "---|---|---|---|---|---|---|")
    shipped = "llama.cpp:"
    for engine in order:
        backend, _, fmt = engine.partition(":")
        cells = []
        for test in tests:
            (median, best), (peer_median, peer_best) = rate(engine, test), rate(shipped, test)
            cells.append(f"{median:.1f} ({best:.1f}) | {median / peer_median:.2f}x ({best / peer_best:.2f}x)")
        rows = results[engine]
        load = statistics.median(r["load_seconds"] for r in rows)
        first = statistics.median(r["load_seconds"] + r["first_token_seconds"] for r in rows)
        if backend == "llama.cpp":
            fmt = f"{fmt}, by llama_model_quantize" if fmt else "the file as shipped"
        print(
            f"| {'gpt-mlir-jit' if backend == 'gpt' else backend} | {fmt} | {' | '.join(cells)} "
            f"| {load:.1f} | {first:.1f} "
            f"| {mib([r['rss_loaded_kib'] for r in rows])} | {mib([r['rss_trimmed_kib'] for r in rows])} "
            f"| {mib([r['rss_after_kib'] for r in rows])} | {mib([r['compiler_libraries_kib'] for r in rows])} "
            f"| {mib([r['hwm_kib'] for r in rows])} |"
        )
    same = [f for f in args.formats.split(",") if f"llama.cpp:{f}" in engines]
    if same:
        print("\ngpt / llama.cpp in the same format (medians; llama.cpp's file converted from the shipped one):\n")
        print("| weights | " + " | ".join(tests) + " |")
        print("|---|" + "---|" * len(tests))
        for fmt in same:
            ratios = [rate(f"gpt:{fmt}", t)[0] / rate(f"llama.cpp:{fmt}", t)[0] for t in tests]
            print(f"| {fmt} | " + " | ".join(f"{r:.2f}x" for r in ratios) + " |")
    print_decode_floor(args, results, tests)
    print()


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="an installed model's name (gpt.models) or a GGUF path")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--formats", default="f32,bf16,q8_0,q4_0,q4_1", help="gpt's weight formats, comma-separated")
    parser.add_argument(
        "--tests", default="pp128,tg64", help="ppN, tgN or tgN@D (after D tokens, llama-bench's -d), comma-separated"
    )
    parser.add_argument(
        "--llama-formats",
        default="",
        help="also llama.cpp rows on the file converted by llama.cpp to these formats (f32, bf16, q8_0, q4_0)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=0.5)
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=120.0,
        help="before each run, wait up to this many seconds for 2 s with the CPUs 90%% idle",
    )
    parser.add_argument("--teacher-tokens", type=int, default=64, help="llama.cpp greedy tokens to teacher-force")
    parser.add_argument("--greedy-tokens", type=int, default=32)
    parser.add_argument("--no-speed", action="store_true")
    parser.add_argument("--no-correctness", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # ENGINE:FORMAT, run by speed()
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    import llama_cpp

    import gpt.models

    args.path = gpt.models.resolve(args.model)
    print("command: PYTHONPATH=bazel-bin/python python3 tools/bench/compare_llamacpp.py " + " ".join(argv))
    print("cpu: " + describe_cpu())
    print(f"model: {args.path}")
    system_info = llama_cpp.llama_print_system_info().decode().strip()
    print(f"llama.cpp: llama-cpp-python {llama_cpp.__version__}; {system_info}\n")
    if not args.no_correctness:
        correctness(args)
    if not args.no_speed:
        with tempfile.TemporaryDirectory(prefix="compare_llamacpp-") as directory:
            speed(args, directory)


if __name__ == "__main__":
    main(sys.argv[1:])
