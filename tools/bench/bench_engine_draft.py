"""The serving engine's draft-model speculation: batched drafting (engine/draft_batch.py, one batched
draft step per drafted position for every sequence) against a draft cache per sequence
(speculative.DraftModelDrafter, the engine's drafter before it) and against no speculation, in one
run, the three taking turns round by round.

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/bench/bench_engine_draft.py --sequences 1,4,8

The target is a 12-layer GPT-2-small-width model whose last ten layers have zero output projections
(each adds nothing to the residual), and the draft its first two layers: the draft predicts the
target, so every draft is accepted (speculation's best case) and the draft costs a sixth of the
target. Weights q8_0, random; each sequence a 64-token prompt and --new-tokens greedy tokens, all
submitted at once; the tokens of the modes are checked equal. With --max-batch N a fourth mode
drafts in batches, with Engine(speculative_max_batch=N). Prints a markdown table of medians over
--rounds rounds, after two rounds that compile.
"""

import argparse
import statistics
import sys
import time

import numpy as np
from machine import describe_cpu

import gpt
from gpt.engine import Engine
from gpt.speculative import DraftModelDrafter
from gpt.weights import random_weights

MODES = ("batched drafting", "a draft cache per sequence", "no speculation")


def models(threads: int):
    """(target, draft): the draft's two layers, then ten identity layers in the target."""
    config = gpt.GPTConfig(n_layer=12, n_head=12, n_embd=768, vocab_size=8192, block_size=512)
    draft_config = gpt.GPTConfig(**{**config.__dict__, "n_layer": 2})
    options = gpt.CompileOptions(weights="q8_0", threads=threads)
    weights = {**random_weights(config, 1), **random_weights(draft_config, 2)}
    for layer in range(2, config.n_layer):
        for name in ("attn.c_proj.weight", "attn.c_proj.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"):
            weights[f"transformer.h.{layer}.{name}"] = np.zeros_like(weights[f"transformer.h.{layer}.{name}"])
    return gpt.GPT(config, weights, options), gpt.GPT(draft_config, random_weights(draft_config, 2), options)


def run(target, draft, mode: str, prompts, new_tokens: int, max_batch: int | None) -> tuple[float, list]:
    speculation = {} if mode == "no speculation" else dict(speculative=draft, draft_tokens=4)
    if mode.startswith("speculative_max_batch"):
        speculation["speculative_max_batch"] = max_batch
    engine = Engine(target, num_blocks=256, block_size=16, start=False, **speculation)
    if mode == "a draft cache per sequence":
        engine._speculation.new_drafter = lambda max_len: DraftModelDrafter(draft, target, max_len=max_len)
    start = time.perf_counter()
    handles = [engine.submit(prompt, new_tokens) for prompt in prompts]
    while engine.step():
        pass
    return time.perf_counter() - start, [h.tokens for h in handles]


def main(argv) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequences", default="1,4,8", help="concurrent requests, comma-separated")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-batch", type=int, help="also batched drafting with speculative_max_batch=N")
    args = parser.parse_args(argv)
    modes = MODES + ((f"speculative_max_batch={args.max_batch}",) if args.max_batch else ())
    print(f"$ PYTHONPATH=bazel-bin/python python3 tools/bench/bench_engine_draft.py {' '.join(argv)}".rstrip())
    print(f"cpu: {describe_cpu()}")
    target, draft = models(args.threads)
    rng = np.random.default_rng(0)
    print(f"| sequences | {' | '.join(f'{mode} tok/s' for mode in modes)} | batched / per sequence |")
    print("|---" * (len(modes) + 2) + "|")
    for count in (int(n) for n in args.sequences.split(",")):
        prompts = [[int(t) for t in np.tile(rng.integers(0, 8192, 16), 4)] for _ in range(count)]
        for _ in range(2):  # compiles every program the modes reach (some only in a second run)
            for mode in modes:
                run(target, draft, mode, prompts, args.new_tokens, args.max_batch)
        seconds = {mode: [] for mode in modes}
        for _ in range(args.rounds):
            tokens = {}
            for mode in modes:
                elapsed, tokens[mode] = run(target, draft, mode, prompts, args.new_tokens, args.max_batch)
                seconds[mode].append(elapsed)
            if len({str(t) for t in tokens.values()}) != 1:
                sys.exit("the modes generated different tokens")
        rates = {mode: count * args.new_tokens / statistics.median(seconds[mode]) for mode in modes}
        cells = " | ".join(f"{rates[mode]:.1f}" for mode in modes)
        print(f"| {count} | {cells} | {rates[MODES[0]] / rates[MODES[1]]:.2f}x |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
