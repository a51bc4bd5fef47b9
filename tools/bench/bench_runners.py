"""The runners of tools/bench/gpt_bench.py's rows, one class per backend (this project's, PyTorch eager,
torch.compile, ONNX Runtime, llama.cpp), with the timing loop they share (measure), which peers are
installed (peer_runners) and the read bandwidth the decode floor divides by. tools/bench/compare_llamacpp.py
runs OursRunner and LlamaCppRunner in its workers."""

import concurrent.futures
import tempfile
import time

import numpy as np

import gpt


class OursRunner:
    backend = "gpt-mlir-jit"

    def __init__(self, cfg, weights, threads, weight_format="f32"):
        options = gpt.CompileOptions(threads=threads, weights=weight_format)
        self.model = gpt.GPT.from_weights(cfg, weights, options)
        self.caches = {}

    def forward(self, ids):
        self.model.forward(ids)

    def empty_cache(self, length):
        """A cache of exactly `length` positions (as llama-bench's context is n_prompt + n_gen),
        emptied: made once and reset before each run, as llama-bench clears its context's memory
        instead of allocating it again (a new cache's zeroed pages cost about 7% of GPT-2 small's
        pp128)."""
        cache = self.caches.get(length)
        if cache is None:
            cache = self.caches[length] = self.model.new_cache(length)
        cache.reset()
        return cache

    def prompt(self, ids):
        self.model.prefill(ids, self.empty_cache(len(ids)))

    def generate(self, ids):
        cache = self.empty_cache(len(ids))
        for token in ids:
            self.model.decode(int(token), cache)

    def generate_after(self, context_ids, ids):
        """Seconds to decode `ids` one at a time after `context_ids` were prefilled (not timed), as
        llama-bench's -d runs tgN at a depth."""
        cache = self.empty_cache(len(context_ids) + len(ids))
        self.model.prefill(context_ids, cache)
        start = time.perf_counter()
        for token in ids:
            self.model.decode(int(token), cache)
        return time.perf_counter() - start


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
                Step().eval(),
                (torch.zeros(1, 1, dtype=torch.long), past, past),
                path,
                dynamo=True,
                dynamic_shapes=(None, {3: positions}, {3: positions}),
                verbose=False,
            )
        else:
            torch.onnx.export(
                Forward().eval(),
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


class LlamaCppRunner:
    """llama.cpp on a GGUF file through llama-cpp-python's low-level API, as llama-bench runs its
    tests (tools/llama-bench/llama-bench.cpp: test_prompt, test_gen). One context per test length,
    made in the warm-up run."""

    backend = "llama.cpp"
    N_BATCH = 512  # llama-bench's n_ubatch (its n_batch, 2048, only matters beyond pp512)

    def __init__(self, path, threads):
        import llama_cpp

        self.llama_cpp, self.path, self.threads = llama_cpp, path, threads
        self.llm, self.n_ctx = None, None
        self._load(8)
        self.size = llama_cpp.llama_model_size(self.llm.model)
        self.params = llama_cpp.llama_model_n_params(self.llm.model)

    def _load(self, n_ctx, logits_all=False):
        if self.llm is not None and self.n_ctx == n_ctx and not logits_all:
            return self.llm
        if self.llm is not None:
            self.llm.close()
            self.llm = None
        self.n_ctx = n_ctx
        self.llm = self.llama_cpp.Llama(
            model_path=self.path,
            n_ctx=n_ctx,
            n_batch=self.N_BATCH,
            n_ubatch=self.N_BATCH,
            n_threads=self.threads,
            n_threads_batch=self.threads,
            flash_attn=True,
            logits_all=logits_all,
            verbose=False,
        )
        return self.llm

    def _decode(self, ctx, tokens):
        array = (self.llama_cpp.llama_token * len(tokens))(*tokens)  # alive until the decode returns
        status = self.llama_cpp.llama_decode(ctx, self.llama_cpp.llama_batch_get_one(array, len(tokens)))
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")

    def _clear(self, n_ctx):
        ctx = self._load(n_ctx).ctx
        self.llama_cpp.llama_memory_clear(self.llama_cpp.llama_get_memory(ctx), False)
        return ctx

    def forward(self, ids):
        raise NotImplementedError("llama.cpp rows have no fwdN test (llama-bench has none)")

    def prompt(self, ids):
        ctx = self._clear(len(ids))
        for start in range(0, len(ids), self.N_BATCH):  # one batch up to pp512
            self._decode(ctx, ids[start : start + self.N_BATCH])
        self.llama_cpp.llama_synchronize(ctx)

    def generate(self, ids):
        ctx = self._clear(len(ids))
        for token in ids:
            self._decode(ctx, [int(token)])
            self.llama_cpp.llama_synchronize(ctx)

    def generate_after(self, context_ids, ids):
        """OursRunner.generate_after: llama-bench's tgN at depth -d len(context_ids)."""
        ctx = self._clear(len(context_ids) + len(ids))
        for start in range(0, len(context_ids), self.N_BATCH):
            self._decode(ctx, context_ids[start : start + self.N_BATCH])
        self.llama_cpp.llama_synchronize(ctx)
        start = time.perf_counter()
        for token in ids:
            self._decode(ctx, [int(token)])
            self.llama_cpp.llama_synchronize(ctx)
        return time.perf_counter() - start

    def logits(self, ids):
        """The logits of every position of `ids` from an empty context, [len(ids), vocab]."""
        llm = self._load(len(ids), logits_all=True)
        llm.reset()
        llm.eval(ids)
        logits = np.array(llm.scores[: len(ids)], np.float32)
        llm.close()
        self.llm, self.n_ctx = None, None
        return logits


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


PEERS = ("pytorch-eager", "torch.compile", "onnxruntime", "llama.cpp")


def missing(modules):
    """The modules of `modules` that cannot be imported."""
    absent = []
    for module in modules:
        try:
            __import__(module)
        except ImportError:
            absent.append(module)
    return absent


def peer_runners(peers, notes):
    """The peer runner classes named in `peers` whose packages are installed; a note for each
    named one that is not."""
    requirements = {
        TorchRunner: ("torch", "transformers"),
        TorchCompileRunner: ("torch", "transformers"),
        OnnxRuntimeRunner: ("torch", "transformers", "onnxruntime", "onnxscript"),
        LlamaCppRunner: ("llama_cpp",),
    }
    chosen = []
    for runner_class, modules in requirements.items():
        if runner_class.backend not in peers:
            continue
        absent = missing(modules)
        if not absent:
            chosen.append(runner_class)
        else:
            notes.append(
                f"{runner_class.backend} rows skipped: {', '.join(absent)} not importable "
                "(pip install -r requirements-peers.txt, as its header says)"
            )
    return chosen


def read_bandwidth(threads, gib=1.0, repetitions=5):
    """Bytes per second that `threads` threads reading a large array reach (best of a few).

    Each thread takes the max of its part: a pure read at the width of the CPU's vectors. numpy's
    sum, the reader before, is pairwise float addition and can be slower than memory: on the Xeon of
    2026-11-29 (AVX-512) it read 14.5 GB/s on 2 threads where max read 28.6 and gpt's own q8_0
    decode streamed 21 GB/s of weights, which made the floor look beaten."""
    data = np.ones(int(gib * 2**30) // 4, np.float32)
    chunks = np.array_split(data, threads)
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(np.max, chunks))  # touch every page first
        best = float("inf")
        for _ in range(repetitions):
            start = time.perf_counter()
            list(pool.map(np.max, chunks))  # numpy releases the GIL while reducing
            best = min(best, time.perf_counter() - start)
    return data.nbytes / best
