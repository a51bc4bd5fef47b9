"""The q4_k weight format: a GGUF file's Q4_K tensors kept in their own numbers (each super-block's
fp16 d and dmin, each sub-block's 6-bit scale and min, the codes), 4.625 bits per weight, and
multiplied on the int8 dot-product path with the scale products in f32, as llama.cpp's q4_K x q8_K
does. Before, a Q4_K tensor was repacked as q4_1 (5 bits per weight, each d * scale rounded to
fp16). The values are checked against gguf.quants' own dequantizer."""

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

# Rows that tile Q4_K's 256-weight super-blocks; 8 layers so that some get Q6_K's extra bits.
SHAPE = make_gguf.Shape(8, 256, 4, 2, 512, 320, 256, 10000.0, True, None)


def random_q4_k_blocks(rows: int, k: int, seed: int) -> np.ndarray:
    """Rows of Q4_K super-blocks: every code and 6-bit scale bit pattern, d and dmin random normal
    times 0.01 (a zero and a subnormal among them)."""
    rng = np.random.default_rng(seed)
    count = rows * (k // 256)
    blocks = rng.integers(0, 256, size=(count, 144), dtype=np.uint8)
    for offset in (0, 2):
        halves = (rng.standard_normal(count) * 0.01).astype(np.float16)
        halves[:2] = np.array([0.0, 6e-8], np.float16)
        blocks[:, offset : offset + 2] = halves.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


@pytest.mark.parametrize("threads", [1, 3])
def test_q4_k_blocks_are_kept_in_their_own_numbers(threads):
    k, n, width = 512, 40, 16
    blocks = random_q4_k_blocks(n, k, seed=1)
    lanes, scales = gpt_kernels_testing.repack_rows("q4_k", blocks, k, 48, width, threads=threads)
    # 4 bits of code and 10 16-bit scale values per 256 weights: 4.625 bits (q4_1: 5).
    assert lanes.shape == (3, k // 8, width) and scales.shape == (3, k // 32 + k // 128, width)
    assert (lanes.nbytes + scales.nbytes) * 8 / (48 * k) == 4.625
    # Widened, they are gguf's own dequantization of the file's blocks, bit for bit (the q4_1
    # repacking rounded each d * scale to fp16); the padding columns are zeros.
    ours = gpt_kernels_testing.dequantize_lanes("q4_k", lanes, scales)
    np.testing.assert_array_equal(ours[:, :n], gguf.quants.dequantize(blocks, T.Q4_K).T)
    assert not ours[:, n:].any()
    q4_1 = gguf.quants.dequantize(gpt_kernels_testing.transcode_rows("q4_k", "q4_1", blocks), T.Q4_1)
    assert np.abs(q4_1 - gguf.quants.dequantize(blocks, T.Q4_K)).max() > 0


def test_a_non_finite_d_is_refused_naming_the_block():
    blocks = random_q4_k_blocks(3, 512, seed=2)
    blocks[2, 144 + 2 : 144 + 4] = np.array([np.inf], np.float16).view(np.uint8)  # row 2, super-block 1's dmin
    with pytest.raises(ValueError, match=r"q4_k block 1 of row 2 \(values 256 to 511\) has fp16 min inf"):
        gpt_kernels_testing.repack_rows("q4_k", blocks, 512, 16, 16)


def test_the_table_and_the_memory_estimate_count_4_625_bits():
    row = next(r for r in kept_formats.FORMAT_ROWS if r.name == "q4_k")
    assert (row.block_values, row.block_bytes, row.scale_rows) == (256, 144, 10)
    assert resources._BYTES_PER_WEIGHT["q4_k"] * 8 == 4.625
    assert resources._BYTES_PER_WEIGHT["q4_1"] * 8 == 5.0
    cfg = gpt.GPTConfig(n_layer=2, n_head=4, n_embd=256, vocab_size=512, block_size=64)
    q4_k, q4_1 = (resources.estimate_memory(cfg, fmt).stored_weights for fmt in ("q4_k", "q4_1"))
    matmul = 2 * 12 * 256 * 256
    assert q4_1 - q4_k == pytest.approx(matmul * 0.375 / 8)


def test_auto_keeps_q4_k_tensors_as_q4_k():
    assert kept_formats.NEAREST_KEPT["Q4_K"] == "q4_k"
    assert kept_formats.group_format(["Q4_K", "Q4_K", "Q4_K"], "auto") == "q4_k"
    assert kept_formats.group_format(["Q4_K", "Q4_K", "Q6_K"], "auto") == "q8_0"
    # A q4_0 part converts to q4_1, not to q4_k: the fused weight is q4_1.
    assert kept_formats.group_format(["Q4_0", "Q4_K"], "auto") == "q4_1"
    assert kept_formats.given_format(["Q4_K"], "auto") == "q4_k"
    assert kept_formats.given_format(["Q4_K"], "q4_1") == "q4_1:q4_k"


@pytest.fixture(scope="module")
def q4_k_m_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("q4_k") / "tiny.q4_k_m.gguf")
    counts = make_gguf.write(path, SHAPE, "q4_k_m")
    assert counts.get("Q4_K") and counts.get("Q6_K"), counts
    return path


def test_a_q4_k_m_file_runs_in_q4_k_and_matches_its_float_values(q4_k_m_file):
    model = gpt.GPT.from_gguf(q4_k_m_file, gpt.CompileOptions(weights="auto", disk_cache=False))
    assert model.options.weights == "q4_k"
    # The Q6_K layers' v and down projections and the head: v is a matmul of its own, so no weight
    # is widened to q8_0 for sharing a fused matmul with Q4_K q and k.
    assert set(dict(model.options.weight_formats).values()) == {"q6_k"} and model.config.separate_v_proj
    # The weights it computes with are gguf's dequantization of the file's Q4_K blocks, exactly.
    reader = gguf.GGUFReader(q4_k_m_file)
    files = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}
    state = model.state_dict()
    for i in (1, 2):
        np.testing.assert_array_equal(state[f"model.layers.{i}.mlp.up_proj.weight"], files[f"blk.{i}.ffn_up.weight"])
        np.testing.assert_array_equal(
            state[f"model.layers.{i}.mlp.down_proj.weight"], files[f"blk.{i}.ffn_down.weight"]
        )
    # It stores 4.625 bits per q4_k weight: lanes and scales of layer 1's output projection.
    stored = {name: size for name, _, size in model._compiled.stored_arguments()}
    o_proj = "model.layers.1.self_attn.o_proj.weight"
    assert (stored[o_proj] + stored[o_proj + ".scales"]) * 8 / (256 * 256) == 4.625, stored

    # Logits against a float32 model of gguf's dequantized weights, at the q4_1 path's tolerance
    # (test_kquant_formats); the scale products are exact here, so the q4_k logits are no farther
    # from the reference than the q4_1 model's of the same file.
    reference = gpt.GPT.from_gguf(q4_k_m_file, gpt.CompileOptions(weights="f32", disk_cache=False))
    for name, value in reference.state_dict().items():
        gguf_name = {
            "model.layers.1.mlp.up_proj.weight": "blk.1.ffn_up.weight",
            "model.layers.2.mlp.gate_proj.weight": "blk.2.ffn_gate.weight",
        }.get(name)
        if gguf_name:
            np.testing.assert_array_equal(value, files[gguf_name])
    as_q4_1 = gpt.GPT.from_gguf(
        q4_k_m_file,
        gpt.CompileOptions(weights="q4_1", weight_formats=dict(model.options.weight_formats), disk_cache=False),
    )
    assert as_q4_1.options.weights == "q4_1"
    ids = [5, 17, 2, 200, 33, 8, 91, 4]
    ours, q4_1, theirs = model.forward(ids), as_q4_1.forward(ids), reference.forward(ids)
    spread = theirs.std()
    assert np.abs(ours - theirs).max() < 0.25 * spread
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] > 0.999
    assert np.abs(ours - theirs).max() <= 1.1 * np.abs(q4_1 - theirs).max()


def q4_k_m_file_with_a_nan_d(tmp_path, tensor_name: str, row: int):
    """A one-layer Q4_K_M file whose Q4_K tensor `tensor_name` has a NaN d in the file's row `row`
    (its only super-block: the shape's rows are 256 wide)."""
    path = tmp_path / "nan.q4_k_m.gguf"
    make_gguf.write(str(path), make_gguf.dataclasses.replace(SHAPE, n_layer=1), "q4_k_m")
    tensor = next(t for t in gguf.GGUFReader(path).tensors if t.name == tensor_name)
    assert tensor.tensor_type == T.Q4_K
    data = bytearray(path.read_bytes())
    at = int(tensor.data_offset) + row * 144  # the super-block's fp16 d
    data[at : at + 2] = (0x7E00).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    return path


def test_a_non_finite_d_in_a_file_is_a_model_file_error_naming_the_weight(tmp_path):
    path = q4_k_m_file_with_a_nan_d(tmp_path, "blk.0.ffn_up.weight", row=7)
    with pytest.raises(gpt.ModelFileError) as raised:
        gpt.GPT.from_gguf(str(path), gpt.CompileOptions(weights="auto", disk_cache=False))
    assert str(raised.value) == (
        f"{path}: model.layers.0.mlp.gate_up_proj.weight: q4_k block 0 of row 7 of part 1 (values 0 to 255) has fp16 "
        "scale nan; "
        "q4_k scales must be finite"
    )


def test_a_non_finite_d_in_a_q_weight_names_the_files_row_not_the_models(tmp_path):
    # llama.cpp permuted the q rows within each head (the model's row 32 of a 64-row head is the
    # file's row 1); the repack reads them in the model's order, and the error points into the file.
    path = q4_k_m_file_with_a_nan_d(tmp_path, "blk.0.attn_q.weight", row=1)
    with pytest.raises(gpt.ModelFileError) as raised:
        gpt.GPT.from_gguf(str(path), gpt.CompileOptions(weights="auto", disk_cache=False))
    assert "q4_k block 0 of row 1 of part 0 (values 0 to 255) has fp16 scale nan" in str(raised.value)


def test_a_float_model_quantizes_itself_to_q4_k():
    cfg = gpt.GPTConfig(n_layer=2, n_head=4, n_embd=256, vocab_size=300, block_size=32)
    floats = gpt.GPT.random(cfg, seed=4, options=gpt.CompileOptions(disk_cache=False))
    model = gpt.GPT.random(cfg, seed=4, options=gpt.CompileOptions(weights="q4_k", disk_cache=False))
    name = "transformer.h.0.mlp.c_fc.weight"
    ours, theirs = model.state_dict()[name], floats.state_dict()[name]
    # Each weight is within about half a step ((hi - lo) / 15 of its sub-block of 32 along K) of
    # the float one, as q4_1's are (measured 0.507 of a step, q4_1 0.508), the 6-bit rounding of
    # the sub-block scales included.
    step = (np.ptp(theirs.reshape(-1, 32, theirs.shape[1]), axis=1) / 15).repeat(32, axis=0)
    assert (np.abs(ours - theirs) <= 0.6 * step).all()
    assert not np.array_equal(ours, theirs)
    # The logits follow the float model's as closely as a q4_1 model's (measured 0.988 and 0.990).
    ids = [1, 2, 3, 4, 5]
    a, b = model.forward(ids), floats.forward(ids)
    assert np.corrcoef(a.ravel(), b.ravel())[0, 1] > 0.98
    with pytest.raises(ValueError, match="multiple of 256"):
        gpt.GPT.random(
            gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=96, block_size=16),
            options=gpt.CompileOptions(weights="q4_k", disk_cache=False),
        )


def test_save_gguf_refuses_q4_k_by_name(tmp_path):
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=256, vocab_size=96, block_size=16)
    model = gpt.GPT.random(cfg, options=gpt.CompileOptions(disk_cache=False))
    with pytest.raises(ValueError, match="save_gguf cannot write format 'q4_k': gguf's Python quantizer has no Q4_K"):
        gpt.gguf_file.save_gguf(model, None, str(tmp_path / "m.gguf"), format="q4_k")
    assert not (tmp_path / "m.gguf").exists()
