"""llama-bench-style throughput table: prompt processing (pp) and token generation (tg).

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/gpt_bench.py
    bazel run //tools:gpt_bench -- --models nano

Columns as llama.cpp's llama-bench: model | size | params | backend | threads | test | t/s, with
t/s the mean ± std over --repetitions runs. ppN: N prompt tokens through prefill into an empty KV
cache; tgN: N tokens decoded one at a time against the cache, from an empty context; the cache
holds exactly N positions (llama-bench's context is n_prompt + n_gen). Tokens are
fixed (no tokenization, no sampling); compilation happens in a warm-up run before timing. When
PyTorch and transformers are installed, HF's GPT2LMHeadModel with the same weights is measured in
the same run ("pytorch-eager" rows).
"""

import argparse
import statistics
import sys
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

    def __init__(self, cfg, weights, threads):
        self.model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(threads=threads))

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
        hf = GPT2Config(n_layer=cfg.n_layer, n_head=cfg.n_head, n_embd=cfg.n_embd, vocab_size=cfg.vocab_size,
                        n_positions=cfg.block_size, bos_token_id=0, eos_token_id=0)
        self.model = GPT2LMHeadModel(hf).eval()
        self.model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=False)

    def prompt(self, ids):
        with self.torch.no_grad():
            self.model(self.torch.tensor([ids]), use_cache=True)

    def generate(self, ids):
        with self.torch.no_grad():
            past = None
            for token in ids:
                out = self.model(self.torch.tensor([[int(token)]]), past_key_values=past, use_cache=True)
                past = out.past_key_values


def runners():
    yield OursRunner
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return
    yield TorchRunner


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="nano,gpt2-small")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--tests", default="pp128,pp512,tg128")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--no-peers", action="store_true", help="only this project's rows")
    args = parser.parse_args(argv)
    print("command: PYTHONPATH=bazel-bin/python python3 tools/gpt_bench.py " + " ".join(argv))
    print()
    print("| model | size | params | backend | threads | test | t/s |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        cfg = gpt.GPTConfig(**MODELS[name])
        weights = gpt.weights.random_weights(cfg, seed=0)
        params = sum(v.size for v in weights.values())
        size = f"{params * 4 / 2**20:.2f} MiB"
        for runner_class in runners():
            if args.no_peers and runner_class is not OursRunner:
                continue
            for threads in (int(t) for t in args.threads.split(",")):
                runner = runner_class(cfg, weights, threads)
                for test in args.tests.split(","):
                    count = int(test[2:])
                    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, size=count).tolist()
                    run = runner.prompt if test.startswith("pp") else runner.generate
                    run(ids)  # warm-up: compiles
                    rates = []
                    for _ in range(args.repetitions):
                        start = time.perf_counter()
                        run(ids)
                        rates.append(count / (time.perf_counter() - start))
                    print(f"| {name} | {size} | {params / 1e6:.2f} M | {runner.backend} | {threads} | {test} "
                          f"| {stats(rates)} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
