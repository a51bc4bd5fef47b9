"""q4_1, llama.cpp's 4-bit format with a min (w = code * d + m per block of 32), kept quantized
from a GGUF file: the load-time quantizer, the lane and scale layouts, the repacking of a file's
blocks, all bit for bit against quant_reference.py (numpy, from the format's definition) and
against gguf's own quantizer and dequantizer. The numerics of q4_1 models are in
test_low_precision.py (GPT-2) and test_llama.py (Qwen2), the Llama-family loader in
test_gguf_llama.py."""

import gguf
import gpt_kernels_testing
import numpy as np
import pytest

import gpt
import quant_reference as ref
from gpt.gguf_file import native_weights_format, save_gguf

T = gguf.GGMLQuantizationType


def weights(rows, cols, seed):
    matrix = (np.random.default_rng(seed).standard_normal((rows, cols)) * 0.02).astype(np.float32)
    matrix[:32, 0] = 0.5  # a constant block: d = 0, every code 0, the min carries the value
    return matrix


@pytest.mark.parametrize("shape", [(32, 1), (64, 96), (768, 48)])
def test_quantizer_matches_reference(shape):
    matrix = weights(*shape, seed=shape[0])
    codes, pairs = gpt_kernels_testing.quantize("q4_1", matrix)
    want_codes, want_pairs = ref.q4_1(matrix)
    assert pairs.shape == (shape[0] // 32, 2, shape[1]) and codes.max() <= 15
    np.testing.assert_array_equal(pairs, want_pairs)
    np.testing.assert_array_equal(codes, want_codes)
    # A constant block: zero scale, its value as the min.
    assert pairs.view(np.float16)[0, 0, 0] == 0 and pairs.view(np.float16)[0, 1, 0] == np.float16(0.5)


def test_quantizer_agrees_with_llamas_reference_quantizer():
    """gguf's Q4_1 (a port of ggml's quantize_row_q4_1_ref) writes the same codes, scales and mins."""
    matrix = weights(128, 40, seed=3)
    codes, pairs = gpt_kernels_testing.quantize("q4_1", matrix)
    blocks = gguf.quants.quantize(np.ascontiguousarray(matrix.T), T.Q4_1).reshape(40, 4, 20)
    np.testing.assert_array_equal(blocks[..., 0:2].copy().view(np.uint16)[..., 0].T, pairs[:, 0])
    np.testing.assert_array_equal(blocks[..., 2:4].copy().view(np.uint16)[..., 0].T, pairs[:, 1])
    nibbles = np.concatenate([blocks[..., 4:] & 15, blocks[..., 4:] >> 4], axis=-1).reshape(40, 128)
    np.testing.assert_array_equal(nibbles.T, codes)


def test_lanes_read_back_the_dequantized_weights_exactly():
    matrix = weights(96, 128, seed=7)
    codes, pairs = gpt_kernels_testing.quantize("q4_1", matrix)
    lanes = gpt_kernels_testing.pack_lanes("q4_1", codes, 32)  # q4_0's lanes
    restored = gpt_kernels_testing.dequantize_lanes("q4_1", lanes, ref.pair_panels(pairs))
    # code * d is exact in float32 (4 + 11 bits), so adding m rounds once, as float64 then float32.
    np.testing.assert_array_equal(restored, ref.dequantize_q4_1(codes, pairs).astype(np.float32))
    # Within half a step (d / 2) plus the fp16 rounding of d and m of the weights.
    blocks = matrix.reshape(3, 32, 128)
    spread = (blocks.max(axis=1) - blocks.min(axis=1)).repeat(32, axis=0)
    assert np.all(np.abs(restored - matrix) <= spread / 15 * 0.5 + 8 * 2.0**-11 * np.abs(matrix).max())


@pytest.mark.parametrize("k, n, padded_n", [(32, 1, 32), (64, 96, 96), (96, 40, 64), (256, 100, 128)])
def test_repacked_blocks_are_the_lanes_of_the_files_codes(k, n, padded_n):
    rows = (np.random.default_rng(k + n).standard_normal((n, k)) * 0.02).astype(np.float32)  # [out, in]
    blocks = gguf.quants.quantize(rows, T.Q4_1)
    codes, pairs = gpt_kernels_testing.quantize("q4_1", np.ascontiguousarray(rows.T))  # the same codes (test above)
    pad = padded_n - n
    codes = np.pad(codes, ((0, 0), (0, pad)))
    pairs = np.pad(pairs, ((0, 0), (0, 0), (0, pad)))
    got_codes, got_pairs = gpt_kernels_testing.repack_rows("q4_1", blocks, k, padded_n, 32)
    np.testing.assert_array_equal(got_codes, ref.q4_0_lanes(codes))
    np.testing.assert_array_equal(got_pairs, ref.pair_panels(pairs))
    if pad:  # padding columns: code 0, zero scale and min
        np.testing.assert_array_equal(got_codes[-1, :, 32 - pad :], 0)
        np.testing.assert_array_equal(got_pairs[-1, :, :, 32 - pad :], 0)
    restored = gpt_kernels_testing.dequantize_lanes("q4_1", got_codes, got_pairs)[:, :n]
    np.testing.assert_array_equal(restored, gguf.quants.dequantize(blocks, T.Q4_1).T)


def test_repacking_refuses_blocks_that_are_not_whole_rows():
    with pytest.raises(ValueError, match="blocks of 20 bytes"):
        gpt_kernels_testing.repack_rows("q4_1", np.zeros(30, np.uint8), 32, 32, 32)


def test_a_q4_1_gguf_is_computed_with_the_files_values(tmp_path):
    """A GPT-2 file written in q4_1 and loaded in q4_1: its matmul weights are the file's blocks
    (state_dict reads back what gguf dequantizes), and its logits are those of the same model
    made from the file's float32 values."""
    cfg = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=96, block_size=32)
    model = gpt.GPT.random(cfg, seed=5, options=gpt.CompileOptions(disk_cache=False))
    path = tmp_path / "model-q4_1.gguf"
    save_gguf(model, None, path, "q4_1")
    reader = gguf.GGUFReader(path)
    assert {t.tensor_type for t in reader.tensors if t.name.endswith("attn_qkv.weight")} == {T.Q4_1}
    options = gpt.CompileOptions(weights="q4_1", disk_cache=False)
    direct = gpt.GPT.from_gguf(str(path), options)
    floats = gpt.GPT.from_gguf(str(path))
    for name, value in direct.state_dict().items():
        if name.endswith(".weight") and value.ndim == 2 and name != "transformer.wte.weight" and "wpe" not in name:
            np.testing.assert_array_equal(value, floats.state_dict()[name], err_msg=name)
    detour = gpt.GPT.from_weights(cfg, floats.state_dict(), options)
    ids = list(range(1, 20))
    np.testing.assert_array_equal(direct.forward(ids), detour.forward(ids))


def test_the_cli_runs_a_gguf_file_in_its_own_format(tmp_path):
    """`python -m gpt ... --model FILE --weights auto` runs a file in its own format, as llama.cpp
    runs a file as shipped: a 4-bit file stays 4-bit instead of being widened to float32."""
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=96, block_size=32)
    model = gpt.GPT.random(cfg, seed=1, options=gpt.CompileOptions(disk_cache=False))
    for fmt, runs_in in (("q4_1", "q4_1"), ("q4_0", "q4_0"), ("q8_0", "q8_0"), ("bf16", "bf16"), ("f16", "f32")):
        path = tmp_path / f"m-{fmt}.gguf"
        save_gguf(model, None, path, fmt)
        assert native_weights_format(path) == runs_in, fmt
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + bytes(40))
    assert native_weights_format(garbage) == "f32"  # loading it raises the error that names the problem


def test_a_nan_min_in_a_kept_block_is_refused_by_name(tmp_path):
    """A kept Q4_1 block's min multiplies every activation sum of its block: one NaN would make
    every logit NaN, so loading names the tensor, the block and the field instead."""
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=96, block_size=32)
    path = tmp_path / "nan-min.gguf"
    save_gguf(gpt.GPT.random(cfg, seed=2), None, path, "q4_1")
    tensor = next(t for t in gguf.GGUFReader(path).tensors if t.name == "blk.0.ffn_down.weight")
    data = bytearray(path.read_bytes())
    at = int(tensor.data_offset) + 3 * 20 + 2  # block 3 of row 0, its min (after the fp16 scale)
    data[at : at + 2] = np.array([np.nan], np.float16).tobytes()
    path.write_bytes(bytes(data))
    with pytest.raises(
        gpt.ModelFileError, match=r"blk\.0\.ffn_down\.weight \(Q4_1\): block 3 of row 0 .* has fp16 min nan"
    ):
        gpt.GPT.from_gguf(str(path), gpt.CompileOptions(weights="q4_1", disk_cache=False))
