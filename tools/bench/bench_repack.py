"""The repacking of llama.cpp blocks into the compiler's lane layout (what a first load of a GGUF file
spends its CPU on): milliseconds to repack random blocks of a format, on 1 and 2 threads.

    bazel build //tests/python:gpt_kernels_testing.so
    PYTHONPATH=bazel-bin/tests/python:tools/bench python3 tools/bench/bench_repack.py --formats q8_0,q4_0

Rows of K = 2048 weights (SmolLM2-1.7B's width), 65536 of them (143 MB of q8_0, 75 MB of q4_0, 75 of q4_k), into
panels of 32 columns, through gpt_kernels_testing.repack_rows: the load's own kernels. Each figure is
the best of 5 repacks after one that is not counted (its output pages are fresh; the later ones reuse
the memory the previous one freed, so the page faults a real load also pays are left out).
"""

import argparse
import time

import gguf
import gpt_kernels_testing
import numpy as np
from machine import describe_cpu

# The formats measured, and where each block's fp16 fields lie (scale, min; q4_K's d and dmin; q6_K's
# d, last); each block's weights and bytes are gguf's (GGML_QUANT_SIZES).
HALF_OFFSETS = {"q8_0": (0,), "q4_0": (0,), "q4_1": (0, 2), "q4_k": (0, 2), "q6_k": (208,)}


def random_blocks(fmt: str, k: int, n: int) -> np.ndarray:
    """Rows of random blocks whose fp16 fields are 1.0 (finite, as the repack checks)."""
    values, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[fmt.upper()]]
    blocks = np.random.default_rng(0).integers(0, 256, size=(n, k // values, block_bytes), dtype=np.uint8)
    for offset in HALF_OFFSETS[fmt]:
        blocks[:, :, offset], blocks[:, :, offset + 1] = 0x00, 0x3C
    return blocks.reshape(n, -1)


def best_ms(fmt: str, blocks: np.ndarray, k: int, n: int, threads: int) -> float:
    gpt_kernels_testing.repack_rows(fmt, blocks, k, n, 32, threads)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        gpt_kernels_testing.repack_rows(fmt, blocks, k, n, 32, threads)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", default="q8_0,q4_0", help=f"of {', '.join(HALF_OFFSETS)}, comma-separated")
    args = parser.parse_args()
    k, n = 2048, 65536
    command = "PYTHONPATH=bazel-bin/tests/python:tools/bench python3 tools/bench/bench_repack.py"
    print(f"command: {command} --formats {args.formats}")
    print(f"cpu: {describe_cpu()}\n")
    print("| format | MB of blocks | 1 thread ms | 2 threads ms |")
    print("|---|---|---|---|")
    for fmt in args.formats.split(","):
        blocks = random_blocks(fmt, k, n)
        one, two = (best_ms(fmt, blocks, k, n, threads) for threads in (1, 2))
        print(f"| {fmt} | {blocks.nbytes / 1e6:.0f} | {one:.0f} | {two:.0f} |")


if __name__ == "__main__":
    main()
