"""The K-quant formats (q4_k, q5_k, q6_k) and the 5-bit block formats (q5_0, q5_1, whose codes
unpack as q5_k's) on every named target: cross-compiled (whatever the host),
their matmuls stay on the target's integer dot products, and where the host can run a fallback
target's code (no VNNI: the bytes widened to 16 bits) its logits are the host's bit for bit."""

import re
import subprocess

import numpy as np
import pytest

import gpt
from machine_code import disassemble, objdump
from shapes import MID, config, exercising_weights, token_ids

KQUANTS = ("q4_k", "q5_k", "q6_k", "q5_0", "q5_1")
# The int8 dot product each named target's code multiplies with: the codes are unsigned, so there
# is no AMX form and Sapphire Rapids keeps vpdpbusd; without VNNI the codes (below 128) multiply the
# activation bytes with vpmaddubsw into 16-bit pair sums, at the target's own vector width.
DOT_PRODUCTS = {
    "haswell": r"vpmaddubsw\s+.*%ymm",
    "alderlake": r"vpdpbusd\s+.*%ymm",
    "skylake-avx512": r"vpmaddubsw\s+.*%zmm",
    "znver4": r"vpdpbusd\s+.*%zmm",
    "sapphirerapids": r"vpdpbusd\s+.*%zmm",
}
# The host flags that running each fallback target's code here needs.
FALLBACKS = {"haswell": {"avx2", "fma"}, "skylake-avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq"}}


@pytest.mark.parametrize("fmt", KQUANTS)
@pytest.mark.parametrize("target", sorted(DOT_PRODUCTS))
def test_each_target_multiplies_with_its_own_dot_product(fmt, target, tmp_path):
    options = gpt.CompileOptions(weights=fmt, threads=1, disk_cache=False, target_cpu=target)
    asm = disassemble(gpt.GPT.random(config(MID), options=options), tmp_path)
    dot_products = len(re.findall(DOT_PRODUCTS[target], asm))
    assert dot_products, f"{fmt} on {target}: no {DOT_PRODUCTS[target]}"
    # Each weighs a block's (or a q6_k run's) i32 sum by its integer scale: one 32-bit multiply per
    # block and vector against its 8 dot products (4 or 8 lanes, each one or two instructions). A
    # fallback to 32-bit multiplies in the dot products themselves would be one or more per lane.
    assert asm.count("vpmulld") * 4 <= dot_products, f"{fmt} on {target}: the dot products became 32-bit multiplies"


@pytest.mark.parametrize("fmt", KQUANTS)
def test_compiles_for_aarch64(fmt, tmp_path):
    options = gpt.CompileOptions(weights=fmt, threads=1, disk_cache=False, target_cpu="aarch64:neoverse-v1")
    path = tmp_path / "forward.o"
    gpt.GPT.random(config(MID), options=options).save_object(path)
    header = subprocess.run([objdump(), "-f", str(path)], capture_output=True, text=True, check=True).stdout
    assert "aarch64" in header, header


@pytest.mark.parametrize("fmt", KQUANTS)
@pytest.mark.parametrize("target", sorted(FALLBACKS))
def test_code_without_vnni_computes_what_the_host_code_does(fmt, target):
    with open("/proc/cpuinfo") as f:
        flags = set(next(line for line in f if line.startswith("flags")).split(":", 1)[1].split())
    if not FALLBACKS[target] <= flags:
        pytest.skip(f"runs {target} code; this CPU lacks {sorted(FALLBACKS[target] - flags)}")
    cfg = config(MID)
    weights = exercising_weights(cfg)
    ids = token_ids(cfg, 40)
    host = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(weights=fmt, disk_cache=False))
    fallback = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(weights=fmt, disk_cache=False, target_cpu=target))
    # The block sums are exact integers either way, and the scale products the same f32 operations:
    # the logits agree to the bit.
    np.testing.assert_array_equal(fallback.forward(ids), host.forward(ids))
    caches = fallback.new_cache(), host.new_cache()
    fallback.prefill(ids[:10].tolist(), caches[0])
    host.prefill(ids[:10].tolist(), caches[1])
    np.testing.assert_array_equal(fallback.decode(int(ids[10]), caches[0]), host.decode(int(ids[10]), caches[1]))
