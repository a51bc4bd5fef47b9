"""The q6_k weight format: a GGUF file's Q6_K tensors kept in their own numbers (each super-block's
fp16 d, each run of 16 weights' int8 scale, the 6-bit codes), 6.5625 bits per weight, and
multiplied on the int8 dot-product path, each run's i32 sum weighed by its scale, as llama.cpp's
q6_K x q8_K does. Before, a Q6_K tensor was widened and requantized to q8_0 (8.5 bits per weight).
The values are checked against gguf.quants' own dequantizer."""

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
Q6_K_BYTES = 210


def random_q6_k_blocks(rows: int, k: int, seed: int) -> np.ndarray:
    """Rows of Q6_K super-blocks: every code bit pattern and int8 scale (-128 included), d random
    normal times 0.01 (a zero and a subnormal among them)."""
    rng = np.random.default_rng(seed)
    count = rows * (k // 256)
    blocks = rng.integers(0, 256, size=(count, Q6_K_BYTES), dtype=np.uint8)
    blocks[0, 192] = 0x80  # a scale of -128
    d = (rng.standard_normal(count) * 0.01).astype(np.float16)
    d[:2] = np.array([0.0, 6e-8], np.float16)
    blocks[:, 208:210] = d.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


@pytest.mark.parametrize("threads", [1, 3])
def test_q6_k_blocks_are_kept_in_their_own_numbers(threads):
    k, n, width = 512, 40, 16
    blocks = random_q6_k_blocks(n, k, seed=1)
    lanes, scales = gpt_kernels_testing.repack_rows("q6_k", blocks, k, 48, width, threads=threads)
    # 6 bits of code and 9 16-bit scale values per 256 weights: 6.5625 bits, the file's (q8_0: 8.5).
    assert lanes.shape == (3, k * 3 // 16, width) and scales.shape == (3, k // 32 + k // 256, width)
    assert (lanes.nbytes + scales.nbytes) * 8 / (48 * k) == 6.5625
    # Widened, they are gguf's own dequantization of the file's blocks, bit for bit (the q8_0
    # requantization was not); the padding columns are zeros.
    ours = gpt_kernels_testing.dequantize_lanes("q6_k", lanes, scales)
    np.testing.assert_array_equal(ours[:, :n], gguf.quants.dequantize(blocks, T.Q6_K).T)
    assert not ours[:, n:].any()
    q8_0 = gguf.quants.dequantize(gpt_kernels_testing.transcode_rows("q6_k", "q8_0", blocks), T.Q8_0)
    assert np.abs(q8_0 - gguf.quants.dequantize(blocks, T.Q6_K)).max() > 0


def test_the_token_lookup_reads_a_q6_k_table_as_gguf_dequantizes_it():
    """transformer.packed_embedding q6_k (a tied model's Q6_K table, kept): each gathered row is
    gguf's dequantization of the file's row, bit for bit, padding ids clamped as the q8_0 lookup's."""
    d, vocab, width = 512, 40, 16
    blocks = random_q6_k_blocks(vocab, d, seed=3)
    lanes, scales = gpt_kernels_testing.repack_rows("q6_k", blocks, d, 48, width)
    ids = np.array([0, 39, 7, 7, 21, 47, 100], np.int64)  # 47: a padding column; 100 clamps to 47
    # The scale bits go in as i32 (a function takes no 16-bit argument) and become their f16 here.
    shape = "x".join(map(str, scales.shape))
    ir = f"""
    #id = affine_map<(a, b, c) -> (a, b, c)>
    func.func @lookup(%c: tensor<{lanes.shape[0]}x{lanes.shape[1]}x{width}xi32>, %bits: tensor<{shape}xi32>,
                      %ids: tensor<{len(ids)}xi64>) -> tensor<{len(ids)}x{d}xf32> {{
      %empty = tensor.empty() : tensor<{shape}xf16>
      %s = linalg.generic {{indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}}
          ins(%bits : tensor<{shape}xi32>) outs(%empty : tensor<{shape}xf16>) {{
      ^bb0(%x: i32, %unused: f16):
        %narrow = arith.trunci %x : i32 to i16
        %half = arith.bitcast %narrow : i16 to f16
        linalg.yield %half : f16
      }} -> tensor<{shape}xf16>
      %0 = transformer.packed_embedding q6_k %c, %s, %ids
          : (tensor<{lanes.shape[0]}x{lanes.shape[1]}x{width}xi32>, tensor<{shape}xf16>, tensor<{len(ids)}xi64>)
          -> tensor<{len(ids)}x{d}xf32>
      return %0 : tensor<{len(ids)}x{d}xf32>
    }}"""
    lookup = gpt._gpt.CompiledFunction(ir, "lookup", "default", 1, "", 0, "host")
    rows = np.empty((len(ids), d), np.float32)
    lookup.call([lanes.view(np.int32), scales.astype(np.int32), ids], [rows])
    table = gguf.quants.dequantize(blocks, T.Q6_K)
    np.testing.assert_array_equal(rows[:5], table[ids[:5]])
    assert not rows[5:].any()  # the padding columns' zeros


def test_a_float_matrix_quantizes_to_q6_k_within_half_a_step():
    matrix = np.random.default_rng(3).standard_normal((512, 24)).astype(np.float32)
    codes, scales = gpt_kernels_testing.quantize("q6_k", matrix)
    assert codes.shape == (512, 24) and scales.shape == (512 // 32 + 512 // 256, 24) and codes.max() <= 63
    pairs = scales[:16].astype(np.uint16)
    run_scales = np.stack([(pairs & 0xFF).astype(np.uint8), (pairs >> 8).astype(np.uint8)], axis=1).view(np.int8)
    d = scales[16:].view(np.float16).astype(np.float32)
    step = d.repeat(16, axis=0) * run_scales.reshape(32, 24).astype(np.float32)
    values = step.repeat(16, axis=0) * (codes.astype(np.float32) - 32)
    # Each run's step is its max |w| / 31.5 rounded to a multiple of d (at most d / 2 off).
    assert (np.abs(values - matrix) <= 0.5001 * step.repeat(16, axis=0)).all()


def test_a_non_finite_d_is_refused_naming_the_block():
    blocks = random_q6_k_blocks(3, 512, seed=2)
    blocks[2, Q6_K_BYTES + 208 : Q6_K_BYTES + 210] = np.array([np.inf], np.float16).view(np.uint8)  # row 2, block 1
    with pytest.raises(ValueError, match=r"q6_k block 1 of row 2 \(values 256 to 511\) has fp16 scale inf"):
        gpt_kernels_testing.repack_rows("q6_k", blocks, 512, 16, 16)


def test_the_table_and_the_memory_estimate_count_6_5625_bits():
    row = next(r for r in kept_formats.FORMAT_ROWS if r.name == "q6_k")
    assert (row.block_values, row.block_bytes, row.scale_rows, row.code_bits) == (256, 210, 9, 6)
    assert resources._BYTES_PER_WEIGHT["q6_k"] * 8 == 6.5625
    assert resources._BYTES_PER_WEIGHT["q8_0"] * 8 == 8.5
    cfg = gpt.GPTConfig(n_layer=2, n_head=4, n_embd=256, vocab_size=512, block_size=64)
    q6_k, q8_0 = (resources.estimate_memory(cfg, fmt).stored_weights for fmt in ("q6_k", "q8_0"))
    matmul = 2 * 12 * 256 * 256
    assert q8_0 - q6_k == pytest.approx(matmul * (8.5 - 6.5625) / 8)


def test_auto_keeps_q6_k_tensors_as_q6_k():
    assert kept_formats.NEAREST_KEPT["Q6_K"] == "q6_k"
    assert kept_formats.group_format(["Q6_K"], "auto") == "q6_k"
    # A Q6_K v beside Q4_K q and k: no format holds both as they are but q8_0.
    assert kept_formats.group_format(["Q4_K", "Q4_K", "Q6_K"], "auto") == "q8_0"
    assert kept_formats.given_format(["Q6_K"], "auto") == "q6_k"
    assert kept_formats.given_format(["Q6_K"], "q8_0") == "q8_0:q6_k"


@pytest.fixture(scope="module")
def q4_k_m_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("q6_k") / "tiny.q4_k_m.gguf")
    counts = make_gguf.write(path, SHAPE, "q4_k_m")
    assert counts.get("Q4_K") and counts.get("Q6_K"), counts
    return path


def test_a_q4_k_m_file_keeps_its_q6_k_tensors_and_matches_its_float_values(q4_k_m_file):
    model = gpt.GPT.from_gguf(q4_k_m_file, gpt.CompileOptions(weights="auto", disk_cache=False))
    reader = gguf.GGUFReader(q4_k_m_file)
    types = {t.name: t.tensor_type for t in reader.tensors}
    files = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}
    q6_k_layers = [i for i in range(SHAPE.n_layer) if types[f"blk.{i}.ffn_down.weight"] == T.Q6_K]
    assert q6_k_layers
    formats = dict(model.options.weight_formats)
    for i in q6_k_layers:
        assert formats[f"model.layers.{i}.mlp.down_proj.weight"] == "q6_k"
    # The weights it computes with are gguf's dequantization of the file's Q6_K blocks, exactly.
    state = model.state_dict()
    for i in q6_k_layers:
        np.testing.assert_array_equal(
            state[f"model.layers.{i}.mlp.down_proj.weight"], files[f"blk.{i}.ffn_down.weight"]
        )
    # It stores 6.5625 bits per q6_k weight: lanes and scales of a Q6_K ffn_down ([n_ff, n_embd]).
    stored = {name: size for name, _, size in model._compiled.stored_arguments()}
    down = f"model.layers.{q6_k_layers[0]}.mlp.down_proj.weight"
    assert (stored[down] + stored[down + ".scales"]) * 8 / (SHAPE.n_ff * SHAPE.n_embd) == 6.5625, stored

    # Logits against a float32 model of gguf's dequantized weights, at the q4_k path's tolerance
    # (test_q4_k_format): the run sums are exact integers, only the activations are quantized.
    reference = gpt.GPT.from_gguf(q4_k_m_file, gpt.CompileOptions(weights="f32", disk_cache=False))
    ids = [5, 17, 2, 200, 33, 8, 91, 4]
    ours, theirs = model.forward(ids), reference.forward(ids)
    spread = theirs.std()
    assert np.abs(ours - theirs).max() < 0.25 * spread
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] > 0.999


def test_a_non_finite_d_in_a_file_is_a_model_file_error_naming_the_weight(tmp_path):
    path = tmp_path / "nan.q4_k_m.gguf"
    make_gguf.write(str(path), SHAPE, "q4_k_m")
    tensor = next(
        t for t in gguf.GGUFReader(path).tensors if t.name.endswith("ffn_down.weight") and t.tensor_type == T.Q6_K
    )
    layer = int(tensor.name.split(".")[1])
    data = bytearray(path.read_bytes())
    per_row = SHAPE.n_ff // 256
    at = int(tensor.data_offset) + (5 * per_row + 1) * Q6_K_BYTES + 208  # row 5, super-block 1's d
    data[at : at + 2] = (0x7E00).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(gpt.ModelFileError) as raised:
        gpt.GPT.from_gguf(str(path), gpt.CompileOptions(weights="auto", disk_cache=False))
    assert str(raised.value) == (
        f"{path}: model.layers.{layer}.mlp.down_proj.weight: q6_k block 1 of row 5 (values 256 to 511) has fp16 "
        "scale nan; q6_k scales must be finite"
    )


def test_a_float_model_quantizes_itself_to_q6_k():
    cfg = gpt.GPTConfig(n_layer=2, n_head=4, n_embd=256, vocab_size=300, block_size=32)
    floats = gpt.GPT.random(cfg, seed=4, options=gpt.CompileOptions(disk_cache=False))
    model = gpt.GPT.random(cfg, seed=4, options=gpt.CompileOptions(weights="q6_k", disk_cache=False))
    name = "transformer.h.0.mlp.c_fc.weight"
    ours, theirs = model.state_dict()[name], floats.state_dict()[name]
    # Each weight is within half a step (its run of 16's max |w| / 31.5, rounded to a multiple of
    # d) of the float one, and a 6-bit model is closer than a 4-bit one.
    step = (np.abs(theirs.reshape(-1, 16, theirs.shape[1])).max(axis=1) / 31.5).repeat(16, axis=0)
    assert (np.abs(ours - theirs) <= 0.6 * step + 1e-6).all()
    assert not np.array_equal(ours, theirs)
    ids = [1, 2, 3, 4, 5]
    a, b = model.forward(ids), floats.forward(ids)
    assert np.corrcoef(a.ravel(), b.ravel())[0, 1] > 0.995
    with pytest.raises(ValueError, match="multiple of 256"):
        gpt.GPT.random(
            gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=96, block_size=16),
            options=gpt.CompileOptions(weights="q6_k", disk_cache=False),
        )


def test_save_gguf_refuses_q6_k_by_name(tmp_path):
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=256, vocab_size=96, block_size=16)
    model = gpt.GPT.random(cfg, options=gpt.CompileOptions(disk_cache=False))
    with pytest.raises(ValueError, match="save_gguf cannot write format 'q6_k': gguf's Python quantizer has no Q6_K"):
        gpt.gguf_file.save_gguf(model, None, str(tmp_path / "m.gguf"), format="q6_k")
    assert not (tmp_path / "m.gguf").exists()
