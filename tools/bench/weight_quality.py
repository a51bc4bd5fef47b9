"""Quality loss of low-precision weight formats on the embedded byte-level GPT, as llama.cpp's
perplexity tool reports it with --kl-divergence.

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/bench/weight_quality.py
    bazel run //tools/bench:weight_quality -- --formats f32,bf16 --bytes 40960

Model: python/gpt/data/byte-gpt (4 layers, 4 heads, 128 wide, 256-byte context), loaded with
gpt.GPT.from_pretrained and compiled once per format with gpt.CompileOptions(weights=fmt).

Data: its validation bytes, the last 5% of the training corpus exactly as
tools/dev/train_byte_model.py builds it (every top-level .py file of the running Python's standard
library, sorted, each followed by two newlines; split at int(0.95 * len)). The corpus depends on
the Python installation: the script warns when the Python version, the file count or the byte
count differ from the model's TRAINING.json.

Windows: non-overlapping, full-context chunks of 257 bytes taken from the start of the
validation split, chunk i = valid[256 i : 256 i + 257]. The model sees the first 256 bytes (one
forward pass of block_size tokens) and the logits at every one of the 256 positions are scored
against the next byte, so every position 0..255 is scored and each validation byte after the
first is predicted exactly once (--bytes is rounded up to a whole number of 256-byte windows).

Metrics, in float64 over every scored position, each format against the f32 model on the same
positions: NLL, the mean negative log-likelihood of the true next byte (nats/byte); Δ loss, the
format's NLL minus f32's (signed: a format that happens to lower the loss is not penalized); mean
KL, the mean over positions of KL(p_f32 || p_fmt); 99% KL, the 99th percentile of that per-position
KL; top-1 agreement, the percentage of positions whose argmax equals f32's. The last column holds
the project's bars (Δ loss / mean KL / top-1 agreement) and whether the row passes all three.
A format the installed gpt does not compile (CompileOptions or the model raises ValueError or
NotImplementedError) is listed as "not available".
"""

import argparse
import glob
import json
import math
import os
import platform
import shlex
import sys
import sysconfig

import numpy as np
from machine import describe_cpu

import gpt

MODEL_DIR = os.path.join(os.path.dirname(os.path.abspath(gpt.__file__)), "data", "byte-gpt")
WINDOW = 256  # the model's block_size: one forward pass per window
SPLIT = 0.95  # tools/dev/train_byte_model.py's train/validation split
DEFAULT_FORMATS = "f32,bf16,q8_0,q4_0"
DEFAULT_BYTES = 20480
# The bars each format must meet: (max Δ loss in nats/byte, max mean KL, min top-1 agreement in %).
BARS = {
    "bf16": (0.001, 3e-4, 99.0),
    "q8_0": (0.003, 3e-3, 97.5),
    "q4_0": (0.05, 0.05, 88.0),
}


def corpus() -> tuple:
    """The training bytes and the files they came from: tools/dev/train_byte_model.py's corpus(),
    repeated here so that this script needs neither torch nor transformers (keep them identical)."""
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))
    data = b"".join(open(path, "rb").read() + b"\n\n" for path in files)
    return np.frombuffer(data, dtype=np.uint8), [os.path.basename(f) for f in files]


def validation_bytes() -> tuple:
    """The model's validation split and warnings about anything that differs from its training run."""
    data, files = corpus()
    valid = data[int(len(data) * SPLIT) :]
    warnings = []
    with open(os.path.join(MODEL_DIR, "TRAINING.json")) as f:
        training = json.load(f)
    python = sys.version.split()[0]
    if python != training.get("python"):
        warnings.append(
            f"Python {python} is not the Python {training.get('python')} the model was trained on: "
            "its standard library, hence the validation bytes, may differ"
        )
    if len(files) != training.get("files") or len(data) != training.get("bytes"):
        warnings.append(
            f"the corpus has {len(files)} files, {len(data)} bytes; training had {training.get('files')} files, "
            f"{training.get('bytes')} bytes: these are not the model's validation bytes"
        )
    return valid, warnings


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64."""
    x = logits.astype(np.float64)
    x -= x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _build(fmt: str, threads: int | None):
    """The model compiled for weight format `fmt`, or the reason it cannot be."""
    try:
        options = gpt.CompileOptions(weights=fmt, threads=threads)
        return gpt.GPT.from_pretrained(MODEL_DIR, options=options), None
    except (ValueError, NotImplementedError) as e:
        if fmt == "f32":
            raise
        return None, f"{type(e).__name__}: {e}"


def _passes(fmt: str, row: dict) -> bool | None:
    if fmt not in BARS or not row["available"]:
        return None
    max_delta, max_kl, min_top1 = BARS[fmt]
    return row["delta_loss"] <= max_delta and row["mean_kl"] <= max_kl and row["top1_agreement"] >= min_top1


def measure(formats, n_bytes: int = DEFAULT_BYTES, threads: int | None = None) -> dict:
    """Scores the embedded byte model in each weight format of `formats` (a list or a
    comma-separated string; f32, the reference, is always measured and listed first) on
    ceil(n_bytes / 256) validation windows with `threads` threads (None: all cores).

    Returns {"bytes", "windows", "threads", "warnings", "results"}, where results maps each format
    to {"available": False, "reason": str} or {"available": True, "nll", "delta_loss", "mean_kl",
    "kl_p99", "top1_agreement" (percent), "bars" ((Δ loss, KL, top-1) or None), "passes" (bool, or
    None without bars)}."""
    if isinstance(formats, str):
        formats = formats.split(",")
    formats = ["f32"] + [f for f in dict.fromkeys(formats) if f != "f32"]
    if isinstance(n_bytes, bool) or not isinstance(n_bytes, int) or n_bytes < 1:
        raise ValueError(f"n_bytes must be a positive int, got {n_bytes!r}")
    valid, warnings = validation_bytes()
    windows = math.ceil(n_bytes / WINDOW)
    available_windows = (len(valid) - 1) // WINDOW
    if windows > available_windows:
        raise ValueError(
            f"{windows} windows of {WINDOW} bytes requested; the validation split ({len(valid)} bytes) "
            f"holds {available_windows} ({available_windows * WINDOW} bytes)"
        )

    models, reasons = {}, {}
    for fmt in formats:
        models[fmt], reasons[fmt] = _build(fmt, threads)
    live = [fmt for fmt in formats if models[fmt] is not None]
    nll = {fmt: [] for fmt in live}
    kl = {fmt: [] for fmt in live}
    agree = {fmt: [] for fmt in live}
    for w in range(windows):
        chunk = valid[w * WINDOW : w * WINDOW + WINDOW + 1].astype(np.int64)
        ids, targets = chunk[:-1], chunk[1:]
        ref = None
        for fmt in live:  # f32 first
            logp = log_softmax(models[fmt].forward(ids))  # [256, vocab]
            if ref is None:
                ref = logp
            nll[fmt].append(-logp[np.arange(WINDOW), targets])
            kl[fmt].append((np.exp(ref) * (ref - logp)).sum(axis=-1))
            agree[fmt].append(logp.argmax(axis=-1) == ref.argmax(axis=-1))

    results = {}
    f32_nll = float(np.concatenate(nll["f32"]).mean())
    for fmt in formats:
        if models[fmt] is None:
            results[fmt] = {"available": False, "reason": reasons[fmt]}
            continue
        per_position_kl = np.concatenate(kl[fmt])
        row = {
            "available": True,
            "nll": float(np.concatenate(nll[fmt]).mean()),
            "mean_kl": float(per_position_kl.mean()),
            "kl_p99": float(np.percentile(per_position_kl, 99)),
            "top1_agreement": 100.0 * float(np.concatenate(agree[fmt]).mean()),
            "bars": BARS.get(fmt),
        }
        row["delta_loss"] = row["nll"] - f32_nll
        row["passes"] = _passes(fmt, row)
        results[fmt] = row
    return {
        "bytes": windows * WINDOW,
        "windows": windows,
        "threads": threads or gpt.CompileOptions().resolved_threads(),
        "warnings": warnings,
        "results": results,
    }


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _bars_cell(fmt: str, row: dict) -> str:
    if fmt == "f32":
        return "reference"
    if fmt not in BARS:
        return "no bars"
    max_delta, max_kl, min_top1 = BARS[fmt]
    bars = f"≤ {max_delta:g} / ≤ {max_kl:g} / ≥ {min_top1:.1f}%"
    if not row["available"]:
        return bars
    return f"{bars}: {'pass' if row['passes'] else 'FAIL'}"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--formats",
        default=DEFAULT_FORMATS,
        help="weight formats, comma-separated (f32, the reference, is always measured)",
    )
    parser.add_argument(
        "--bytes",
        type=int,
        default=DEFAULT_BYTES,
        help=f"validation bytes to score, rounded up to whole {WINDOW}-byte windows",
    )
    parser.add_argument("--threads", type=int, default=None, help="compiled-code threads (default: all cores)")
    args = parser.parse_args(argv)
    try:
        result = measure(args.formats, args.bytes, args.threads)
    except ValueError as e:
        parser.error(str(e))
    print("command: PYTHONPATH=bazel-bin/python " + shlex.join(["python3", "tools/bench/weight_quality.py", *argv]))
    print("cpu: " + describe_cpu())
    print(
        f"data: {result['bytes']} validation bytes of byte-gpt ({result['windows']} windows of {WINDOW}, "
        f"every position scored) | threads: {result['threads']} | CPU: {cpu_model()}"
    )
    for warning in result["warnings"]:
        print(f"warning: {warning}")
    print()
    print("| format | NLL (nats/byte) | Δ loss | mean KL | 99% KL | top-1 agreement | bars (Δloss/KL/top-1) |")
    print("|---|---|---|---|---|---|---|")
    for fmt, row in result["results"].items():
        if not row["available"]:
            print(f"| {fmt} | not available | | | | | {_bars_cell(fmt, row)} |")
            continue
        print(
            f"| {fmt} | {row['nll']:.5f} | {row['delta_loss']:+.6f} | {row['mean_kl']:.3e} | {row['kl_p99']:.3e} "
            f"| {row['top1_agreement']:.2f}% | {_bars_cell(fmt, row)} |"
        )
    unavailable = {fmt: row["reason"] for fmt, row in result["results"].items() if not row["available"]}
    if unavailable:
        print()
        for fmt, reason in unavailable.items():
            print(f"{fmt} not available: {reason}")


if __name__ == "__main__":
    main(sys.argv[1:])
