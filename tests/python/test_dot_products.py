"""The dot-product instructions of low-precision matmuls, chosen from the CPU's features:
vdpbf16ps (bf16) with avx512_bf16, vpdpbusd (q8_0, q4_0) with avx512_vnni, and for a CPU without
them a fallback in plain integer and float arithmetic that computes the same. A test compiles
for such a CPU with CompileOptions(target_cpu=...) and runs that code here."""

import re

import numpy as np
import pytest

import gpt
from machine_code import disassemble
from shapes import MID, NANO, config, exercising_weights, relative_error, token_ids

INSTRUCTIONS = {
    "bf16": ("vdpbf16ps", "avx512_bf16"),
    "q8_0": ("vpdpbusd", "avx512_vnni"),
    "q4_0": ("vpdpbusd", "avx512_vnni"),
}
INTRINSICS = {"vdpbf16ps": "llvm.x86.avx512bf16.dpbf16ps.512", "vpdpbusd": "llvm.x86.avx512.vpdpbusd.512"}

# AVX-512 (F, BW, VL, DQ) without avx512_bf16 or avx512_vnni: the CPUs the fallback is for.
WITHOUT_DOT_PRODUCTS = "skylake-avx512"


def host_flags():
    with open("/proc/cpuinfo") as f:
        line = next(line for line in f if line.startswith("flags"))
    return set(line.split(":", 1)[1].split())


@pytest.mark.parametrize("fmt", ["bf16", "q8_0", "q4_0"])
def test_host_code_uses_the_instruction_where_the_cpu_has_it(fmt, tmp_path):
    instruction, flag = INSTRUCTIONS[fmt]
    model = gpt.GPT.random(config(NANO), options=gpt.CompileOptions(weights=fmt, threads=1, disk_cache=False))
    llvm = model.ir("llvm", seq_len=8)
    asm = disassemble(model, tmp_path)
    if flag in host_flags():
        assert INTRINSICS[instruction] in llvm
        assert re.search(instruction + r"\s+.*%zmm", asm), f"no zmm {instruction} although the host has {flag}"
    else:
        assert INTRINSICS[instruction] not in llvm and instruction not in asm


@pytest.mark.parametrize("fmt", ["bf16", "q8_0", "q4_0"])
def test_fallback_for_a_cpu_without_the_instruction_computes_the_same(fmt, tmp_path):
    cfg = config(MID)
    weights = exercising_weights(cfg)
    ids = token_ids(cfg, 100)
    host = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(weights=fmt, disk_cache=False))
    fallback = gpt.GPT.from_weights(
        cfg, weights, gpt.CompileOptions(weights=fmt, disk_cache=False, target_cpu=WITHOUT_DOT_PRODUCTS)
    )
    instruction, _ = INSTRUCTIONS[fmt]
    assert INTRINSICS[instruction] not in fallback.ir("llvm", seq_len=8)
    asm = disassemble(fallback, tmp_path)
    assert "vpdpbusd" not in asm and "vdpbf16ps" not in asm and "vcvtneps2bf16" not in asm
    assert re.search(r"vfmadd\d+ps\s+.*%zmm", asm)  # still AVX-512 code
    # The integer sums are exact either way, so q8_0 and q4_0 agree to the bit; vdpbf16ps adds
    # its two exact products to the accumulator one rounding at a time, as the fallback's FMAs do.
    np.testing.assert_array_equal(fallback.forward(ids), host.forward(ids))
    cache = fallback.new_cache()
    fallback.prefill(ids[:10].tolist(), cache)
    host_cache = host.new_cache()
    host.prefill(ids[:10].tolist(), host_cache)
    np.testing.assert_array_equal(fallback.decode(int(ids[10]), cache), host.decode(int(ids[10]), host_cache))


def test_unknown_target_cpu_is_refused():
    with pytest.raises(ValueError, match="'pentium-9000' is not a CPU LLVM knows"):
        gpt.GPT.random(config(NANO), options=gpt.CompileOptions(target_cpu="pentium-9000", disk_cache=False))
    with pytest.raises(ValueError, match="target_cpu must be 'host' or a CPU name"):
        gpt.CompileOptions(target_cpu="")


def test_target_cpu_is_part_of_the_disk_cache_key(tmp_path):
    cfg = config(NANO)
    for target, hits in (("host", 0), (WITHOUT_DOT_PRODUCTS, 0), ("host", 1), (WITHOUT_DOT_PRODUCTS, 1)):
        model = gpt.GPT.random(
            cfg, options=gpt.CompileOptions(weights="q8_0", cache_dir=str(tmp_path), target_cpu=target)
        )
        model.forward([1, 2, 3])
        assert model.disk_cache_hits() == hits, target


def test_fallback_logits_match_the_f32_model_closely():
    # A sanity bound independent of the low-precision references: quantization moves the logits
    # of the exercising weights by about 1% (q8_0) and 2% (q4_0), not more.
    cfg = config(NANO)
    weights = exercising_weights(cfg)
    ids = token_ids(cfg, 30)
    f32 = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(disk_cache=False)).forward(ids)
    for fmt, bound in (("bf16", 0.02), ("q8_0", 0.05), ("q4_0", 0.2)):
        options = gpt.CompileOptions(weights=fmt, disk_cache=False, target_cpu=WITHOUT_DOT_PRODUCTS)
        assert relative_error(gpt.GPT.from_weights(cfg, weights, options).forward(ids), f32) < bound, fmt
