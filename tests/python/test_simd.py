"""Proof of SIMD: the machine code the JIT runs uses AVX-512 FMAs when the host's code may use AVX-512."""

import re

import gpt
from machine_code import disassemble, host_code_may_use
from reference import gpt2_logits
from shapes import NANO, RTOL, config, exercising_weights, relative_error, token_ids


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
