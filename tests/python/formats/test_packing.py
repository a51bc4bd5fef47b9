"""Packed weights: the panel-packing kernel, the lane layouts of low-precision weights (bit for
bit against quant_reference.py), and packed programs against unpacked ones."""

import gpt_kernels_testing
import numpy as np
import pytest

import gpt
import quant_reference as ref
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
    out = gpt_kernels_testing.transpose_padded(matrix, 256)
    assert out.shape == (24, 256)
    np.testing.assert_array_equal(out[:, :150], matrix.T)
    np.testing.assert_array_equal(out[:, 150:], 0.0)


def test_transpose_padded_rejects_too_few_padded_rows():
    with pytest.raises(ValueError, match="padded_rows 8 is less than the 9 rows"):
        gpt_kernels_testing.transpose_padded(np.zeros((9, 4), np.float32), 8)


# -- Lane layouts: 32-bit words of one column's weights, in the rows its activations come in ------


def test_lane_words_by_hand():
    # One column (width 1). bf16: the low half is row r, the high half row r + K/2.
    np.testing.assert_array_equal(
        gpt_kernels_testing.pack_lanes("bf16", np.array([[1.0], [3.0], [2.0], [4.0]], np.float32), 1),
        [[[0x40003F80], [0x40804040]]],
    )
    # q8_0: byte i of word q of a block is row q + 8 i.
    codes = np.zeros((32, 1), np.int8)
    codes[[0, 8, 16, 24], 0] = [1, -1, 127, -128]
    codes[1, 0] = 5
    lanes = gpt_kernels_testing.pack_lanes("q8_0", codes, 1)
    assert lanes[0, 0, 0] == 0x807FFF01 and lanes[0, 1, 0] == 5
    np.testing.assert_array_equal(lanes[0, 2:, 0], 0)
    # q4_0: byte i of word o holds rows o + 8 i (low nibble) and o + 4 + 8 i (high nibble).
    nibbles = np.full((32, 1), 8, np.uint8)
    nibbles[[0, 4, 8, 12, 16, 20, 24, 28], 0] = [1, 5, 2, 6, 3, 7, 4, 15]
    lanes = gpt_kernels_testing.pack_lanes("q4_0", nibbles, 1)
    assert lanes[0, 0, 0] == 0xF4736251
    np.testing.assert_array_equal(lanes[0, 1:, 0], 0x88888888)


@pytest.mark.parametrize("shape, width", [((2, 32), 32), ((64, 96), 32), ((96, 64), 16), ((768, 32), 32)])
def test_bf16_lanes_match_reference(shape, width):
    rng = np.random.default_rng(shape[0])
    matrix = rng.standard_normal(shape).astype(np.float32)
    # Ties: 1 + 2^-8 rounds down to 1 (even), 1 + 3 * 2^-8 up to 1 + 2^-6; and exact zeros.
    matrix[0, :3] = [1 + 2.0**-8, 1 + 3 * 2.0**-8, -0.0]
    matrix[-1, :2] = [-(1 + 2.0**-8), 0.0]
    packed = gpt_kernels_testing.pack_lanes("bf16", matrix, width)
    assert packed.dtype == np.uint32 and packed.shape == (shape[1] // width, shape[0] // 2, width)
    np.testing.assert_array_equal(packed, ref.bf16_lanes(matrix, width))
    rounded = (ref.bf16_bits(matrix).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(gpt_kernels_testing.dequantize_lanes("bf16", packed), rounded)


@pytest.mark.parametrize("shape, width", [((32, 32), 32), ((64, 96), 32), ((96, 64), 16), ((768, 64), 32)])
def test_q8_0_lanes_match_reference(shape, width):
    # Every int8, -128 included (no q8_0 code, but the packing is the two's-complement byte).
    codes = np.random.default_rng(shape[0]).integers(-128, 128, shape).astype(np.int8)
    packed = gpt_kernels_testing.pack_lanes("q8_0", codes, width)
    assert packed.dtype == np.uint32 and packed.shape == (shape[1] // width, shape[0] // 4, width)
    np.testing.assert_array_equal(packed, ref.q8_0_lanes(codes, width))


@pytest.mark.parametrize("shape, width", [((32, 32), 32), ((64, 96), 32), ((96, 64), 16), ((768, 64), 32)])
def test_q4_0_lanes_match_reference(shape, width):
    codes = np.random.default_rng(shape[0]).integers(0, 16, shape).astype(np.uint8)
    packed = gpt_kernels_testing.pack_lanes("q4_0", codes, width)
    assert packed.dtype == np.uint32 and packed.shape == (shape[1] // width, shape[0] // 8, width)
    np.testing.assert_array_equal(packed, ref.q4_0_lanes(codes, width))


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_quantized_lanes_match_reference_and_read_back_exactly(fmt):
    """The runtime's path: quantize [K, N] (random blocks, an all-zero block, zero padding columns
    as the LM head has past the vocabulary), pack codes to lanes and scales to panels, and read
    back the dequantized weights."""
    matrix = (np.random.default_rng(7).standard_normal((96, 128)) * 0.02).astype(np.float32)
    matrix[32:64, 5] = 0.0  # an all-zero block
    matrix[:, 100:] = 0.0  # padding columns
    reference, lanes, offset = {"q8_0": (ref.q8_0, ref.q8_0_lanes, 0), "q4_0": (ref.q4_0, ref.q4_0_lanes, 8)}[fmt]
    codes, scales = gpt_kernels_testing.quantize(fmt, matrix)
    want_codes, want_scales = reference(matrix)
    packed = gpt_kernels_testing.pack_lanes(fmt, codes, 32)
    np.testing.assert_array_equal(packed, lanes(want_codes))
    # Padding columns dequantize to 0: q8_0 code 0 in every byte, q4_0 code 8 in every nibble.
    np.testing.assert_array_equal(packed[3, :, 100 - 96 :], 0 if fmt == "q8_0" else 0x88888888)
    assert np.all(scales[:, 100:].view(np.float16) == 0)
    restored = gpt_kernels_testing.dequantize_lanes(fmt, packed, ref.scale_panels(want_scales))
    np.testing.assert_array_equal(restored, ref.dequantize(want_codes, want_scales, offset).astype(np.float32))


@pytest.mark.parametrize(
    "fmt, dtype, rows, message",
    [
        ("bf16", np.float32, 5, "K = 5 is not a multiple of 2"),
        ("q8_0", np.int8, 40, "K = 40 is not a multiple of 32"),
        ("q4_0", np.uint8, 36, "K = 36 is not a multiple of 32"),
    ],
)
def test_lane_packing_rejects_k_that_does_not_fill_its_words(fmt, dtype, rows, message):
    with pytest.raises(ValueError, match=message):
        gpt_kernels_testing.pack_lanes(fmt, np.zeros((rows, 32), dtype), 32)
    with pytest.raises(ValueError, match="not a multiple of the panel width 32"):
        gpt_kernels_testing.pack_lanes(fmt, np.zeros((32, 40), dtype), 32)


def test_dequantizing_lanes_rejects_a_zero_panel_width():
    # The scales' shape check divides by the width: it must be refused first, not divide by zero.
    for fmt in ("q8_0", "q4_0"):
        with pytest.raises(ValueError, match="panel width \\(their last dim\\) of at least 1"):
            gpt_kernels_testing.dequantize_lanes(fmt, np.zeros((0, 8, 0), np.uint32), np.zeros((0, 1, 0), np.uint16))


def test_q4_0_lanes_reject_a_code_past_four_bits():
    codes = np.zeros((32, 32), np.uint8)
    codes[9, 3] = 16
    with pytest.raises(ValueError, match="code 16 at row 9, column 3 is not a 4-bit code"):
        gpt_kernels_testing.pack_lanes("q4_0", codes, 32)


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
