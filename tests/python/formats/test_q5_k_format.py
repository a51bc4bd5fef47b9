"""The q5_k weight format: a GGUF file's Q5_K tensors kept in their own numbers (each super-block's
fp16 d and dmin, each sub-block's 6-bit scale and min, the 5-bit codes), 5.625 bits per weight, and
multiplied on the int8 dot-product path with q4_k's scale products, as llama.cpp's q5_K x q8_K does.
Before, a Q5_K tensor was widened and requantized to q8_0 (8.5 bits per weight). The values are
checked against gguf.quants' own dequantizer."""

import importlib.util
import os

import gguf
import gpt_kernels_testing
import numpy as np
import pytest

import gpt
import gpt.gguf_file
from gpt import kept_formats, resources

T = gguf.GGMLQuantizationType
spec = importlib.util.spec_from_file_location("make_gguf", os.path.join("tools", "dev", "make_gguf.py"))
make_gguf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_gguf)

# Rows that tile the 256-weight super-blocks; 8 layers so that some get Q6_K's extra bits.
SHAPE = make_gguf.Shape(8, 256, 4, 2, 512, 320, 256, 10000.0, True, None)
Q5_K_BYTES = 176


def random_q5_k_blocks(rows: int, k: int, seed: int) -> np.ndarray:
    """Rows of Q5_K super-blocks: every code, fifth-bit and 6-bit scale bit pattern, d and dmin
    random normal times 0.01 (a zero and a subnormal among them)."""
    rng = np.random.default_rng(seed)
    count = rows * (k // 256)
    blocks = rng.integers(0, 256, size=(count, Q5_K_BYTES), dtype=np.uint8)
    for offset in (0, 2):
        halves = (rng.standard_normal(count) * 0.01).astype(np.float16)
        halves[:2] = np.array([0.0, 6e-8], np.float16)
        blocks[:, offset : offset + 2] = halves.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


@pytest.mark.parametrize("threads", [1, 3])
def test_q5_k_blocks_are_kept_in_their_own_numbers(threads):
    k, n, width = 512, 40, 16
    blocks = random_q5_k_blocks(n, k, seed=1)
    lanes, scales = gpt_kernels_testing.repack_rows("q5_k", blocks, k, 48, width, threads=threads)
    # 5 bits of code and 10 16-bit scale values per 256 weights: 5.625 bits (q8_0: 8.5).
    assert lanes.shape == (3, k * 5 // 32, width) and scales.shape == (3, k // 32 + k // 128, width)
    assert (lanes.nbytes + scales.nbytes) * 8 / (48 * k) == 5.625
    # Widened, they are gguf's own dequantization of the file's blocks, bit for bit (the q8_0
    # requantization was not); the padding columns are zeros.
    ours = gpt_kernels_testing.dequantize_lanes("q5_k", lanes, scales)
    np.testing.assert_array_equal(ours[:, :n], gguf.quants.dequantize(blocks, T.Q5_K).T)
    assert not ours[:, n:].any()
    q8_0 = gguf.quants.dequantize(gpt_kernels_testing.transcode_rows("q5_k", "q8_0", blocks), T.Q8_0)
    assert np.abs(q8_0 - gguf.quants.dequantize(blocks, T.Q5_K)).max() > 0


def test_the_fifth_bits_sit_in_one_word_per_sub_block_in_row_order():
    """Lane words of a sub-block: q4_0's 4 nibble words of the low 4 bits, then a word whose bit j
    is code j's fifth bit (what the matmul's shifts read)."""
    k, width = 256, 16
    rng = np.random.default_rng(5)
    codes = rng.integers(0, 32, size=(k, width), dtype=np.uint8)
    lanes = gpt_kernels_testing.pack_lanes("q5_k", codes, width)
    nibble_lanes = gpt_kernels_testing.pack_lanes("q4_0", codes & 0x0F, width)
    words = lanes.reshape(k // 32, 5, width)
    np.testing.assert_array_equal(words[:, :4].reshape(-1, width), nibble_lanes.reshape(-1, width))
    fifths = (codes.reshape(k // 32, 32, width) >> 4).astype(np.uint64)
    expected = (fifths << np.arange(32, dtype=np.uint64)[None, :, None]).sum(axis=1)
    np.testing.assert_array_equal(words[:, 4].astype(np.uint64), expected)
    with pytest.raises(ValueError, match="5-bit"):
        gpt_kernels_testing.pack_lanes("q5_k", np.full((k, width), 32, np.uint8), width)


def test_a_non_finite_d_is_refused_naming_the_block():
    blocks = random_q5_k_blocks(3, 512, seed=2)
    blocks[2, Q5_K_BYTES + 2 : Q5_K_BYTES + 4] = np.array([np.inf], np.float16).view(np.uint8)  # row 2, block 1's dmin
    with pytest.raises(ValueError, match=r"q5_k block 1 of row 2 \(values 256 to 511\) has fp16 min inf"):
        gpt_kernels_testing.repack_rows("q5_k", blocks, 512, 16, 16)


def test_the_table_and_the_memory_estimate_count_5_625_bits():
    row = next(r for r in kept_formats.FORMAT_ROWS if r.name == "q5_k")
    assert (row.block_values, row.block_bytes, row.scale_rows, row.code_bits) == (256, Q5_K_BYTES, 10, 5)
    assert resources._BYTES_PER_WEIGHT["q5_k"] * 8 == 5.625
    cfg = gpt.GPTConfig(n_layer=2, n_head=4, n_embd=256, vocab_size=512, block_size=64)
    q5_k, q8_0 = (resources.estimate_memory(cfg, fmt).stored_weights for fmt in ("q5_k", "q8_0"))
    matmul = 2 * 12 * 256 * 256
    assert q8_0 - q5_k == pytest.approx(matmul * (8.5 - 5.625) / 8)


def test_auto_keeps_q5_k_tensors_as_q5_k():
    assert kept_formats.NEAREST_KEPT["Q5_K"] == "q5_k"
    assert kept_formats.group_format(["Q5_K", "Q5_K", "Q5_K"], "auto") == "q5_k"
    # A fused q/k/v with a Q6_K v: no kept format but q8_0 takes both.
    assert kept_formats.group_format(["Q5_K", "Q5_K", "Q6_K"], "auto") == "q8_0"
    assert kept_formats.given_format(["Q5_K"], "auto") == "q5_k"
    assert kept_formats.given_format(["Q5_K"], "q8_0") == "q8_0:q5_k"


@pytest.fixture(scope="module")
def q5_k_m_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("q5_k") / "tiny.q5_k_m.gguf")
    counts = make_gguf.write(path, SHAPE, "q5_k_m")
    assert counts.get("Q5_K") and counts.get("Q6_K"), counts
    return path


def test_a_q5_k_m_file_runs_in_q5_k_and_matches_its_float_values(q5_k_m_file):
    # An f32 cache, so that a decode step's logits can be held to the forward's below.
    model = gpt.GPT.from_gguf(q5_k_m_file, gpt.CompileOptions(weights="auto", kv_cache="f32", disk_cache=False))
    assert model.options.weights == "q5_k"
    assert set(dict(model.options.weight_formats).values()) == {"q6_k"} and model.config.separate_v_proj
    # The weights it computes with are gguf's dequantization of the file's Q5_K blocks, exactly.
    reader = gguf.GGUFReader(q5_k_m_file)
    files = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}
    state = model.state_dict()
    for i in (1, 2):
        np.testing.assert_array_equal(state[f"model.layers.{i}.mlp.up_proj.weight"], files[f"blk.{i}.ffn_up.weight"])
        np.testing.assert_array_equal(
            state[f"model.layers.{i}.self_attn.o_proj.weight"], files[f"blk.{i}.attn_output.weight"]
        )
    # It stores 5.625 bits per q5_k weight: lanes and scales of layer 1's output projection.
    stored = {name: size for name, _, size in model._compiled.stored_arguments()}
    o_proj = "model.layers.1.self_attn.o_proj.weight"
    assert (stored[o_proj] + stored[o_proj + ".scales"]) * 8 / (256 * 256) == 5.625, stored

    # Logits against a float32 model of gguf's dequantized weights: only the activations are
    # quantized, per super-block of 256 as llama.cpp's q8_K (test_low_precision checks that
    # product on its own), so they are within 1.5x the distance of the same file with its Q5_K
    # tensors requantized to q8_0, whose activations are quantized per block of 32.
    reference = gpt.GPT.from_gguf(q5_k_m_file, gpt.CompileOptions(weights="f32", disk_cache=False))
    as_q8_0 = gpt.GPT.from_gguf(
        q5_k_m_file,
        gpt.CompileOptions(weights="q8_0", weight_formats=dict(model.options.weight_formats), disk_cache=False),
    )
    assert as_q8_0.options.weights == "q8_0"
    ids = [5, 17, 2, 200, 33, 8, 91, 4]
    ours, q8_0, theirs = model.forward(ids), as_q8_0.forward(ids), reference.forward(ids)
    spread = theirs.std()
    assert np.abs(ours - theirs).max() < 0.25 * spread
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] > 0.999
    assert np.abs(ours - theirs).max() <= 1.5 * np.abs(q8_0 - theirs).max()

    # A decode step multiplies one row at a time (its own register tiles): its logits for the prompt's
    # last token are as close to the reference, and near the forward's (an activation code one step
    # apart, from another order of float sums upstream, moves them by about 1% of their spread).
    cache = model.new_cache()
    model.prefill(ids[:-1], cache)
    decoded = model.decode(ids[-1], cache)
    assert np.abs(decoded - theirs[-1]).max() < 0.25 * spread
    assert np.corrcoef(decoded, theirs[-1])[0, 1] > 0.999
    assert np.abs(decoded - ours[-1]).max() < 0.05 * spread


def test_a_non_finite_d_in_a_file_is_a_model_file_error_naming_the_weight(tmp_path):
    path = tmp_path / "nan.q5_k_m.gguf"
    make_gguf.write(str(path), make_gguf.dataclasses.replace(SHAPE, n_layer=1), "q5_k_m")
    tensor = next(t for t in gguf.GGUFReader(path).tensors if t.name == "blk.0.ffn_up.weight")
    assert tensor.tensor_type == T.Q5_K
    data = bytearray(path.read_bytes())
    at = int(tensor.data_offset) + 7 * Q5_K_BYTES  # row 7's only super-block's fp16 d
    data[at : at + 2] = (0x7E00).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(gpt.ModelFileError) as raised:
        gpt.GPT.from_gguf(str(path), gpt.CompileOptions(weights="auto", disk_cache=False))
    assert str(raised.value) == (
        f"{path}: model.layers.0.mlp.gate_up_proj.weight: q5_k block 0 of row 7 of part 1 (values 0 to 255) has fp16 "
        "scale nan; q5_k scales must be finite"
    )


def test_a_float_model_quantizes_itself_to_q5_k():
    cfg = gpt.GPTConfig(n_layer=2, n_head=4, n_embd=256, vocab_size=300, block_size=32)
    floats = gpt.GPT.random(cfg, seed=4, options=gpt.CompileOptions(disk_cache=False))
    model = gpt.GPT.random(cfg, seed=4, options=gpt.CompileOptions(weights="q5_k", disk_cache=False))
    name = "transformer.h.0.mlp.c_fc.weight"
    ours, theirs = model.state_dict()[name], floats.state_dict()[name]
    # Each weight is within about half a step ((hi - lo) / 31 of its sub-block of 32 along K) of the
    # float one, the 6-bit rounding of the sub-block scales included (measured 0.521 of a step).
    step = (np.ptp(theirs.reshape(-1, 32, theirs.shape[1]), axis=1) / 31).repeat(32, axis=0)
    assert (np.abs(ours - theirs) <= 0.55 * step).all()
    assert not np.array_equal(ours, theirs)
    # Twice q4_k's codes: its weights are about half as far from the float ones (measured 0.51).
    as_q4_k = gpt.GPT.random(cfg, seed=4, options=gpt.CompileOptions(weights="q4_k", disk_cache=False))
    assert np.abs(ours - theirs).mean() < 0.6 * np.abs(as_q4_k.state_dict()[name] - theirs).mean()
    ids = [1, 2, 3, 4, 5]
    a, b = model.forward(ids), floats.forward(ids)
    assert np.corrcoef(a.ravel(), b.ravel())[0, 1] > 0.99
    with pytest.raises(ValueError, match="multiple of 256"):
        gpt.GPT.random(
            gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=96, block_size=16),
            options=gpt.CompileOptions(weights="q5_k", disk_cache=False),
        )


def test_save_gguf_refuses_q5_k_by_name(tmp_path):
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=256, vocab_size=96, block_size=16)
    model = gpt.GPT.random(cfg, options=gpt.CompileOptions(disk_cache=False))
    with pytest.raises(ValueError, match="save_gguf cannot write format 'q5_k': gguf's Python quantizer has no Q5_K"):
        gpt.gguf_file.save_gguf(model, None, str(tmp_path / "m.gguf"), format="q5_k")
    assert not (tmp_path / "m.gguf").exists()
