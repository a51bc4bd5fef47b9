"""Resident memory of a model's weights in each weight format: a table of the RSS a process gains
when it builds the model, against f32.

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/bench/weight_memory.py

Each format is measured in a fresh process: its RSS after `import gpt`, then after
`gpt.GPT.random(...)` of the model (random GPT-2 weights, generated in float32 and dropped by the
model where it stores them in its own layout or format) and a garbage collection. Nothing is
compiled: the difference is the weights as the model holds them, plus allocator overhead.
"""

import argparse
import subprocess
import sys

from machine import describe_cpu

MODELS = {
    "nano": dict(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=1024),
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024),
}

_MEASURE = r"""
import gc, sys
def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))
import gpt
before = rss()
options = gpt.CompileOptions(weights=sys.argv[2], disk_cache=False)
model = gpt.GPT.random(gpt.GPTConfig(**eval(sys.argv[1])), options=options)
gc.collect()
print(rss() - before)
"""


def weight_rss(model: str, weight_format: str) -> int:
    """Bytes of RSS that building `model` in `weight_format` adds to a fresh process."""
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, repr(MODELS[model]), weight_format], capture_output=True, text=True, check=True
    )
    return int(result.stdout.split()[-1])


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2-small")
    parser.add_argument("--weights", default="f32,bf16,q8_0,q4_0", help="weight formats, comma-separated; f32 first")
    args = parser.parse_args(argv)
    print("command: PYTHONPATH=bazel-bin/python python3 tools/bench/weight_memory.py " + " ".join(argv))
    print("cpu: " + describe_cpu())
    print()
    print("| model | weights | RSS of the weights | vs f32 |")
    print("|---|---|---|---|")
    for model in args.models.split(","):
        f32 = None
        for weight_format in args.weights.split(","):
            rss = weight_rss(model, weight_format)
            f32 = f32 or (rss if weight_format == "f32" else None)
            ratio = f"{rss / f32:.3f}x" if f32 else "-"
            print(f"| {model} | {weight_format} | {rss / 2**20:.1f} MiB | {ratio} |")


if __name__ == "__main__":
    main(sys.argv[1:])
