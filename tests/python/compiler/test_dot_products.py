"""The dot-product instructions of low-precision matmuls, chosen from the target CPU's features
(not the host's): vdpbf16ps (bf16) with avx512_bf16, vpdpbusd (q8_0, q4_0, q4_1) with avx512_vnni, and
for a CPU without them a fallback in plain integer and float arithmetic that computes the same.
Every named target is checked by cross-compiling (`save_object` of a compile-only model), so an
AVX2 host checks the AVX-512 code and the reverse; code is run only where the host can run it."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import gpt
from machine_code import disassemble, host_code_may_use, objdump
from shapes import MID, NANO, config, exercising_weights, relative_error, token_ids

# Per format: the instruction, the /proc/cpuinfo flag a CPU runs it with, and LLVM's name for it.
INSTRUCTIONS = {
    "bf16": ("vdpbf16ps", "avx512_bf16", "avx512bf16"),
    "q8_0": ("vpdpbusd", "avx512_vnni", "avx512vnni"),
    "q4_0": ("vpdpbusd", "avx512_vnni", "avx512vnni"),
    "q4_1": ("vpdpbusd", "avx512_vnni", "avx512vnni"),
}
INTRINSICS = {"vdpbf16ps": "llvm.x86.avx512bf16.dpbf16ps.512", "vpdpbusd": "llvm.x86.avx512.vpdpbusd.512"}

# AVX-512 (F, BW, VL, DQ) without avx512_bf16 or avx512_vnni: the CPUs the fallback is for.
WITHOUT_DOT_PRODUCTS = "skylake-avx512"

# Per named target: the widest FMA register, the instruction its bf16 code multiplies with (None:
# widened by shifts into FMAs), and the one its int8 code (q8_0) multiplies with.
TARGETS = {
    "haswell": ("ymm", None, r"vpmaddwd\s+.*%ymm"),  # AVX2 + FMA: bytes widened to 16 bits
    "znver3": ("ymm", None, r"vpmaddwd\s+.*%ymm"),  # the same on AMD
    "alderlake": ("ymm", None, r"vpdpbusd\s+.*%ymm"),  # AVX-VNNI: the VEX vpdpbusd
    "skylake-avx512": ("zmm", None, r"vpmaddwd\s+.*%zmm"),  # AVX512-BW without VNNI
    "znver4": ("zmm", r"vdpbf16ps\s+.*%zmm", r"vpdpbusd\s+.*%zmm"),  # AVX512-VNNI and BF16
    "sapphirerapids": ("zmm", r"tdpbf16ps\s+%tmm", r"tdpbssd\s+%tmm"),  # and AMX: bf16, q8_0 prefill on tiles
}

# The targets whose fallbacks run here against the host's code, with the host flags they need.
FALLBACKS = {
    "skylake-avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq"},
    "haswell": {"avx2", "fma"},
    "alderlake": {"avx2", "fma", "avx_vnni"},
}


def host_flags():
    with open("/proc/cpuinfo") as f:
        line = next(line for line in f if line.startswith("flags"))
    return set(line.split(":", 1)[1].split())


@pytest.mark.parametrize("fmt", ["bf16", "q8_0", "q4_0", "q4_1"])
def test_host_code_uses_the_instruction_where_the_cpu_has_it(fmt, tmp_path):
    instruction, _, feature = INSTRUCTIONS[fmt]
    model = gpt.GPT.random(config(NANO), options=gpt.CompileOptions(weights=fmt, threads=1, disk_cache=False))
    llvm = model.ir("llvm", seq_len=8)
    # 8 rows: fewer than an AMX tile's 16, so bf16 multiplies with vdpbf16ps on an AMX host too.
    asm = disassemble(model, tmp_path, pipeline_seq_len=8)
    # The host's CPU, or the one GPT_TARGET_CPU names instead (machine_code.host_code_may_use).
    if host_code_may_use(feature):
        assert INTRINSICS[instruction] in llvm
        assert re.search(instruction + r"\s+.*%zmm", asm), f"no zmm {instruction} although the host has {feature}"
    elif fmt != "bf16" and host_code_may_use("avxvnni"):
        # AVX-VNNI without AVX-512 (Alder Lake and later): the VEX form, on ymm registers.
        assert INTRINSICS[instruction] not in llvm
        assert re.search(instruction + r"\s+.*%ymm", asm), f"no ymm {instruction} although the host has avxvnni"
        assert not re.search(instruction + r"\s+.*%zmm", asm)
    else:
        assert INTRINSICS[instruction] not in llvm and instruction not in asm


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("fmt", ["f32", "bf16", "q8_0", "q4_1"])
def test_each_target_gets_the_instructions_it_has(target, fmt, tmp_path):
    """Cross-compiled for `target` (whatever the host): its vector width and dot products."""
    register, bf16_dot, int8_dot = TARGETS[target]
    options = gpt.CompileOptions(weights=fmt, threads=1, disk_cache=False, target_cpu=target)
    model = gpt.GPT.random(config(NANO), options=options)
    asm = disassemble(model, tmp_path)
    fmas = set(re.findall(r"vfmadd\d+ps\s+.*%([xyz]mm)\d+", asm))
    assert register in fmas, f"{target}: no {register} FMA ({sorted(fmas)})"
    if register == "ymm":
        assert "zmm" not in asm, f"{target} has no AVX-512, but its code uses zmm registers"
    if fmt == "bf16":
        assert bf16_dot is None or re.search(bf16_dot, asm), f"{target}: no {bf16_dot}"
        assert bf16_dot is not None or "vdpbf16ps" not in asm, target
    if fmt in ("q8_0", "q4_1"):
        # 4-bit codes are unsigned (no signed x signed AMX form): q4_1 stays on vpdpbusd with AMX.
        if fmt == "q4_1" and int8_dot.startswith("tdpbssd"):
            int8_dot = r"vpdpbusd\s+.*%zmm"
        assert re.search(int8_dot, asm), f"{target}: no {int8_dot}"
        assert "vpmulld" not in asm, f"{target}: the int8 dot products fell back to 32-bit multiplies"
        # Without VNNI, q4_1's 4-bit codes go through vpmaddubsw (their pair sums cannot saturate);
        # q8_0's offset codes (up to 255) could, so they stay widened to 16 bits.
        if int8_dot.startswith("vpmaddwd"):
            assert ("vpmaddubsw" in asm) == (fmt == "q4_1"), f"{target} {fmt}: vpmaddubsw where it is not exact"
    if fmt == "f32":
        assert "vpdpbusd" not in asm and "vdpbf16ps" not in asm, target


def test_an_aarch64_target_is_compiled_to_neon_and_refused_at_run_time(tmp_path):
    options = gpt.CompileOptions(threads=1, disk_cache=False, target_cpu="aarch64:neoverse-v1")
    model = gpt.GPT.random(config(NANO), options=options)
    path = tmp_path / "forward.o"
    model.save_object(path)
    header = subprocess.run([objdump(), "-f", str(path)], capture_output=True, text=True, check=True).stdout
    assert "aarch64" in header, header
    asm = subprocess.run([objdump(), "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True, check=True)
    assert re.search(r"\bfmla\s+v\d+\.4s", asm.stdout), "no NEON fmla on 4 x f32 in the AArch64 object"
    with pytest.raises(ValueError, match="cannot run on this CPU.*aarch64"):
        model.forward([1, 2, 3])


def test_a_target_whose_features_the_host_lacks_is_compile_only():
    # Each CPU with a /proc/cpuinfo flag that its code can use: the first the host lacks is tried.
    candidates = [("graniterapids", "amx_fp16"), ("znver4", "avx512_bf16"), ("skylake-avx512", "avx512f")]
    target = next((cpu for cpu, flag in candidates if flag not in host_flags()), None)
    if target is None:
        pytest.skip("this host has a feature of every target tried")
    model = gpt.GPT.random(config(NANO), options=gpt.CompileOptions(disk_cache=False, target_cpu=target))
    assert "vector<" in model.ir("llvm", seq_len=8)  # compiling and inspecting work
    with pytest.raises(ValueError, match=f"'{target}'.*cannot run on this CPU.*lacks"):
        model.forward([1, 2, 3])


@pytest.mark.parametrize("target", sorted(FALLBACKS))
@pytest.mark.parametrize("fmt", ["bf16", "q8_0", "q4_0", "q4_1"])
def test_fallback_for_a_cpu_without_the_instruction_computes_the_same(fmt, target, tmp_path):
    if not FALLBACKS[target] | {INSTRUCTIONS[fmt][1]} <= host_flags():
        pytest.skip(f"runs {target} code against the host's {INSTRUCTIONS[fmt][1]} code; this CPU lacks one")
    cfg = config(MID)
    weights = exercising_weights(cfg)
    ids = token_ids(cfg, 100)
    # On an AMX host bf16 prefill runs on tiles, which sum in another order: the reference is then
    # the vdpbf16ps code of Cooper Lake (AVX-512 BF16 without AMX), which such a host runs.
    reference = "cooperlake" if fmt == "bf16" and host_runs_amx() else "host"
    host = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(weights=fmt, disk_cache=False, target_cpu=reference))
    fallback = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(weights=fmt, disk_cache=False, target_cpu=target))
    instruction = INSTRUCTIONS[fmt][0]
    assert INTRINSICS[instruction] not in fallback.ir("llvm", seq_len=8)
    asm = disassemble(fallback, tmp_path)
    assert "vdpbf16ps" not in asm and "vcvtneps2bf16" not in asm
    assert ("vpdpbusd" in asm) == (fmt != "bf16" and target == "alderlake")  # only AVX-VNNI's ymm one
    assert re.search(r"vfmadd\d+ps\s+.*%" + TARGETS[target][0], asm)  # the target's own vector width
    # The integer sums are exact either way, so the block formats agree to the bit; vdpbf16ps adds
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
    other = WITHOUT_DOT_PRODUCTS if "avx512f" in host_flags() else "x86-64-v2"  # a CPU this host runs
    for target, hits in (("host", 0), (other, 0), ("host", 1), (other, 1)):
        model = gpt.GPT.random(
            cfg, options=gpt.CompileOptions(weights="q8_0", cache_dir=str(tmp_path), target_cpu=target)
        )
        model.forward([1, 2, 3])
        assert model.disk_cache_hits() == hits, target


def test_fallback_logits_match_the_f32_model_closely():
    if "avx512f" not in host_flags():
        pytest.skip("runs AVX-512 code")
    # A sanity bound independent of the low-precision references: quantization moves the logits
    # of the exercising weights by about 1% (q8_0) and 2% (q4_0), not more.
    cfg = config(NANO)
    weights = exercising_weights(cfg)
    ids = token_ids(cfg, 30)
    f32 = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(disk_cache=False)).forward(ids)
    for fmt, bound in (("bf16", 0.02), ("q8_0", 0.05), ("q4_0", 0.2)):
        options = gpt.CompileOptions(weights=fmt, disk_cache=False, target_cpu=WITHOUT_DOT_PRODUCTS)
        assert relative_error(gpt.GPT.from_weights(cfg, weights, options).forward(ids), f32) < bound, fmt


# AMX (issue 26 item 4): bf16 matmuls of prefill (a multiple of 16 rows) on AMX tiles, tdpbf16ps,
# where the target has amx-bf16; decode's one row keeps vdpbf16ps.
AMX_TARGETS = {"sapphirerapids": True, "znver4": False, "skylake-avx512": False, "cooperlake": False}


@pytest.mark.parametrize("target", sorted(AMX_TARGETS))
def test_bf16_prefill_uses_amx_tiles_only_where_the_target_has_them(target, tmp_path):
    options = gpt.CompileOptions(weights="bf16", threads=1, disk_cache=False, target_cpu=target)
    model = gpt.GPT.random(config(NANO), options=options)
    asm = disassemble(model, tmp_path, pipeline_seq_len=64)
    if AMX_TARGETS[target]:
        assert re.search(r"tdpbf16ps\s+%tmm\d, %tmm\d, %tmm\d", asm), f"{target}: no tdpbf16ps"
        assert "tileloadd" in asm and "ldtilecfg" in asm, target
    else:
        assert "tdpbf16ps" not in asm and "%tmm" not in asm, f"{target} has no AMX, but its code uses tiles"
    # f32 weights stay off the tiles on every target.
    f32 = gpt.GPT.random(config(NANO), options=gpt.CompileOptions(threads=1, disk_cache=False, target_cpu=target))
    assert "%tmm" not in disassemble(f32, tmp_path, pipeline_seq_len=64)


# The code unpacking's shift and mask of each byte (the 5-bit formats' fifth bits, q6_k's top bits, the high
# nibbles) as one vgf2p8affineqb where the target has GFNI, in one-row tiles only: a tile of several
# rows keeps the pipes it runs on busy with its dots (Zen 4), and keeps the shift and the and. Per
# target: the intrinsic, and whether its prefill tiles of a block format have several rows (AVX2's
# 16 registers give them one, so Alder Lake's prefill unpacks a row at a time, as decode does).
GFNI_TARGETS = {
    "znver4": ("llvm.x86.vgf2p8affineqb.512", True),
    "alderlake": ("llvm.x86.vgf2p8affineqb.256", False),
    "haswell": (None, False),
    "skylake-avx512": (None, True),
}


@pytest.mark.parametrize("fmt", ["q5_k", "q5_0", "q5_1"])
@pytest.mark.parametrize("target", sorted(GFNI_TARGETS))
def test_decode_unpacks_codes_with_gfni_where_the_target_has_it(target, fmt):
    options = gpt.CompileOptions(weights=fmt, threads=1, disk_cache=False, target_cpu=target)
    model = gpt.GPT.random(config(MID), options=options)
    decode, prefill = model.ir("llvm", entry="step"), model.ir("llvm", entry="step", seq_len=16)
    intrinsic, rows_share_words = GFNI_TARGETS[target]
    if intrinsic:
        assert intrinsic in decode, target
        assert (intrinsic in prefill) != rows_share_words, target
    else:
        assert "vgf2p8affineqb" not in decode + prefill, f"{target} has no GFNI"


# q8_0 prefill on AMX int8 tiles (tdpbssd: the signed weight codes by the signed activation
# codes, a block of 32 per tile step) where the target has amx-int8; decode keeps vpdpbusd.
AMX_INT8_TARGETS = {"sapphirerapids": True, "znver4": False, "skylake-avx512": False, "alderlake": False}


@pytest.mark.parametrize("target", sorted(AMX_INT8_TARGETS))
def test_q8_0_prefill_uses_amx_int8_tiles_only_where_the_target_has_them(target, tmp_path):
    options = gpt.CompileOptions(weights="q8_0", threads=1, disk_cache=False, target_cpu=target)
    model = gpt.GPT.random(config(NANO), options=options)
    asm = disassemble(model, tmp_path, pipeline_seq_len=64)
    if AMX_INT8_TARGETS[target]:
        assert re.search(r"tdpbssd\s+%tmm\d, %tmm\d, %tmm\d", asm), f"{target}: no tdpbssd"
        assert "tileloadd" in asm and "tilestored" in asm and "ldtilecfg" in asm, target
    else:
        assert "tdpb" not in asm and "%tmm" not in asm, f"{target} has no AMX, but its code uses tiles"
    # 8 rows: fewer than a tile's 16, no tiles on any target; on an AMX one, vpdpbusd as before.
    few_rows = disassemble(model, tmp_path, pipeline_seq_len=8)
    assert "%tmm" not in few_rows
    if AMX_INT8_TARGETS[target]:
        assert re.search(r"vpdpbusd\s+.*%zmm", few_rows), target


def host_runs_amx():
    return {"amx_bf16", "amx_tile", "avx512_bf16"} <= host_flags()


def amx_and_avx512_models(fmt):
    """MID's exercising weights in `fmt`, compiled for Sapphire Rapids (AMX) and for Cooper Lake
    (AVX-512 BF16 and VNNI, no AMX): (config, weights, 100 token ids, amx model, avx512 model)."""
    cfg = config(MID)
    weights = exercising_weights(cfg)
    models = [
        gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(weights=fmt, disk_cache=False, target_cpu=cpu))
        for cpu in ("sapphirerapids", "cooperlake")
    ]
    return cfg, weights, token_ids(cfg, 100), *models


def test_amx_bf16_prefill_matches_the_avx512_bf16_path():
    """AMX's sums run in another order than vdpbf16ps's (16 x 32 products per tile step), on the
    same bf16-rounded activations and weights: the logits of MID's exercising weights differ by
    bf16's error, not more (measured: 2.4e-3 of max |logit| between the two, 3.8e-3 and 4.0e-3
    from the f32 model)."""
    if not host_runs_amx():
        pytest.skip("runs AMX code: this CPU has no amx_bf16")
    cfg, weights, ids, amx, avx512 = amx_and_avx512_models("bf16")
    f32 = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(disk_cache=False)).forward(ids)
    assert "amx.tdpbf16ps" in amx.ir("llvm", seq_len=128) and "amx." not in avx512.ir("llvm", seq_len=128)
    logits = amx.forward(ids)
    assert relative_error(logits, avx512.forward(ids)) < 1e-2
    assert relative_error(logits, f32) < 1e-2
    # Prefill (16 rows: 1 x 2 accumulator tiles; 32 rows: 2 x 2) then decode (one row:
    # vdpbf16ps) agree with the AVX-512 path too.
    for length in (12, 20):
        amx_cache, avx512_cache = amx.new_cache(), avx512.new_cache()
        prompt = ids[:length].tolist()
        assert relative_error(amx.prefill(prompt, amx_cache), avx512.prefill(prompt, avx512_cache)) < 1e-2
        step = int(ids[length])
        assert relative_error(amx.decode(step, amx_cache), avx512.decode(step, avx512_cache)) < 1e-2


def test_without_the_permission_for_tile_data_the_code_does_without_amx():
    """Linux lets a process use AMX tiles only after arch_prctl(ARCH_REQ_XCOMP_PERM); where that
    is refused (GPT_NO_AMX stands in for a refusal) the code compiled to run here has no AMX and
    runs, instead of dying of SIGILL."""
    if not host_runs_amx():
        pytest.skip("needs a CPU with amx_bf16")
    script = """
import sys
sys.path[:0] = sys.argv[1:]
import gpt
from shapes import NANO, config, token_ids
options = gpt.CompileOptions(weights="bf16", disk_cache=False, target_cpu="sapphirerapids")
model = gpt.GPT.random(config(NANO), options=options)
assert "amx." not in model.ir("llvm", seq_len=64)
print(model.forward(token_ids(config(NANO), 64)).shape)
"""
    env = dict(os.environ, GPT_NO_AMX="1")
    done = subprocess.run(
        [sys.executable, "-c", script, *sys.path], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert "(64, 256)" in done.stdout, done.stdout


def host_runs_amx_int8():
    return {"amx_int8", "amx_tile", "avx512_vnni"} <= host_flags()


def test_amx_int8_q8_0_prefill_matches_the_avx512_vnni_path():
    """tdpbssd's block sums are the same integers as vpdpbusd's (signed codes by signed codes,
    against unsigned codes + 128 less 128 x the activation codes' sum), exact in f32, and each
    block's sum is scaled and added with the same float operations in the same order: the logits
    are the same bits (measured: max |difference| 0.0)."""
    if not host_runs_amx_int8():
        pytest.skip("runs AMX code: this CPU has no amx_int8")
    _, _, ids, amx, avx512 = amx_and_avx512_models("q8_0")
    assert "amx.tdpbssd" in amx.ir("llvm", seq_len=128) and "amx." not in avx512.ir("llvm", seq_len=128)
    np.testing.assert_array_equal(amx.forward(ids), avx512.forward(ids))
    # Prefill (16 rows: 1 x 2 accumulator tiles; 32 rows: 2 x 2) then decode (one row).
    for length in (16, 48):
        amx_cache, avx512_cache = amx.new_cache(), avx512.new_cache()
        prompt = ids[:length].tolist()
        np.testing.assert_array_equal(amx.prefill(prompt, amx_cache), avx512.prefill(prompt, avx512_cache))
        step = int(ids[length])
        np.testing.assert_array_equal(amx.decode(step, amx_cache), avx512.decode(step, avx512_cache))
