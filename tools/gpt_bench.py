"""llama-bench-style throughput table: prompt processing (pp) and token generation (tg).

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/gpt_bench.py
    bazel run //tools:gpt_bench -- --models nano

Columns as llama.cpp's llama-bench: model | size | params | backend | threads | test | t/s, with
t/s the mean ± std over --repetitions repetitions, each of which runs its test back to back for
at least --min-seconds (once, for tests that take longer). ppN: N prompt tokens through prefill
into an empty KV cache; tgN: N tokens decoded one at a time against the cache, from an empty
context; the cache holds exactly N positions (llama-bench's context is n_prompt + n_gen). fwdN (not a llama-bench
test): one forward pass over N tokens returning the logits of every position. Tokens are fixed
(no tokenization, no sampling); compilation happens in a warm-up run before timing.

Peers, measured in the same run with the same weights when their packages are installed:
"pytorch-eager" (HF GPT2LMHeadModel; torch, transformers), with --torch-compile "torch.compile"
(that model through TorchInductor) and "onnxruntime" (that model exported with torch.onnx, dynamo
exporter; pip install -r requirements-peers.txt). ONNX Runtime has no
cache object: its prefill is the cache-less graph over the prompt, and its tgN runs N steps of a
graph whose key/value inputs grow from 1 to N positions (the first past is one zero position).

After the table, the decode floor: the weight bytes one decode step must read (every weight but
the embedding tables, of which it gathers one row) over the read bandwidth measured here with
the same thread count (numpy sums of a 1 GiB array on that many threads), against the measured
ms/token of tgN.
"""

import argparse
import concurrent.futures
import re
import statistics
import sys
import tempfile
import time

import numpy as np

import gpt

MODELS = {
    "nano": dict(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=1024),
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024),
}


def stats(rates):
    return f"{statistics.mean(rates):.2f} ± {statistics.stdev(rates) if len(rates) > 1 else 0.0:.2f}"


class OursRunner:
    backend = "gpt-mlir-jit"

    def __init__(self, cfg, weights, threads, weight_format="f32"):
        options = gpt.CompileOptions(threads=threads, weights=weight_format)
        self.model = gpt.GPT.from_weights(cfg, weights, options)

    def forward(self, ids):
        self.model.forward(ids)

    # Like llama-bench's context (n_prompt + n_gen), the cache holds exactly the test's tokens.
    def prompt(self, ids):
        self.model.prefill(ids, self.model.new_cache(len(ids)))

    def generate(self, ids):
        cache = self.model.new_cache(len(ids))
        for token in ids:
            self.model.decode(int(token), cache)


class TorchRunner:
    backend = "pytorch-eager"

    def __init__(self, cfg, weights, threads):
        import warnings

        import torch
        import transformers
        from transformers import GPT2Config, GPT2LMHeadModel

        warnings.filterwarnings("ignore", category=FutureWarning)  # past_key_values' renaming
        transformers.utils.logging.set_verbosity_error()
        torch.set_num_threads(threads)
        self.torch = torch
        hf = GPT2Config(
            n_layer=cfg.n_layer,
            n_head=cfg.n_head,
            n_embd=cfg.n_embd,
            vocab_size=cfg.vocab_size,
            n_positions=cfg.block_size,
            bos_token_id=0,
            eos_token_id=0,
        )
        self.model = GPT2LMHeadModel(hf).eval()
        self.model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=False)

    def forward(self, ids):
        with self.torch.no_grad():
            self.model(self.torch.tensor([ids]), use_cache=False)

    def prompt(self, ids):
        with self.torch.no_grad():
            self.model(self.torch.tensor([ids]), use_cache=True)

    def generate(self, ids):
        with self.torch.no_grad():
            past = None
            for token in ids:
                out = self.model(self.torch.tensor([[int(token)]]), past_key_values=past, use_cache=True)
                past = out.past_key_values


class TorchCompileRunner(TorchRunner):
    """The same HF model through torch.compile (TorchInductor, default mode, CPU C++ codegen). The
    warm-up run compiles; decode's growing cache makes Dynamo recompile once with a dynamic
    length, also in the warm-up."""

    backend = "torch.compile"

    def __init__(self, cfg, weights, threads):
        super().__init__(cfg, weights, threads)
        self.model = self.torch.compile(self.model)


class OnnxRuntimeRunner:
    backend = "onnxruntime"

    def __init__(self, cfg, weights, threads):
        import onnxruntime
        import torch

        torch_runner = TorchRunner(cfg, weights, threads)
        self.cfg, self.torch = cfg, torch
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.forward_session = onnxruntime.InferenceSession(
            self._export(torch_runner.model, cached=False), options, providers=["CPUExecutionProvider"]
        )
        self.step_session = onnxruntime.InferenceSession(
            self._export(torch_runner.model, cached=True), options, providers=["CPUExecutionProvider"]
        )

    def _export(self, model, cached):
        import torch
        from transformers import DynamicCache

        n_layer = self.cfg.n_layer

        class Forward(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, ids):
                return self.model(ids, use_cache=False).logits

        class Step(Forward):
            def forward(self, ids, past_k, past_v):
                cache = DynamicCache()
                for layer in range(n_layer):
                    cache.update(past_k[layer], past_v[layer], layer)
                out = self.model(ids, past_key_values=cache, use_cache=True)
                layers = out.past_key_values.layers
                return (
                    out.logits,
                    torch.stack([layers[i].keys for i in range(n_layer)]),
                    torch.stack([layers[i].values for i in range(n_layer)]),
                )

        path = tempfile.NamedTemporaryFile(suffix=".onnx", delete=False).name
        tokens = torch.export.Dim("tokens", min=1, max=self.cfg.block_size)
        if cached:
            past = torch.zeros(self._past_shape(2))
            positions = torch.export.Dim("past", min=1, max=self.cfg.block_size - 1)
            torch.onnx.export(
                Step(),
                (torch.zeros(1, 1, dtype=torch.long), past, past),
                path,
                dynamo=True,
                dynamic_shapes=(None, {3: positions}, {3: positions}),
                verbose=False,
            )
        else:
            torch.onnx.export(
                Forward(),
                (torch.zeros(1, 8, dtype=torch.long),),
                path,
                dynamo=True,
                dynamic_shapes=({1: tokens},),
                verbose=False,
            )
        return path

    def _past_shape(self, positions):
        c = self.cfg
        return (c.n_layer, 1, c.n_head, positions, c.n_embd // c.n_head)

    def forward(self, ids):
        self.forward_session.run(None, {"ids": np.asarray([ids], np.int64)})

    prompt = forward

    def generate(self, ids):
        past_k = past_v = np.zeros(self._past_shape(1), np.float32)
        for token in ids:
            _, past_k, past_v = self.step_session.run(
                None, {"ids": np.asarray([[token]], np.int64), "past_k": past_k, "past_v": past_v}
            )


def measure(run, ids, count, min_seconds):
    """Tokens per second of one repetition: `run(ids)` back to back until `min_seconds` have
    passed (at least once), so that a test taking a fraction of a millisecond (nano's) is not
    one timer reading and one scheduler hiccup."""
    calls = 0
    start = time.perf_counter()
    while True:
        run(ids)
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return calls * count / elapsed


def runners(peers, torch_compile):
    yield OursRunner
    if not peers:
        return
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return
    yield TorchRunner
    if torch_compile:
        yield TorchCompileRunner
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        return
    yield OnnxRuntimeRunner


def read_bandwidth(threads, gib=1.0, repetitions=5):
    """Bytes per second that `threads` threads reading a large array reach (best of a few)."""
    data = np.ones(int(gib * 2**30) // 4, np.float32)
    chunks = np.array_split(data, threads)
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(np.sum, chunks))  # touch every page first
        best = float("inf")
        for _ in range(repetitions):
            start = time.perf_counter()
            list(pool.map(np.sum, chunks))  # numpy releases the GIL while summing
            best = min(best, time.perf_counter() - start)
    return data.nbytes / best


MATMUL_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# Bytes per matmul weight as stored: q8_0 is 32 int8 codes + one fp16 scale per block of 32,
# q4_0 16 bytes of 4-bit codes + one fp16 scale.
BYTES_PER_WEIGHT = {"f32": 4, "bf16": 2, "q8_0": 34 / 32, "q4_0": 18 / 32}


def decode_weight_bytes(cfg, weight_format="f32"):
    """Bytes of weights one decode step reads: every weight but the embedding tables (it gathers
    one row of each), plus the LM head, which reads the whole (tied) embedding, padded to a
    multiple of 256 columns as the compiled program stores it. Matmul weights and the LM head
    are in `weight_format`, the rest in f32."""
    shapes = gpt.weights.expected_shapes(cfg)
    gathered = ("transformer.wte.weight", "transformer.wpe.weight")
    matmul = BYTES_PER_WEIGHT[weight_format]
    total = 0
    for name, shape in shapes.items():
        if name not in gathered:
            total += int(np.prod(shape)) * (matmul if name.endswith(MATMUL_WEIGHTS) else 4)
    padded_vocab = (cfg.vocab_size + 255) // 256 * 256
    return int(total + matmul * padded_vocab * cfg.n_embd)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="nano,gpt2-small")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--tests", default="fwd128,pp128,pp512,tg128", help="fwdN, ppN or tgN, comma-separated")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument(
        "--min-seconds", type=float, default=0.05, help="each repetition repeats its test until this long has passed"
    )
    parser.add_argument("--no-peers", action="store_true", help="only this project's rows")
    parser.add_argument(
        "--weights",
        default="f32",
        help="weight formats of this project's rows, comma-separated (f32, bf16, q8_0, q4_0)",
    )
    parser.add_argument(
        "--torch-compile",
        action="store_true",
        help="also torch.compile rows (Inductor compiles for minutes per model here)",
    )
    args = parser.parse_args(argv)
    print("command: PYTHONPATH=bazel-bin/python python3 tools/gpt_bench.py " + " ".join(argv))
    print()
    print("| model | size | params | backend | threads | test | t/s |")
    print("|---|---|---|---|---|---|---|")
    thread_counts = [int(t) for t in args.threads.split(",")]
    formats = args.weights.split(",")
    decode_rates = {}  # (model, format, threads) -> our tgN tokens per second
    for name in args.models.split(","):
        cfg = gpt.GPTConfig(**MODELS[name])
        weights = gpt.weights.random_weights(cfg, seed=0)
        params = sum(v.size for v in weights.values())
        # Our rows once per weight format (the format follows the model name, as llama-bench
        # names its model types); peers run in f32.
        configurations = [(runner_class, fmt) for fmt in formats for runner_class in [OursRunner]]
        configurations += [(r, "f32") for r in runners(not args.no_peers, args.torch_compile) if r is not OursRunner]
        for runner_class, fmt in configurations:
            label = name if fmt == "f32" else f"{name} {fmt}"
            # The parameters as stored: matmul weights in the format, the rest in f32.
            stored = sum(
                v.size * (BYTES_PER_WEIGHT[fmt] if k.endswith(MATMUL_WEIGHTS) else 4) for k, v in weights.items()
            )
            size = f"{stored / 2**20:.2f} MiB"
            for threads in thread_counts:
                runner = runner_class(cfg, weights, threads, fmt) if runner_class is OursRunner else None
                runner = runner or runner_class(cfg, weights, threads)
                for test in args.tests.split(","):
                    kind, count = re.fullmatch(r"(fwd|pp|tg)(\d+)", test).groups()
                    count = int(count)
                    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, size=count).tolist()
                    run = {"fwd": runner.forward, "pp": runner.prompt, "tg": runner.generate}[kind]
                    run(ids)  # warm-up: compiles
                    rates = [measure(run, ids, count, args.min_seconds) for _ in range(args.repetitions)]
                    if runner_class is OursRunner and kind == "tg":
                        decode_rates[name, fmt, threads] = statistics.mean(rates)
                    print(
                        f"| {label} | {size} | {params / 1e6:.2f} M | {runner.backend} | {threads} | {test} "
                        f"| {stats(rates)} |",
                        flush=True,
                    )
    if not decode_rates:
        return
    print()
    print(
        "| model | threads | weight bytes per decode step | read bandwidth | floor (ms/token) "
        "| gpt-mlir-jit decode (ms/token) | decode / floor |"
    )
    print("|---|---|---|---|---|---|---|")
    for threads in thread_counts:
        bandwidth = read_bandwidth(threads)
        for name, fmt in ((name, fmt) for name in args.models.split(",") for fmt in formats):
            if (name, fmt, threads) not in decode_rates:
                continue
            weight_bytes = decode_weight_bytes(gpt.GPTConfig(**MODELS[name]), fmt)
            floor_ms = 1e3 * weight_bytes / bandwidth
            ours_ms = 1e3 / decode_rates[name, fmt, threads]
            label = name if fmt == "f32" else f"{name} {fmt}"
            print(
                f"| {label} | {threads} | {weight_bytes / 1e6:.1f} MB | {bandwidth / 1e9:.1f} GB/s "
                f"| {floor_ms:.3f} | {ours_ms:.3f} | {ours_ms / floor_ms:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
