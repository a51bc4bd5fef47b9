"""Packed weights: the panel-packing kernel, and packed programs against unpacked ones."""

import numpy as np
import pytest

import gpt
from gpt import _gpt
from reference import gpt2_logits
from shapes import NANO, RTOL, config, exercising_weights, relative_error, token_ids


def test_pack_panels_matches_numpy():
    matrix = np.random.default_rng(0).standard_normal((48, 96)).astype(np.float32)
    packed = _gpt.pack_panels(matrix, 32)
    assert packed.shape == (3, 48, 32)
    # packed[p, k, j] = matrix[k, 32 p + j]
    np.testing.assert_array_equal(packed, matrix.reshape(48, 3, 32).transpose(1, 0, 2))
    np.testing.assert_array_equal(packed[2, 5, 7], matrix[5, 2 * 32 + 7])


def test_pack_panels_rejects_uneven_width():
    with pytest.raises(ValueError, match="not a multiple of the panel width 32"):
        _gpt.pack_panels(np.zeros((4, 40), np.float32), 32)


def test_transpose_padded_matches_numpy():
    # 150 rows: more than one 64-row block of the kernel, and not a multiple of it.
    matrix = np.random.default_rng(1).standard_normal((150, 24)).astype(np.float32)
    out = _gpt.transpose_padded(matrix, 256)
    assert out.shape == (24, 256)
    np.testing.assert_array_equal(out[:, :150], matrix.T)
    np.testing.assert_array_equal(out[:, 150:], 0.0)


def test_transpose_padded_rejects_too_few_padded_rows():
    with pytest.raises(ValueError, match="padded_rows 8 is less than the 9 rows"):
        _gpt.transpose_padded(np.zeros((9, 4), np.float32), 8)


def test_default_pipeline_reads_packed_weights_and_baseline_does_not():
    cfg = config(NANO)
    packed = gpt.GPT.random(cfg).ir("transformer", seq_len=8)
    assert "transformer.packed_matmul" in packed
    assert "tensor<6x64x32xf32>" in packed  # c_attn [64, 192] as 6 panels of 32 columns
    plain = gpt.GPT.random(cfg, options=gpt.CompileOptions(pipeline="baseline")).ir("transformer", seq_len=8)
    assert "packed_matmul" not in plain


# n_embd = 48: c_fc (192 columns) and the LM head are packed, c_attn (144) and c_proj (48) are
# not (their widths do not divide into 32-column panels), so both kinds meet in one program.
MIXED = dict(n_layer=2, n_head=4, n_embd=48, vocab_size=300, block_size=64)


@pytest.mark.parametrize("shape", [NANO, MIXED], ids=["nano", "mixed"])
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_program_matches_unpacked_and_reference(shape, threads):
    cfg = config(shape)
    weights = exercising_weights(cfg)
    ids = token_ids(cfg, 20)
    packed = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(threads=threads)).forward(ids)
    unpacked = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(pipeline="fused")).forward(ids)
    # Same products summed in the same K order: only the FMA contraction may differ.
    assert relative_error(packed, unpacked) < 1e-5
    assert relative_error(packed, gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head)) < RTOL


def test_packed_decode_matches_forward():
    cfg = config(MIXED)
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg), gpt.CompileOptions(threads=2))
    ids = token_ids(cfg, 12)
    cache = model.new_cache(32)
    model.prefill(ids[:-1], cache)
    step = model.decode(int(ids[-1]), cache)
    assert relative_error(step, model.forward(ids)[-1]) < RTOL
