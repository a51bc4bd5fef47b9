"""The q5_0 and q5_1 weight formats: a GGUF file's Q5_0 and Q5_1 tensors kept in their own numbers
(each block's fp16 scale, and min, and the 5-bit codes in q5_K's lane words, whose last word is the
block's own qh), 5.5 and 6 bits per weight, and multiplied on the int8 dot-product path as
llama.cpp's q5_0 x q8_0 and q5_1 x q8_1 do. Before, both were converted to q8_0 (8.5 bits per
weight; Q5_1 requantized). The values are checked against gguf.quants' own dequantizer."""

import importlib.util
import os

import gguf
import gpt_kernels_testing
import numpy as np
import pytest

import gpt
from gpt import kept_formats, resources

T = gguf.GGMLQuantizationType
spec = importlib.util.spec_from_file_location("make_gguf", os.path.join("tools", "dev", "make_gguf.py"))
make_gguf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_gguf)

# (format, GGUF type, bytes of a block, 16-bit scale rows per block, bits per weight stored)
FORMATS = [("q5_0", T.Q5_0, 22, 1, 5.5), ("q5_1", T.Q5_1, 24, 2, 6.0)]
SHAPE = make_gguf.Shape(2, 128, 4, 2, 320, 300, 256, 10000.0, True, None)


def random_blocks(qtype, block_bytes: int, halves: int, rows: int, k: int, seed: int) -> np.ndarray:
    """Rows of q5_0/q5_1 blocks: every code and fifth-bit pattern, the fp16 scale (and min) random
    normal times 0.01 with a zero and a subnormal among them."""
    rng = np.random.default_rng(seed)
    count = rows * (k // 32)
    blocks = rng.integers(0, 256, size=(count, block_bytes), dtype=np.uint8)
    for h in range(halves):
        values = (rng.standard_normal(count) * 0.01).astype(np.float16)
        values[:2] = np.array([0.0, 6e-8], np.float16)
        blocks[:, 2 * h : 2 * h + 2] = values.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("fmt,qtype,block_bytes,halves,bits", FORMATS, ids=[f[0] for f in FORMATS])
def test_blocks_are_kept_in_their_own_numbers(fmt, qtype, block_bytes, halves, bits, threads):
    k, n, width = 256, 40, 16
    blocks = random_blocks(qtype, block_bytes, halves, n, k, seed=1)
    lanes, scales = gpt_kernels_testing.repack_rows(fmt, blocks, k, 48, width, threads=threads)
    assert lanes.shape == (3, k * 5 // 32, width) and scales.reshape(3, -1, width).shape == (3, k // 32 * halves, width)
    assert (lanes.nbytes + scales.nbytes) * 8 / (48 * k) == bits
    # Widened, they are gguf's own dequantization of the file's blocks, bit for bit; the padding
    # columns are zeros.
    ours = gpt_kernels_testing.dequantize_lanes(fmt, lanes, scales)
    np.testing.assert_array_equal(ours[:, :n], gguf.quants.dequantize(blocks, qtype).T)
    assert not ours[:, n:].any()
    # Each block's fifth-bit word is its qh as the file holds it.
    qh = blocks.reshape(n, k // 32, block_bytes)[:, :, 2 * halves : 2 * halves + 4].copy().view("<u4")[..., 0]
    np.testing.assert_array_equal(lanes.reshape(3, k // 32, 5, width)[0, :, 4, :], qh[:width].T)


def test_the_lanes_are_q5_k_words_of_the_codes():
    """q4_0's 4 nibble words of the low 4 bits, then a word whose bit j is code j's fifth bit: the
    layout q5_k's sub-blocks have, so that the matmul unpacks both alike."""
    k, width = 128, 16
    codes = np.random.default_rng(5).integers(0, 32, size=(k, width), dtype=np.uint8)
    lanes = gpt_kernels_testing.pack_lanes("q5_0", codes, width)
    nibble_lanes = gpt_kernels_testing.pack_lanes("q4_0", codes & 0x0F, width)
    words = lanes.reshape(k // 32, 5, width)
    np.testing.assert_array_equal(words[:, :4].reshape(-1, width), nibble_lanes.reshape(-1, width))
    fifths = (codes.reshape(k // 32, 32, width) >> 4).astype(np.uint64)
    np.testing.assert_array_equal(
        words[:, 4].astype(np.uint64), (fifths << np.arange(32, dtype=np.uint64)[None, :, None]).sum(axis=1)
    )
    with pytest.raises(ValueError, match="5-bit"):
        gpt_kernels_testing.pack_lanes("q5_1", np.full((k, width), 32, np.uint8), width)


def test_q5_0_blocks_convert_to_q5_1_exactly_and_an_overflowing_min_is_refused():
    blocks = random_blocks(T.Q5_0, 22, 1, 4, 256, seed=3)
    as_q5_1 = gpt_kernels_testing.transcode_rows("q5_0", "q5_1", blocks)
    np.testing.assert_array_equal(gguf.quants.dequantize(as_q5_1, T.Q5_1), gguf.quants.dequantize(blocks, T.Q5_0))
    blocks[1, 22 : 22 + 2] = np.array([5000.0], np.float16).view(np.uint8)  # row 1, block 1: -16 d overflows
    with pytest.raises(ValueError, match=r"a q5_0 block's scale times -16 \(its min in q5_1\) is beyond fp16's range"):
        gpt_kernels_testing.transcode_rows("q5_0", "q5_1", blocks)


@pytest.mark.parametrize("fmt,qtype,block_bytes,halves,bits", FORMATS, ids=[f[0] for f in FORMATS])
def test_a_non_finite_scale_is_refused_naming_the_block(fmt, qtype, block_bytes, halves, bits):
    blocks = random_blocks(qtype, block_bytes, halves, 3, 256, seed=2)
    blocks[2, 3 * block_bytes : 3 * block_bytes + 2] = np.array([np.inf], np.float16).view(np.uint8)
    with pytest.raises(ValueError, match=rf"{fmt} block 3 of row 2 \(values 96 to 127\) has fp16 scale inf"):
        gpt_kernels_testing.repack_rows(fmt, blocks, 256, 16, 16)


@pytest.mark.parametrize("fmt,qtype,block_bytes,halves,bits", FORMATS, ids=[f[0] for f in FORMATS])
def test_the_table_and_the_memory_estimate_count_their_bits(fmt, qtype, block_bytes, halves, bits):
    row = next(r for r in kept_formats.FORMAT_ROWS if r.name == fmt)
    assert (row.block_values, row.block_bytes, row.scale_rows, row.code_bits) == (32, block_bytes, halves, 5)
    assert resources._BYTES_PER_WEIGHT[fmt] * 8 == bits
    cfg = gpt.GPTConfig(n_layer=2, n_head=4, n_embd=256, vocab_size=512, block_size=64)
    ours, q8_0 = (resources.estimate_memory(cfg, f).stored_weights for f in (fmt, "q8_0"))
    assert q8_0 - ours == pytest.approx(2 * 12 * 256 * 256 * (8.5 - bits) / 8)


def test_auto_keeps_q5_0_and_q5_1_tensors_as_themselves():
    assert kept_formats.NEAREST_KEPT["Q5_0"] == "q5_0" and kept_formats.NEAREST_KEPT["Q5_1"] == "q5_1"
    assert kept_formats.group_format(["Q5_0"] * 3, "auto") == "q5_0"
    # A fused weight of Q5_0 and Q5_1 parts: q5_1 takes both (a q5_0 block is a q5_1 block with a
    # min of -16 d).
    assert kept_formats.group_format(["Q5_0", "Q5_0", "Q5_1"], "auto") == "q5_1"
    assert kept_formats.given_format(["Q5_0", "Q5_0", "Q5_1"], "auto") == "q5_1:q5_0,q5_0,q5_1"
    # With a Q8_0 part (llama.cpp's Q6_K fallback), only q8_0 takes them all.
    assert kept_formats.group_format(["Q5_0", "Q5_0", "Q8_0"], "auto") == "q8_0"
    assert kept_formats.given_format(["Q5_1"], "q8_0") == "q8_0:q5_1"


@pytest.fixture(scope="module", params=[f[0] for f in FORMATS])
def q5_file(request, tmp_path_factory):
    fmt = request.param
    path = str(tmp_path_factory.mktemp(fmt) / f"tiny.{fmt}.gguf")
    counts = make_gguf.write(path, SHAPE, fmt, pure=True)
    assert counts.get(fmt.upper()), counts
    return fmt, path


def test_a_q5_file_runs_in_its_own_format_and_matches_its_float_values(q5_file):
    fmt, path = q5_file
    model = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="auto", kv_cache="f32", disk_cache=False))
    assert model.options.weights == fmt
    # The weights it computes with are gguf's dequantization of the file's blocks, exactly.
    reader = gguf.GGUFReader(path)
    files = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}
    state = model.state_dict()
    for i in range(SHAPE.n_layer):
        np.testing.assert_array_equal(state[f"model.layers.{i}.mlp.up_proj.weight"], files[f"blk.{i}.ffn_up.weight"])
        np.testing.assert_array_equal(
            state[f"model.layers.{i}.self_attn.o_proj.weight"], files[f"blk.{i}.attn_output.weight"]
        )
    stored = {name: size for name, _, size in model._compiled.stored_arguments()}
    o_proj = "model.layers.1.self_attn.o_proj.weight"
    bits = dict((f[0], f[4]) for f in FORMATS)[fmt]
    assert (stored[o_proj] + stored[o_proj + ".scales"]) * 8 / (128 * 128) == bits, stored

    # Against the same file in q8_0 (q5_0 converted exactly, q5_1 requantized): activations are
    # quantized per block of 32 in both, and each block's integer sum less its offset is the same
    # integer, so q5_0's logits are q8_0's bit for bit; q5_1's keep the file's weights where q8_0
    # rounds them, and are at least as close to a float32 model of gguf's dequantized weights.
    reference = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="f32", disk_cache=False))
    as_q8_0 = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="q8_0", kv_cache="f32", disk_cache=False))
    assert as_q8_0.options.weights == "q8_0"
    ids = [5, 17, 2, 200, 33, 8, 91, 4]
    ours, q8_0, theirs = model.forward(ids), as_q8_0.forward(ids), reference.forward(ids)
    spread = theirs.std()
    assert np.abs(ours - theirs).max() < 0.25 * spread
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] > 0.999
    if fmt == "q5_0":
        np.testing.assert_array_equal(ours, q8_0)
    else:
        assert np.abs(ours - theirs).max() <= 1.1 * np.abs(q8_0 - theirs).max()

    # A decode step (one-row tiles) gives the prompt's last token the forward's logits, near enough.
    cache = model.new_cache()
    model.prefill(ids[:-1], cache)
    decoded = model.decode(ids[-1], cache)
    assert np.corrcoef(decoded, theirs[-1])[0, 1] > 0.999
    assert np.abs(decoded - ours[-1]).max() < 0.05 * spread


# q5_0 rounds to half a step but clips the weight opposite its block's largest magnitude by up to a
# whole one (code 32 does not exist), as llama.cpp's quantizer does (measured 1.0013 with the fp16
# rounding of d; q4_0 likewise); q5_1 half a step and the fp16 rounding of d and the min (0.514).
@pytest.mark.parametrize("fmt,steps,bound", [("q5_0", 16, 1.01), ("q5_1", 31, 0.52)])
def test_a_float_model_quantizes_itself(fmt, steps, bound):
    cfg = gpt.GPTConfig(n_layer=2, n_head=4, n_embd=128, vocab_size=300, block_size=32)
    floats = gpt.GPT.random(cfg, seed=4, options=gpt.CompileOptions(disk_cache=False))
    model = gpt.GPT.random(cfg, seed=4, options=gpt.CompileOptions(weights=fmt, disk_cache=False))
    name = "transformer.h.0.mlp.c_fc.weight"
    ours, theirs = model.state_dict()[name], floats.state_dict()[name]
    blocks = theirs.reshape(-1, 32, theirs.shape[1])
    # q5_0's step is its block's largest magnitude over 16, q5_1's its range over 31.
    extent = np.abs(blocks).max(axis=1) if fmt == "q5_0" else np.ptp(blocks, axis=1)
    step = (extent / steps).repeat(32, axis=0)
    assert (np.abs(ours - theirs) <= bound * step).all()
    assert not np.array_equal(ours, theirs)
    # A bit more than q4's codes: about half as far from the float weights.
    four_bit = "q4_0" if fmt == "q5_0" else "q4_1"
    as_q4 = gpt.GPT.random(cfg, seed=4, options=gpt.CompileOptions(weights=four_bit, disk_cache=False))
    assert np.abs(ours - theirs).mean() < 0.6 * np.abs(as_q4.state_dict()[name] - theirs).mean()
    ids = [1, 2, 3, 4, 5]
    assert np.corrcoef(model.forward(ids).ravel(), floats.forward(ids).ravel())[0, 1] > 0.99
