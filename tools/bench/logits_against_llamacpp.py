"""Logits of a GGUF file in gpt and in llama.cpp, teacher-forced on fixed token ids: for files
without a tokenizer (tools/dev/make_gguf.py's random-weight shapes), which compare_llamacpp.py's
correctness tables need.

    PYTHONPATH=bazel-bin/python:tools/bench python3 tools/bench/logits_against_llamacpp.py \\
        /tmp/smollm2-1.7b.q4_k_m.gguf --formats auto,q8_0

Each row: gpt in one weight format, and llama.cpp (the file as shipped, flash attention on), against
llama.cpp and against a third opinion, gpt's float32 model of the file's dequantized weights (no
activation quantization): top-1 agreement and mean KL over every position of --tokens random ids.
"""

import argparse
import sys

import numpy as np
from compare_llamacpp_correctness import LlamaCpp, compare_logits
from machine import describe_cpu

import gpt


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a GGUF file")
    parser.add_argument("--formats", default="auto", help="gpt's weight formats, comma-separated")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print("command: PYTHONPATH=bazel-bin/python:tools/bench python3 " + " ".join(sys.argv))
    print("cpu:", describe_cpu())

    def load(weights):
        options = gpt.CompileOptions(weights=weights, threads=args.threads, disk_cache=False)
        return gpt.GPT.from_gguf(args.model, options)

    reference = load("f32")
    ids = np.random.default_rng(args.seed).integers(0, reference.config.vocab_size, size=args.tokens).tolist()
    f32 = reference.forward(ids)
    del reference
    theirs = LlamaCpp(args.model, args.threads, n_ctx=max(64, args.tokens)).logits(ids)
    rows = [(f"gpt {weights}", load(weights).forward(ids)) for weights in args.formats.split(",")]
    rows.append(("llama.cpp", theirs))
    print()
    print("| engine | top-1 = llama.cpp's | mean KL(llama.cpp ‖ engine) | top-1 = f32's | mean KL(f32 ‖ engine) |")
    print("|---|---|---|---|---|")
    for name, logits in rows:
        agree, kl, _ = compare_logits(theirs, logits)
        agree_f32, kl_f32, _ = compare_logits(f32, logits)
        print(f"| {name} | {agree:.3f} | {kl:.2e} | {agree_f32:.3f} | {kl_f32:.2e} |")


if __name__ == "__main__":
    main()
