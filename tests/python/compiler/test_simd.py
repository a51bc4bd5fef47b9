"""Proof of SIMD: the machine code the JIT runs uses AVX-512 FMAs when the host's code may use AVX-512
(and 256-bit registers where that streams faster: decode of float32 weights)."""

import re
import subprocess

import numpy as np
import pytest

import gpt
from machine_code import disassemble, host_code_may_use, objdump
from reference import gpt2_logits
from shapes import MID, NANO, RTOL, config, exercising_weights, relative_error, token_ids


def test_default_pipeline_emits_wide_fmas(tmp_path):
    cfg = config(NANO)
    weights = exercising_weights(cfg)
    model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(threads=1))
    asm = disassemble(model, tmp_path)
    fmas = re.findall(r"vfmadd\d+ps\s+.*%([xyz]mm)\d+", asm)
    assert fmas, "no packed FMA in the compiled forward pass"
    if host_code_may_use("avx512f"):
        assert "zmm" in fmas, "the host's code may use AVX-512 but the matmuls use no zmm FMA"
    # Whatever the instructions, the code is correct.
    ids = token_ids(cfg, 50)
    assert relative_error(model.forward(ids), gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head)) < RTOL


def test_baseline_pipeline_has_no_wide_vectors_from_the_schedule(tmp_path):
    model = gpt.GPT.random(config(NANO), options=gpt.CompileOptions(pipeline="baseline"))
    asm = disassemble(model, tmp_path)
    assert not re.search(r"vfmadd\d+ps\s+.*%zmm", asm)


def programs_in(cache_dir):
    """{path: disassembly} of every program in an on-disk compile cache (each a shared object)."""
    return {
        path: subprocess.run(
            [objdump(), "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True, check=True
        ).stdout
        for path in cache_dir.rglob("*.gptjit")
    }


def fma_registers(asm):
    return set(re.findall(r"vfmadd\d+ps\s+.*%([xyz]mm)\d+", asm))


@pytest.mark.skipif(not host_code_may_use("avx512f"), reason="the host's code uses no 512-bit registers anyway")
def test_decode_of_float32_weights_runs_in_256_bit_registers(tmp_path):
    # Decode streams every weight once, faster on ymm than on zmm (ModelCompiler.cpp); prefill is
    # bound by the FMA units and keeps zmm.
    cfg = config(MID)
    weights = exercising_weights(cfg)
    cache_dir = tmp_path / "programs"
    model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(threads=1, cache_dir=str(cache_dir)))
    ids = token_ids(cfg, 9)
    first = model.decode(int(ids[0]), model.new_cache())  # the one-token step, alone in the cache
    [decode] = programs_in(cache_dir).values()
    assert fma_registers(decode) == {"ymm"}, fma_registers(decode)
    assert "zmm" not in decode
    cache = model.new_cache()
    model.prefill(ids[:8], cache)  # an 8-token step
    prefill = [asm for asm in programs_in(cache_dir).values() if asm != decode]
    assert len(prefill) == 1 and "zmm" in fma_registers(prefill[0])
    # The same numbers, whichever registers: the reference, and decode after the prefill.
    reference = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head)
    assert relative_error(first, reference[0]) < RTOL
    assert relative_error(model.decode(int(ids[8]), cache), reference[8]) < RTOL
    np.testing.assert_array_equal(model.decode(int(ids[0]), model.new_cache()), first)
