"""Prepares the device check's input (tools/gpu/gpu_check.py, tools/device_check.sh): GPU artifacts
exported here, where the compiler runs, with the CPU model's reference outputs beside them.

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/gpu/gpu_prepare.py --out build/gpu_check

Writes, under --out (wiped first):
- small-a, small-b, small-llama (each .f32 and .bf16): two small GPT-2-shaped models and a small
  llama (GQA, SwiGLU, rope, untied head) with random weights (random biases and norm scales too, so
  that a dropped bias shows), vocabularies not a multiple of 64, on purpose, each exported with its
  weights, and reference.npz: the CPU gpt.GPT's logits for fixed ids (forward at two lengths;
  prefill, then decode of given tokens) and its greedy tokens with the logits that chose them. A
  bf16 artifact's reference is the f32 model (the check allows 1e-2 there).
- gpt2-small.f32/.bf16 and smollm2-shape.f32/.bf16: GPT-2 small's and SmolLM2-135M's shapes without
  weights (hundreds of MB would not fit the 64 MiB a device call carries): the device check fills
  them with HF's GPT2LMHeadModel's / LlamaForCausalLM's, through each buffer's `hf` recipe.
The whole folder must stay well under 64 MiB; the script says its size and fails above --max-mib.
"""

import argparse
import os
import shutil
import sys
import time

import numpy as np

import gpt
from gpt import architecture_weights
from gpt.weights import random_weights

SMALL = {
    "small-a": dict(n_layer=2, n_head=4, n_embd=128, vocab_size=512, block_size=256),
    "small-b": dict(n_layer=3, n_head=6, n_embd=192, vocab_size=1000, block_size=512),
    # The Llama family: RMSNorm, rotary positions, SwiGLU, grouped-query attention, untied head.
    "small-llama": dict(
        architecture="llama",
        n_layer=2,
        n_head=4,
        n_kv_head=2,
        n_embd=128,
        n_ff=352,
        vocab_size=700,
        block_size=256,
        tied_head=False,
    ),
}
# Buckets: small-a the one-bucket case, small-b three (a 37-token forward pads to 128 in both).
SMALL_TOKENS = {"small-a": (1, 128), "small-b": (1, 32, 128), "small-llama": (1, 128)}
# SmolLM2-135M's shape (llama, 30 layers, GQA 9/3, SwiGLU 1536, rope base 1e5, tied head), filled
# on the device from HF's LlamaForCausalLM of the same config; a 2048-position cache.
SMOLLM2_SHAPE = dict(
    architecture="llama",
    n_layer=30,
    n_head=9,
    n_kv_head=3,
    n_embd=576,
    n_ff=1536,
    vocab_size=49152,
    block_size=2048,
    rope_base=100000.0,
)
GPT2_SMALL = dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024)
GREEDY_STEPS = 16


def small_weights(config: gpt.GPTConfig, seed: int) -> dict[str, np.ndarray]:
    """GPT-2 initialisation, then nonzero biases and norm scales away from 1."""
    rng = np.random.default_rng(seed + 1000)
    weights = random_weights(config, seed)
    for name, value in weights.items():
        if name.endswith(".bias"):
            weights[name] = rng.normal(0.0, 0.05, value.shape).astype(np.float32)
        elif value.ndim == 1:  # norm scales
            weights[name] = (1.0 + rng.normal(0.0, 0.2, value.shape)).astype(np.float32)
    return weights


def reference(model: gpt.GPT, seed: int) -> dict[str, np.ndarray]:
    """The CPU model's outputs that tools/gpu/gpu_check.py compares the GPU's with."""
    vocab = model.config.vocab_size
    rng = np.random.default_rng(seed)
    out = {}
    for suffix, length in (("_full", 128), ("_short", 37)):
        ids = rng.integers(0, vocab, size=length)
        out["forward_ids" + suffix] = ids
        out["forward_logits" + suffix] = model.forward(ids)
    prompt = rng.integers(0, vocab, size=20)
    out["prompt"] = prompt
    cache = model.new_cache()
    out["prefill_logits"] = model.prefill(prompt, cache)
    out["decode_tokens"] = rng.integers(0, vocab, size=8)
    out["decode_logits"] = np.stack([model.decode(int(t), cache) for t in out["decode_tokens"]])
    # Greedy from the same prompt; row k of greedy_logits chose token k.
    cache = model.new_cache()
    rows, tokens = [model.prefill(prompt, cache)], []
    for _ in range(GREEDY_STEPS):
        tokens.append(int(np.argmax(rows[-1])))
        rows.append(model.decode(tokens[-1], cache))
    generated = model.generate(prompt, GREEDY_STEPS)
    if generated != tokens:
        raise AssertionError(f"generate() {generated} differs from the prefill/decode greedy loop {tokens}")
    out["greedy_tokens"] = np.array(tokens, np.int64)
    out["greedy_logits"] = np.stack(rows[:GREEDY_STEPS])
    return {
        key: (value.astype(np.int64) if value.dtype.kind in "iu" else value.astype(np.float32))
        for key, value in out.items()
    }


def directory_mib(path: str) -> float:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files) / 2**20


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/gpu_check")
    parser.add_argument("--target", default="cuda:sm_90")
    parser.add_argument("--max-mib", type=float, default=48.0, help="fail when the folder is larger")
    parser.add_argument("--skip-gpt2", action="store_true", help="only the small models")
    args = parser.parse_args(argv)

    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    for index, (name, shape) in enumerate(SMALL.items()):
        config = gpt.GPTConfig(**shape)
        weights = small_weights(config, seed=index)
        model = gpt.GPT.from_weights(
            config, architecture_weights.from_compiler(config, weights) if config.architecture != "gpt2" else weights
        )
        values = reference(model, seed=100 + index)
        for weights in ("f32", "bf16"):
            directory = os.path.join(args.out, f"{name}.{weights}")
            start = time.monotonic()
            model.export(directory, target=args.target, tokens=SMALL_TOKENS[name], weights=weights)
            np.savez(os.path.join(directory, "reference.npz"), **values)
            print(f"{directory}: {directory_mib(directory):.2f} MiB, {time.monotonic() - start:.1f} s", flush=True)
    if not args.skip_gpt2:
        # The weights are never written: random ones only give the export a model.
        model = gpt.GPT.random(gpt.GPTConfig(**GPT2_SMALL))
        for weights in ("f32", "bf16"):
            directory = os.path.join(args.out, f"gpt2-small.{weights}")
            start = time.monotonic()
            model.export(directory, target=args.target, tokens=(1, 128), weights=weights, write_weights=False)
            print(f"{directory}: {directory_mib(directory):.2f} MiB, {time.monotonic() - start:.1f} s", flush=True)
        model = gpt.GPT.random(gpt.GPTConfig(**SMOLLM2_SHAPE))
        for weights in ("f32", "bf16"):
            directory = os.path.join(args.out, f"smollm2-shape.{weights}")
            start = time.monotonic()
            model.export(directory, target=args.target, tokens=(1, 128), weights=weights, write_weights=False)
            print(f"{directory}: {directory_mib(directory):.2f} MiB, {time.monotonic() - start:.1f} s", flush=True)
    total = directory_mib(args.out)
    print(f"{args.out}: {total:.2f} MiB in all (a device call carries at most 64 MiB)")
    if total > args.max_mib:
        print(f"gpu_prepare: ERROR: {total:.2f} MiB is more than --max-mib {args.max_mib}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
