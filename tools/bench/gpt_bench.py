"""llama-bench-style throughput table: prompt processing (pp) and token generation (tg).

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/bench/gpt_bench.py
    bazel run //tools/bench:gpt_bench -- --models nano

Columns as llama.cpp's llama-bench: model | size | params | backend | threads | test | t/s, with
t/s the mean ± std over --repetitions repetitions, each of which runs its test back to back for
at least --min-seconds (once, for tests that take longer). ppN: N prompt tokens through prefill
into an empty KV cache; tgN: N tokens decoded one at a time against the cache, from an empty
context; the cache holds exactly N positions (llama-bench's context is n_prompt + n_gen). fwdN (not a llama-bench
test): one forward pass over N tokens returning the logits of every position. Our rows reuse one
cache per test length, reset before each run, as llama-bench reuses its context. Tokens are fixed
(no tokenization, no sampling); compilation happens in a warm-up run before timing.

Peers, measured in the same run with the same weights when their packages are installed:
"pytorch-eager" (HF GPT2LMHeadModel; torch, transformers), with --torch-compile "torch.compile"
(that model through TorchInductor) and "onnxruntime" (that model exported with torch.onnx, dynamo
exporter; pip install -r requirements-peers.txt). ONNX Runtime has no
cache object: its prefill is the cache-less graph over the prompt, and its tgN runs N steps of a
graph whose key/value inputs grow from 1 to N positions (the first past is one zero position).
--peers picks among them by backend name (default: every installed one).

"llama.cpp" (llama-cpp-python, built from source for this CPU as requirements-peers.txt says) runs
once per weight format, like this project's rows: the same weights written to a GGUF file of that
format with gpt.gguf_file.save_gguf (llama.cpp's converter's names, layout and tensor types; the
token embedding is in the format too, as llama.cpp quantizes it) and run as llama-bench runs a
test: a context of exactly the test's tokens (llama.cpp pads it), its memory cleared before each
run, ppN llama_decode of the N tokens in batches of 512 (one up to pp512; logits of the last),
tgN N llama_decodes of one token, each synchronized; flash attention on, as llama-bench's
default (auto) resolves for the CPU, and its default f16 KV cache; no fwdN rows (llama-bench has
no such test). Its size and params columns are
llama.cpp's own (llama_model_size, llama_model_n_params). Under the table, once per model, the
largest difference of llama.cpp's logits on the f32 file from gpt's forward on the same tokens,
relative to the largest logit: the rows compute one model (up to llama.cpp's fp16 GELU table).

After the table, f32 prefill's rate in GFLOP/s (matmuls and causal attention, prefill_flops)
against numpy's OpenBLAS sgemm of GPT-2 small's MLP shape at T=128 (128x768x3072, float32) on as
many threads, in a subprocess whose repetitions alternate with the prefill's (each measured as the
table's rows are); the ratios of the means and of the best repetitions. Then the decode floor:
the weight bytes one decode step must read (every weight but the embedding tables, of which it
gathers one row) over the read bandwidth measured here with the same thread count (numpy sums of
a 1 GiB array on that many threads), against the measured ms/token of tgN.
"""

import argparse
import os
import re
import statistics
import sys
import tempfile
import time

import numpy as np
from bench_runners import PEERS, LlamaCppRunner, OursRunner, measure, peer_runners, read_bandwidth
from machine import describe_cpu

import gpt
from gpt.config import WEIGHT_FORMATS
from gpt.kept_formats import FORMAT_ROWS, KEPT_QUANTIZED, head_format

MODELS = {
    "nano": dict(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=1024),
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024),
}


def stats(rates):
    return f"{statistics.mean(rates):.2f} ± {statistics.stdev(rates) if len(rates) > 1 else 0.0:.2f}"


def llama_cpp_check(runner, cfg, weights, tokens=8):
    """A line saying how far llama.cpp's logits on the f32 file (`runner`'s) are from gpt's forward
    on the same tokens: the largest absolute difference over the largest absolute logit, and
    whether the argmax agrees. The difference is llama.cpp's: its CPU GELU reads an fp16 table
    (GGML_GELU_FP16 in ggml-cpu/vec.h), rounding each input and output to fp16 (up to 2^-11
    relative each). On one GPT-2-small layer that rounding, emulated in a float64 numpy GPT-2,
    accounts for all but 1e-5 of a 2.7e-4 difference; gpt agrees with that numpy GPT-2 (exact
    GELU) to about 2e-6 on all 12."""
    ids = np.random.default_rng(1).integers(0, cfg.vocab_size, size=tokens).tolist()
    reference = gpt.GPT.from_weights(cfg, weights).forward(ids)
    logits = runner.logits(ids)
    error = float(np.abs(logits - reference).max() / np.abs(reference).max())
    agree = int((logits.argmax(-1) == reference.argmax(-1)).sum())
    return (
        f"llama.cpp logits vs gpt ({tokens} tokens, f32 weights): max rel err {error:.1e}, "
        f"argmax agrees at {agree}/{tokens} (llama.cpp's GELU rounds through an fp16 table)"
    )


MATMUL_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# Bytes per matmul weight as the compiled model stores it (its lane words and scales), by format:
# the weight-format table's (gpt.kept_formats.FORMAT_ROWS).
BYTES_PER_WEIGHT = {row.name: row.stored_bytes_per_weight for row in FORMAT_ROWS}


def decode_weight_bytes(cfg, weight_format="f32", target_cpu="host"):
    """Bytes of weights one decode step reads: every weight but the embedding tables (it gathers
    one row of each), plus the LM head, which reads the whole (tied) embedding, padded to the
    target's vocabulary multiple (gpt._gpt.tile_parameters) as the compiled program stores it. Matmul weights are in
    `weight_format`, the LM head in head_format(), the rest in f32."""
    shapes = gpt.weights.expected_shapes(cfg)
    gathered = ("transformer.wte.weight", "transformer.wpe.weight")
    matmul = BYTES_PER_WEIGHT[weight_format]
    total = 0
    for name, shape in shapes.items():
        if name not in gathered:
            total += int(np.prod(shape)) * (matmul if name.endswith(MATMUL_WEIGHTS) else 4)
    multiple = gpt._gpt.tile_parameters(target_cpu)["vocab_multiple"]
    padded_vocab = -(-cfg.vocab_size // multiple) * multiple
    return int(total + BYTES_PER_WEIGHT[head_format(weight_format)] * padded_vocab * cfg.n_embd)


def stored_bytes(weights, weight_format):
    """The parameters as our rows store them: matmul weights in the format; the tied embedding in
    f32 for f32/bf16 (looked up in place; the LM head's copy is not counted) and, for the block formats,
    once, in head_format(); the rest in f32."""
    total = 0
    for name, value in weights.items():
        if name.endswith(MATMUL_WEIGHTS):
            total += value.size * BYTES_PER_WEIGHT[weight_format]
        elif name == "transformer.wte.weight" and weight_format in KEPT_QUANTIZED:
            total += value.size * BYTES_PER_WEIGHT[head_format(weight_format)]
        else:
            total += value.size * 4
    return int(total)


def prefill_flops(cfg, tokens):
    """Floating-point operations (2 per multiply-add) of a prefill of `tokens` tokens: per layer and
    token the matmuls' 12 n_embd^2 multiply-adds (q/k/v 3, the projection 1, the MLP 4 + 4), the
    causal attention's two products (n_embd per pair of a query and a key at or before it), and
    the LM head on the last token only."""
    d, layers = cfg.n_embd, cfg.n_layer
    matmuls = tokens * layers * 12 * d * d
    attention = layers * 2 * d * tokens * (tokens + 1) // 2
    return 2 * (matmuls + attention + d * cfg.vocab_size)


SGEMM_PROGRAM = """
import sys, time
import numpy as np
m, k, n = (int(argument) for argument in sys.argv[1:4])
rng = np.random.default_rng(0)
a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
out = np.empty((m, n), np.float32)
np.matmul(a, b, out=out)  # warm-up, as the prefill's first run
try:  # which OpenBLAS kernel runs (its "core": Haswell, SkylakeX, Zen, ...)
    from threadpoolctl import threadpool_info

    kernels = [f"{i['internal_api']} {i.get('version')} {i.get('architecture')}" for i in threadpool_info()]
    print(", ".join(kernels) or "no BLAS found", flush=True)
except ImportError:
    print("unknown (pip install threadpoolctl, requirements-peers.txt)", flush=True)
for line in sys.stdin:  # one repetition per line: calls back to back for that many seconds
    min_seconds, calls, start = float(line), 0, time.perf_counter()
    while True:
        np.matmul(a, b, out=out)
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            break
    print(2 * m * k * n * calls / elapsed, flush=True)
"""


class SgemmReference:
    """numpy's OpenBLAS sgemm of [m, k] x [k, n] in float32 on `threads` threads, in a subprocess
    that runs one repetition when asked (measure), so that its repetitions alternate with the
    prefill's and both meet the same moments of a noisy machine; each is measured as the table's
    rows are (bench_runners.measure: calls back to back for min_seconds, the rate their FLOPs over
    that time). A best single call of a 0.1 ms sgemm, taken over thousands, would be a luckier
    figure than any mean (on this machine kind it runs 1.3-1.5x the median).

    A subprocess since OpenBLAS reads OPENBLAS_NUM_THREADS once, when it loads. The issue's
    reference for prefill: GPT-2 small's MLP matmul at T=128. Some machines of this kind set
    OPENBLAS_CORETYPE=Haswell (and OPENBLAS_L2_SIZE) for old OpenBLAS builds, which holds a current
    numpy's OpenBLAS to its AVX2 kernel on an AVX-512 CPU; the reference is the library at its best
    on this CPU, so this subprocess (only it: never tests or CI) drops both, and `kernel` says which
    kernel it runs."""

    SPIN_SECONDS = 0.3

    def __init__(self, threads, m=128, k=768, n=3072):
        import subprocess

        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        for forced in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
            env.pop(forced, None)
        command = [sys.executable, "-c", SGEMM_PROGRAM, str(m), str(k), str(n)]
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.kernel = self.process.stdout.readline().strip()
        self.rates = []

    def measure(self, min_seconds):
        """Runs one repetition; its FLOP/s is kept in `rates`. A pause on either side: the threads of
        each library spin for a while after its last call (libomp 200 ms, OpenBLAS about as
        long), and on a 2-core machine a spinning thread would halve the other's rate."""
        time.sleep(self.SPIN_SECONDS)
        self.process.stdin.write(f"{min_seconds}\n")
        self.process.stdin.flush()
        self.rates.append(float(self.process.stdout.readline()))
        time.sleep(self.SPIN_SECONDS)

    def close(self):
        self.process.stdin.close()
        self.process.wait()


def parse_args(argv):
    """The command line's options, with `peers`: the peer backends to measure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="nano,gpt2-small")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--tests", default="fwd128,pp128,pp512,tg128", help="fwdN, ppN or tgN, comma-separated")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument(
        "--min-seconds", type=float, default=0.05, help="each repetition repeats its test until this long has passed"
    )
    parser.add_argument("--no-peers", action="store_true", help="only this project's rows (as --peers '')")
    parser.add_argument(
        "--peers",
        default=None,
        help=f"peer backends to measure, comma-separated, of {', '.join(PEERS)} (default: every installed one; "
        "torch.compile only with --torch-compile)",
    )
    parser.add_argument(
        "--weights",
        default="f32",
        help=f"weight formats of this project's rows, comma-separated ({', '.join(WEIGHT_FORMATS)})",
    )
    parser.add_argument(
        "--torch-compile",
        action="store_true",
        help="also torch.compile rows (Inductor compiles for minutes per model here)",
    )
    args = parser.parse_args(argv)
    if args.peers is None:
        peers = [p for p in PEERS if p != "torch.compile" or args.torch_compile]
    else:
        peers = [p for p in args.peers.split(",") if p]
        unknown = [p for p in peers if p not in PEERS]
        if unknown:
            parser.error(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEERS)}")
    args.peers = [] if args.no_peers else peers
    return args


class Bench:
    """The table's rows, measured model by model, and what the summaries after it need."""

    def __init__(self, args, peer_classes, notes):
        self.args, self.peer_classes, self.notes = args, peer_classes, notes
        self.thread_counts = [int(t) for t in args.threads.split(",")]
        self.formats = args.weights.split(",")
        self.decode_rates = {}  # (model, format, threads) -> our tgN tokens per second
        self.prefill_rates = {}  # (model, threads, N) -> our f32 ppN tokens per second, per repetition
        self.sgemm = {}  # (model, threads, N) -> the SgemmReference measured between those repetitions

    def model(self, name):
        """Every runner's rows for model `name`."""
        cfg = gpt.GPTConfig(**MODELS[name])
        weights = gpt.weights.random_weights(cfg, seed=0)
        params = sum(v.size for v in weights.values())
        # Our rows once per weight format (the format follows the model name, as llama-bench
        # names its model types), each followed by llama.cpp's on the same weights in that
        # format; the other peers run in f32.
        configurations = []
        for fmt in self.formats:
            configurations.append((OursRunner, fmt))
            if LlamaCppRunner in self.peer_classes:
                configurations.append((LlamaCppRunner, fmt))
        configurations += [(r, "f32") for r in self.peer_classes if r is not LlamaCppRunner]
        checked = False
        for runner_class, fmt in configurations:
            label = name if fmt == "f32" else f"{name} {fmt}"
            stored = stored_bytes(weights, fmt)
            with tempfile.TemporaryDirectory(prefix="gpt_bench-") as directory:
                path = None
                if runner_class is LlamaCppRunner:  # the same weights, in the format, as llama.cpp reads them
                    path = os.path.join(directory, f"{name}-{fmt}.gguf")
                    gpt.gguf_file.save_gguf(weights, cfg, path, fmt)
                for threads in self.thread_counts:
                    runner = self.runner(runner_class, cfg, weights, threads, fmt, path)
                    size, row_params = f"{stored / 2**20:.2f} MiB", params
                    if runner_class is LlamaCppRunner:  # llama.cpp's own count, as llama-bench prints it
                        size, row_params = f"{runner.size / 2**20:.2f} MiB", runner.params
                    self.tests(runner, runner_class, cfg, (name, label, size, row_params, fmt, threads))
                    if runner_class is LlamaCppRunner and not checked:
                        checked = True
                        if fmt != "f32":  # the check is on the f32 file
                            path = os.path.join(directory, f"{name}-f32.gguf")
                            gpt.gguf_file.save_gguf(weights, cfg, path, "f32")
                            runner = LlamaCppRunner(path, threads)
                        self.notes.append(f"{name}: {llama_cpp_check(runner, cfg, weights)}")
                    del runner

    @staticmethod
    def runner(runner_class, cfg, weights, threads, fmt, path):
        if runner_class is LlamaCppRunner:
            return LlamaCppRunner(path, threads)
        if runner_class is OursRunner:
            return OursRunner(cfg, weights, threads, fmt)
        return runner_class(cfg, weights, threads)

    def tests(self, runner, runner_class, cfg, row):
        """The rows of each of --tests on `runner`; `row`: (model, label, size, params, format, threads)."""
        name, label, size, row_params, fmt, threads = row
        for test in self.args.tests.split(","):
            kind, count = re.fullmatch(r"(fwd|pp|tg)(\d+)", test).groups()
            if runner_class is LlamaCppRunner and kind == "fwd":
                continue  # llama-bench has no such test
            count = int(count)
            ids = np.random.default_rng(0).integers(0, cfg.vocab_size, size=count).tolist()
            run = {"fwd": runner.forward, "pp": runner.prompt, "tg": runner.generate}[kind]
            run(ids)  # warm-up: compiles
            # f32 prefill takes turns with the sgemm it is compared with (print_prefill_against_sgemm).
            reference = None
            if runner_class is OursRunner and kind == "pp" and fmt == "f32":
                reference = self.sgemm[name, threads, count] = SgemmReference(threads)
            rates = []
            for _ in range(self.args.repetitions):
                rates.append(measure(run, ids, count, self.args.min_seconds))
                if reference is not None:
                    reference.measure(self.args.min_seconds)
            if reference is not None:
                reference.close()
            if runner_class is OursRunner and kind == "tg":
                self.decode_rates[name, fmt, threads] = statistics.mean(rates)
            if runner_class is OursRunner and kind == "pp" and fmt == "f32":
                self.prefill_rates[name, threads, count] = rates
            print(
                f"| {label} | {size} | {row_params / 1e6:.2f} M | {runner.backend} | {threads} | {test} "
                f"| {stats(rates)} |",
                flush=True,
            )

    def print_decode_against_floor(self):
        """Our decode time per token against the time to read the weights once at the measured bandwidth."""
        print()
        print(
            "| model | threads | weight bytes per decode step | read bandwidth | floor (ms/token) "
            "| gpt-mlir-jit decode (ms/token) | decode / floor |"
        )
        print("|---|---|---|---|---|---|---|")
        for threads in self.thread_counts:
            bandwidth = read_bandwidth(threads)
            for name, fmt in ((name, fmt) for name in self.args.models.split(",") for fmt in self.formats):
                if (name, fmt, threads) not in self.decode_rates:
                    continue
                weight_bytes = decode_weight_bytes(gpt.GPTConfig(**MODELS[name]), fmt)
                floor_ms = 1e3 * weight_bytes / bandwidth
                ours_ms = 1e3 / self.decode_rates[name, fmt, threads]
                label = name if fmt == "f32" else f"{name} {fmt}"
                print(
                    f"| {label} | {threads} | {weight_bytes / 1e6:.1f} MB | {bandwidth / 1e9:.1f} GB/s "
                    f"| {floor_ms:.3f} | {ours_ms:.3f} | {ours_ms / floor_ms:.2f}x |",
                    flush=True,
                )


def main(argv):
    args = parse_args(argv)
    print("command: PYTHONPATH=bazel-bin/python python3 tools/bench/gpt_bench.py " + " ".join(argv))
    print("cpu: " + describe_cpu())
    print()
    print("| model | size | params | backend | threads | test | t/s |")
    print("|---|---|---|---|---|---|---|")
    notes = []  # printed under the table
    bench = Bench(args, peer_runners(args.peers, notes), notes)
    for name in args.models.split(","):
        bench.model(name)
    if notes:
        print()
        for note in notes:
            print(note)
    if bench.prefill_rates:
        print_prefill_against_sgemm(bench.prefill_rates, bench.sgemm)
    if bench.decode_rates:
        bench.print_decode_against_floor()


def gflops(rates):
    """`rates` (FLOP/s) as "mean ± std (best)" in GFLOP/s."""
    spread = statistics.stdev(rates) if len(rates) > 1 else 0.0
    return f"{statistics.mean(rates) / 1e9:.1f} ± {spread / 1e9:.1f} ({max(rates) / 1e9:.1f})"


def print_prefill_against_sgemm(prefill_rates, sgemm):
    """Our f32 prefill's FLOP rate (prefill_flops over the ppN time) against OpenBLAS's sgemm of
    GPT-2 small's MLP shape at T=128 on as many threads, their repetitions alternated: the ratio
    of the means, and of the best repetitions."""
    print()
    print(
        "| model | threads | test | gpt-mlir-jit prefill GFLOP/s, mean ± std (best) "
        "| OpenBLAS sgemm 128x768x3072 GFLOP/s, mean ± std (best) | prefill / sgemm, means | bests |"
    )
    print("|---|---|---|---|---|---|---|")
    for (name, threads, count), rates in prefill_rates.items():
        ours = [prefill_flops(gpt.GPTConfig(**MODELS[name]), count) * rate / count for rate in rates]
        reference = sgemm[name, threads, count].rates
        print(
            f"| {name} | {threads} | pp{count} | {gflops(ours)} | {gflops(reference)} "
            f"| {statistics.mean(ours) / statistics.mean(reference):.2f}x | {max(ours) / max(reference):.2f}x |",
            flush=True,
        )
    kernels = sorted({reference.kernel for reference in sgemm.values()})
    print(
        f"\nOpenBLAS sgemm ran: {'; '.join(kernels)} (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for it), "
        "its repetitions alternated with the prefill's"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
