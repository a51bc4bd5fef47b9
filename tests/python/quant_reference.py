"""bf16, q8_0, q4_0 and q4_1 written from their definitions in numpy, apart from the C++ kernels."""

import numpy as np

BLOCK = 32


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """The nearest bf16 of each finite value, ties to even: of the two bf16 neighbours (the value's
    bits truncated, and one ulp further from zero), the closer one, compared exactly in float64."""
    x = np.ascontiguousarray(values, np.float32)
    bits = x.view(np.uint32)
    toward_zero = (bits & np.uint32(0xFFFF0000)).astype(np.uint32)
    away = (toward_zero + np.uint32(0x10000)).astype(np.uint32)
    exact = x.astype(np.float64)
    below = np.abs(exact - toward_zero.view(np.float32).astype(np.float64))
    above = np.abs(away.view(np.float32).astype(np.float64) - exact)
    odd = ((toward_zero >> 16) & 1).astype(bool)
    pick_away = (above < below) | ((above == below) & odd)
    return (np.where(pick_away, away, toward_zero) >> 16).astype(np.uint16)


def _round_half_away(values: np.ndarray) -> np.ndarray:
    exact = values.astype(np.float64)  # |v| + 0.5 is exact in float64 for any float32 v
    return np.sign(exact) * np.floor(np.abs(exact) + 0.5)


def _blocks(matrix: np.ndarray) -> np.ndarray:
    """[K, N] -> [K/32, 32, N]."""
    k, n = matrix.shape
    assert k % BLOCK == 0
    return matrix.astype(np.float32).reshape(k // BLOCK, BLOCK, n)


def q8_0(matrix: np.ndarray):
    """(codes int8 [K, N], fp16 scale bits [K/32, N]): d = max|w| / 127, q = round(w / d)."""
    blocks = _blocks(matrix)
    d = (np.abs(blocks).max(axis=1) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d[:, None, :] == 0, 0, _round_half_away(blocks / d[:, None, :]))
    return q.astype(np.int8).reshape(matrix.shape), d.astype(np.float16).view(np.uint16)


def q4_0(matrix: np.ndarray):
    """(codes uint8 [K, N], fp16 scale bits [K/32, N]): m = the first weight of largest magnitude,
    d = m / -8, q = min(15, trunc(w / d + 8.5))."""
    blocks = _blocks(matrix)
    first = np.argmax(np.abs(blocks), axis=1)  # argmax returns the first of equal maxima
    m = np.take_along_axis(blocks, first[:, None, :], axis=1)[:, 0, :]
    d = (m / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        shifted = (blocks / d[:, None, :]).astype(np.float32) + np.float32(8.5)
        q = np.where(d[:, None, :] == 0, 8, np.minimum(15, np.trunc(shifted)))
    return q.astype(np.uint8).reshape(matrix.shape), d.astype(np.float16).view(np.uint16)


def q4_1(matrix: np.ndarray):
    """(codes uint8 [K, N], fp16 scale and min bits [K/32, 2, N]), llama.cpp's definition in
    float32 arithmetic: lo, hi = the block's smallest and largest weight, d = (hi - lo) / 15,
    q = min(15, trunc((w - lo) * (1 / d) + 0.5)), 0 where d = 0; the min stored is lo."""
    blocks = _blocks(matrix)
    lo, hi = blocks.min(axis=1), blocks.max(axis=1)
    d = ((hi - lo) / np.float32(15)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inverse = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    scaled = ((blocks - lo[:, None, :]).astype(np.float32) * inverse[:, None, :]).astype(np.float32)
    q = np.minimum(15, np.trunc(scaled + np.float32(0.5)))
    pairs = np.stack([d.astype(np.float16), lo.astype(np.float16)], axis=1).view(np.uint16)
    return q.astype(np.uint8).reshape(matrix.shape), pairs


def dequantize_q4_1(codes: np.ndarray, pair_bits: np.ndarray) -> np.ndarray:
    """code * d + min per block ([K/32, 2, N] scale and min bits), in float64."""
    k, n = codes.shape
    pairs = pair_bits.view(np.float16).astype(np.float64)
    d, m = pairs[:, 0, None, :], pairs[:, 1, None, :]
    return (codes.astype(np.float64).reshape(k // BLOCK, BLOCK, n) * d + m).reshape(k, n)


def dequantize(codes: np.ndarray, scale_bits: np.ndarray, offset: int = 0) -> np.ndarray:
    """(code - offset) * d per block, in float64."""
    k, n = codes.shape
    d = scale_bits.view(np.float16).astype(np.float64)
    return ((codes.astype(np.float64) - offset).reshape(k // BLOCK, BLOCK, n) * d[:, None, :]).reshape(k, n)


def bf16_rounded(values: np.ndarray) -> np.ndarray:
    """The float32 values of the bf16 nearest to each value."""
    return (bf16_bits(values).astype(np.uint32) << 16).view(np.float32)


def dequantized(fmt: str, matrix: np.ndarray) -> np.ndarray:
    """A [K, N] matmul weight as a `fmt` model sees it ("q8_0", "q4_0" or "q4_1"): quantized in
    blocks of 32 along K, then dequantized in float64."""
    if fmt == "q4_1":
        return dequantize_q4_1(*q4_1(matrix))
    quantize, offset = {"q8_0": (q8_0, 0), "q4_0": (q4_0, 8)}[fmt]
    codes, scales = quantize(matrix)
    return dequantize(codes, scales, offset=offset)


# -- Lane layouts --------------------------------------------------------------------------------
# Each uint32 word holds weights of one column (column j = p * width + c of panel p) from the rows
# of K that the activations of one lane come from: the two halves of K (bf16), or rows with stride
# 8 within a block of 32 (q8_0, q4_0); byte i is bits 8 i .. 8 i + 7.


def _panels(words: np.ndarray, width: int) -> np.ndarray:
    """[K / r, N] words -> [N / width, K / r, width]."""
    rows, n = words.shape
    assert n % width == 0
    return np.ascontiguousarray(words.reshape(rows, n // width, width).transpose(1, 0, 2)).astype(np.uint32)


def bf16_lanes(matrix: np.ndarray, width: int = 32) -> np.ndarray:
    """[N/width, K/2, width]: word r = bf16(w[r][j]) | bf16(w[r + K/2][j]) << 16."""
    k, n = matrix.shape
    assert k % 2 == 0
    halves = bf16_bits(matrix).astype(np.uint32).reshape(2, k // 2, n)  # [half of K, row, column]
    return _panels(halves[0] | (halves[1] << 16), width)


def q8_0_lanes(codes: np.ndarray, width: int = 32) -> np.ndarray:
    """[N/width, K/4, width] of int8 codes [K, N]: byte i of word 8 b + q = code of row 32 b + q + 8 i."""
    k, n = codes.shape
    assert codes.dtype == np.int8 and k % BLOCK == 0
    # Row 32 b + 8 i + q of a block is [b, i, q].
    grouped = codes.view(np.uint8).astype(np.uint32).reshape(k // BLOCK, 4, 8, n)
    words = sum(grouped[:, i] << (8 * i) for i in range(4))  # [block, q, column]
    return _panels(words.reshape(k // 4, n), width)


def q4_0_lanes(codes: np.ndarray, width: int = 32) -> np.ndarray:
    """[N/width, K/8, width] of codes in [0, 15] [K, N]: byte i of word 4 b + o = code of row
    32 b + o + 8 i | code of row 32 b + 4 + o + 8 i << 4."""
    k, n = codes.shape
    assert k % BLOCK == 0 and codes.max(initial=0) <= 15
    # Row 32 b + 8 i + 4 h + o of a block is [b, i, h, o] (h: low or high nibble).
    grouped = codes.astype(np.uint32).reshape(k // BLOCK, 4, 2, 4, n)
    bytes_ = grouped[:, :, 0] | (grouped[:, :, 1] << 4)  # [block, i, o, column]
    words = sum(bytes_[:, i] << (8 * i) for i in range(4))  # [block, o, column]
    return _panels(words.reshape(k // 8, n), width)


def scale_panels(scales: np.ndarray, width: int = 32) -> np.ndarray:
    """fp16 scale bits [K/32, N] in their panels [N/width, K/32, width] (unchanged by the lanes)."""
    blocks, n = scales.shape
    return np.ascontiguousarray(scales.reshape(blocks, n // width, width).transpose(1, 0, 2))


def pair_panels(pairs: np.ndarray, width: int = 32) -> np.ndarray:
    """q4_1's scale and min bits [K/32, 2, N] in their panels [N/width, K/32, 2, width]."""
    blocks, two, n = pairs.shape
    return np.ascontiguousarray(pairs.reshape(blocks, two, n // width, width).transpose(2, 0, 1, 3))


# -- Activations ---------------------------------------------------------------------------------
# What a low-precision matmul multiplies its weights with: the dot-product instructions take bf16
# (vdpbf16ps) or int8 (vpdpbusd) activations, made from the f32 input row by row. The references
# take float64 activations, round them to float32 first, then to the format.


def bf16_activations(x: np.ndarray) -> np.ndarray:
    """float32(x) rounded to the nearest bf16 (ties to even), in float64."""
    x32 = np.ascontiguousarray(x, np.float32)
    return (bf16_bits(x32).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def int8_activation_blocks(x: np.ndarray, block: int = BLOCK):
    """(codes int8 [..., K], scales float32 [..., K/block]) of float32(x), per block of `block`
    consecutive elements along the last axis (32; 256 for the K-quants' q4_K x q8_K), in float32
    arithmetic: amax = max |x|, d = amax / 127, id = min(1 / d, FLT_MAX) (0 when d is 0; capped
    where 1 / d overflows, amax < ~3.7e-37), code = clip(rint(x * id), -127, 127), rint rounding
    half to even."""
    x32 = np.asarray(x, np.float32)
    *lead, k = x32.shape
    if k % block != 0:
        raise ValueError(f"K = {k} is not a multiple of the block ({block})")
    blocks = x32.reshape(*lead, k // block, block)
    d = (np.abs(blocks).max(axis=-1) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inverse = np.where(d != 0, np.minimum(np.float32(1) / d, np.finfo(np.float32).max), np.float32(0))
    inverse = inverse.astype(np.float32)
    products = (blocks * inverse[..., None]).astype(np.float32)
    codes = np.clip(np.rint(products), -127, 127).astype(np.int8)
    return codes.reshape(x32.shape), d


def int8_activations(x: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """x as a q8_0 model's matmuls see it (a q4_k or q5_k one's with block=256): code * d of
    int8_activation_blocks, in float64."""
    codes, d = int8_activation_blocks(x, block)
    *lead, k = codes.shape
    blocks = codes.reshape(*lead, k // block, block).astype(np.float64) * d[..., None].astype(np.float64)
    return blocks.reshape(codes.shape)
