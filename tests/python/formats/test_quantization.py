"""The load-time quantization kernels (bf16, q8_0, q4_0) against a separate numpy implementation,
bit for bit: scales, codes, rounding ties, all-zero blocks and bad shapes."""

import gpt_kernels_testing
import numpy as np
import pytest

import quant_reference as ref


def weights(k: int, n: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((k, n)) * 0.02).astype(np.float32)


def test_bf16_matches_reference_on_random_bits():
    rng = np.random.default_rng(0)
    # Every finite float32 pattern is fair game: subnormals, huge and tiny magnitudes, both signs.
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    values = values[np.isfinite(values) & (np.abs(values) < 3.0e38)]
    np.testing.assert_array_equal(gpt_kernels_testing.quantize_bf16(values), ref.bf16_bits(values))


def test_bf16_ties_round_to_even():
    one = np.float32(1.0)
    half_ulp = np.float32(2.0**-8)  # bf16 keeps 7 fraction bits: its ulp at 1 is 2^-7
    ties = np.array([one + half_ulp, one + 3 * half_ulp, -(one + half_ulp)], np.float32)
    # 1 + 2^-8 -> 1 (even); 1 + 3 * 2^-8 -> 1 + 2^-6 (even); the sign does not matter.
    np.testing.assert_array_equal(gpt_kernels_testing.quantize_bf16(ties), [0x3F80, 0x3F82, 0xBF80])
    np.testing.assert_array_equal(gpt_kernels_testing.quantize_bf16(ties), ref.bf16_bits(ties))


def test_fp16_matches_numpy_including_subnormals_and_overflow():
    rng = np.random.default_rng(1)
    values = np.concatenate(
        [
            rng.standard_normal(50_000).astype(np.float32) * np.float32(1e-3),
            (rng.random(50_000) * 2.0**-14).astype(np.float32),  # fp16 subnormals
            np.array([65504, 65519.99, 65520, 1e6, -1e6, 2.0**-25, 2.0**-25 * 1.0000001, 0.0, -0.0], np.float32),
        ]
    )
    np.testing.assert_array_equal(gpt_kernels_testing.to_fp16(values), values.astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("fmt, reference", [("q8_0", ref.q8_0), ("q4_0", ref.q4_0)])
@pytest.mark.parametrize("shape", [(32, 1), (64, 96), (768, 48)])
def test_block_formats_match_reference(fmt, reference, shape):
    matrix = weights(*shape, seed=shape[0])
    codes, scales = gpt_kernels_testing.quantize(fmt, matrix)
    want_codes, want_scales = reference(matrix)
    assert codes.dtype == want_codes.dtype and scales.dtype == np.uint16
    assert scales.shape == (shape[0] // 32, shape[1])
    np.testing.assert_array_equal(scales, want_scales)
    np.testing.assert_array_equal(codes, want_codes)


@pytest.mark.parametrize("shape", [(1, 32), (48, 64), (5, 768)])
def test_q8_0_rows_match_the_reference_with_ties_and_zero_blocks(shape):
    """The rows layout (a load's LM head, quantized from the rows of the [V, D] table straight into
    lanes) has a vector path of its own: the same codes and scales as the reference, bit for bit,
    ties rounded away from zero, all-zero blocks 0 with scale 0."""
    matrix = weights(*shape, seed=shape[1])
    matrix[0, :32] = 0.0  # an all-zero block
    if shape[1] >= 64:  # max |w| = 127, so d = 1 and w / d is w: every .5 a tie
        matrix[0, 32:64] = 0.0
        matrix[0, 32:38] = [127, 2.5, -2.5, 0.5, -0.5, -126.5]
    n, k = shape
    lanes, scales = gpt_kernels_testing.quantize_rows_to_q8_0_lanes(matrix, n, 1)  # panels of one column
    want_codes, want_scales = ref.q8_0(np.ascontiguousarray(matrix.T))
    np.testing.assert_array_equal(lanes, ref.q8_0_lanes(want_codes, 1))
    scales = scales.reshape(n, k // 32)
    np.testing.assert_array_equal(scales, want_scales.T)
    # The codes back from the lanes: byte i of word 8 b + q of a column is its row 32 b + q + 8 i.
    codes = lanes.view(np.int8).reshape(n, k // 32, 8, 4).transpose(0, 1, 3, 2).reshape(shape)
    np.testing.assert_array_equal(codes, want_codes.T)
    assert not codes[0, :32].any() and scales[0, 0] == 0
    if shape[1] >= 64:
        np.testing.assert_array_equal(codes[0, 32:38], [127, 3, -3, 1, -1, -127])


def test_q8_0_codes_scales_and_ties():
    # One column, one block: max |w| = 127, so d = 1 and w / d is w itself. 2.5 and -2.5 are
    # ties, rounded away from zero.
    column = np.zeros(32, np.float32)
    column[:5] = [127, 2.5, -2.5, 0.49999997, -126.6]
    codes, scales = gpt_kernels_testing.quantize("q8_0", column[:, None])
    np.testing.assert_array_equal(codes[:5, 0], [127, 3, -3, 0, -127])
    assert scales[0, 0] == np.float16(1.0).view(np.uint16)
    np.testing.assert_array_equal(codes, ref.q8_0(column[:, None])[0])


def test_q4_0_codes_scales_and_ties():
    # The largest magnitude is -8 (the first of -8 and +8), so d = 1: codes are trunc(w + 8.5),
    # capped at 15 (w = 8 would be 16).
    column = np.zeros(32, np.float32)
    column[:6] = [-8, 8, 0.5, -0.5, 3.2, -7.9]
    codes, scales = gpt_kernels_testing.quantize("q4_0", column[:, None])
    np.testing.assert_array_equal(codes[:6, 0], [0, 15, 9, 8, 11, 0])
    assert scales[0, 0] == np.float16(1.0).view(np.uint16)
    np.testing.assert_array_equal(codes, ref.q4_0(column[:, None])[0])


def test_all_zero_blocks_have_zero_scale_and_the_zero_code():
    matrix = weights(64, 8)
    matrix[32:, 3] = 0.0  # the second block of column 3
    for fmt, reference, zero_code in (("q8_0", ref.q8_0, 0), ("q4_0", ref.q4_0, 8)):
        codes, scales = gpt_kernels_testing.quantize(fmt, matrix)
        # d = 0 (q4_0's m / -8 is -0.0: the sign bit is set, the value is zero).
        assert scales.view(np.float16)[1, 3] == 0 and np.all(codes[32:, 3] == zero_code)
        np.testing.assert_array_equal(codes, reference(matrix)[0])


def test_dequantized_weights_are_close():
    matrix = weights(256, 64)
    # q8_0 rounds to the nearest of 255 steps of max|w| / 127: half a step. q4_0 has 16 codes for
    # [-8 d, 7 d]: the weight of largest magnitude is exact, one of the opposite sign near it is
    # clamped to 7 d, a full step away. Both plus the fp16 rounding of the scale (2^-11 relative).
    for fmt, offset, error_in_steps, step in (("q8_0", 0, 0.5, 1 / 127), ("q4_0", 8, 1.0, 1 / 8)):
        codes, scales = gpt_kernels_testing.quantize(fmt, matrix)
        restored = ref.dequantize(codes, scales, offset)
        amax = np.abs(matrix.reshape(8, 32, 64)).max(axis=1).repeat(32, axis=0).astype(np.float64)
        assert np.all(np.abs(restored - matrix) <= amax * (step * error_in_steps + 2.0**-10))


def test_k_not_a_multiple_of_the_block_is_an_error():
    for fmt in ("q8_0", "q4_0"):
        with pytest.raises(ValueError, match="K = 40 is not a multiple of the quantization block"):
            gpt_kernels_testing.quantize(fmt, np.zeros((40, 4), np.float32))


# -- The activation rounding of the references (quant_reference.py), by hand ---------------------


def test_bf16_activations_round_float32_first_then_to_even():
    # 1 + 2^-8 + 2^-30 is 1 + 2^-8 in float32 (2^-30 is below its half ulp), a bf16 tie that goes to
    # 1 (even); rounded to bf16 straight from float64 it would go up to 1 + 2^-7.
    x = np.array([[1 + 2.0**-8 + 2.0**-30, 1 + 3 * 2.0**-8, -(1 + 2.0**-8), 0.0, 3.0]])
    np.testing.assert_array_equal(ref.bf16_activations(x), [[1.0, 1 + 2.0**-6, -1.0, 0.0, 3.0]])
    assert ref.bf16_activations(x).dtype == np.float64


def test_int8_activation_ties_round_to_even():
    # amax = 127 makes d = 1 and id = 1: codes are rint(x), halves to even.
    block = np.zeros(32)
    block[:8] = [127, 2.5, 3.5, -2.5, -0.5, 0.5, 1.5, -126.5]
    codes, d = ref.int8_activation_blocks(block[None, :])
    np.testing.assert_array_equal(codes[0, :8], [127, 2, 4, -2, 0, 0, 2, -126])
    assert d.dtype == np.float32 and d[0, 0] == 1.0
    np.testing.assert_array_equal(ref.int8_activations(block[None, :])[0, :8], codes[0, :8])


def test_int8_activations_of_an_all_zero_block_are_zero():
    x = np.zeros((2, 64))
    x[1, 32:] = np.linspace(-1, 1, 32)  # the other block of row 1 is not zero
    codes, d = ref.int8_activation_blocks(x)
    assert np.all(d[0] == 0) and d[1, 0] == 0 and d[1, 1] == np.float32(1) / np.float32(127)
    np.testing.assert_array_equal(codes[0], 0)
    np.testing.assert_array_equal(codes[1, :32], 0)
    out = ref.int8_activations(x)
    assert np.all(np.isfinite(out)) and np.all(out[0] == 0) and np.all(out[1, :32] == 0)


@pytest.mark.parametrize("amax", [254.0, 0.3, 1e-3, 7.77])
def test_the_amax_element_of_a_block_maps_to_127(amax):
    """Its code is +-127 and it dequantizes to 127 d, d = float32(amax) / 127 (f32 division): for
    254, d = 2 and id = 0.5 exactly; for the others 1 / d is rounded, and rint absorbs it."""
    for sign in (1.0, -1.0):
        block = np.linspace(-0.5, 0.5, 32) * amax
        block[17] = sign * amax
        codes, d = ref.int8_activation_blocks(block[None, :])
        assert d[0, 0] == np.float32(np.float32(amax) / np.float32(127))
        assert codes[0, 17] == sign * 127
        assert abs(codes[0]).max() == 127
        assert ref.int8_activations(block[None, :])[0, 17] == sign * 127 * np.float64(d[0, 0])


def test_int8_activations_quantize_each_block_of_each_row_on_its_own():
    x = np.random.default_rng(3).standard_normal((3, 96)) * np.array([1.0, 100.0, 1e-3])[:, None]
    codes, d = ref.int8_activation_blocks(x)
    assert codes.shape == (3, 96) and d.shape == (3, 3)
    blocks = x.astype(np.float32).reshape(3, 3, 32)
    np.testing.assert_array_equal(d, (np.abs(blocks).max(axis=-1) / np.float32(127)).astype(np.float32))
    # Every element within half a step of its block's d (plus float32 rounding of x * id).
    restored = ref.int8_activations(x).reshape(3, 3, 32)
    assert np.all(np.abs(restored - blocks) <= d[..., None].astype(np.float64) * (0.5 + 1e-4))
    with pytest.raises(ValueError, match="K = 40 is not a multiple of the block"):
        ref.int8_activation_blocks(np.zeros((2, 40)))
