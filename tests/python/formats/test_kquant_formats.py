"""A GGUF file's K-quant, q5 and q6 tensors kept in the compiler's formats without a float32 copy
(gpt.kept_formats, cc/kernels/BlockTranscoding.h), each matmul weight in its own format
(CompileOptions.weight_formats): a Q4_K_M file runs as q4_k, q6_k and q8_0 side by side, as
llama.cpp runs it in Q4_K and Q6_K (test_q4_k_format, test_q6_k_format: those formats themselves).
The transcoding is checked against llama.cpp's block layouts written out here in numpy, and the
values against gguf.quants' dequantizers."""

import ctypes
import importlib.util
import os

import gguf
import gpt_kernels_testing
import numpy as np
import pytest

import gpt
import gpt.architectures
import gpt.gguf.container
import gpt.gguf_file
import gpt.loading
from gpt import gguf_llama, kept_formats
from machine_code import disassemble, function_bodies

T = gguf.GGMLQuantizationType
spec = importlib.util.spec_from_file_location("make_gguf", os.path.join("tools", "dev", "make_gguf.py"))
make_gguf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_gguf)


def random_blocks(qtype, rows: int, k: int, seed: int, scale: float = 0.01) -> np.ndarray:
    """Rows of random blocks of `qtype`: every code and sub-block scale bit pattern, the fp16
    fields (d, dmin, m) random normal times `scale` (zero and a subnormal among them)."""
    values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    count = rows * (k // values)
    blocks = rng.integers(0, 256, size=(count, block_bytes), dtype=np.uint8)
    fields = {
        T.Q4_K: (0, 2),
        T.Q5_K: (0, 2),
        T.Q6_K: (208,),
        T.Q5_0: (0,),
        T.Q5_1: (0, 2),
        T.Q4_0: (0,),
        T.Q4_1: (0, 2),
    }
    for offset in fields[qtype]:
        halves = (rng.standard_normal(count) * scale).astype(np.float16)
        halves[:2] = np.array([0.0, 6e-8], np.float16)[: len(halves[:2])]
        blocks[:, offset : offset + 2] = halves.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


def q4_k_as_q4_1_reference(blocks: np.ndarray) -> np.ndarray:
    """llama.cpp's q4_K super-block (ggml-common.h block_q4_K: fp16 d, dmin; 12 bytes of 6-bit
    scales and mins, get_scale_min_k4; 128 bytes of nibbles, 64 weights per 32 bytes, low nibbles
    first) as eight q4_1 blocks (fp16 d, m; byte j: weight j low, weight j + 16 high), written out
    apart from the compiler's kernel."""
    rows = blocks.shape[0]
    sb = blocks.reshape(-1, 144)
    d = sb[:, 0:2].copy().view(np.float16)[:, 0].astype(np.float32)
    dmin = sb[:, 2:4].copy().view(np.float16)[:, 0].astype(np.float32)
    q = sb[:, 4:16].astype(np.int32)
    scales, mins = np.zeros((len(sb), 8), np.int32), np.zeros((len(sb), 8), np.int32)
    for j in range(8):
        if j < 4:
            scales[:, j], mins[:, j] = q[:, j] & 63, q[:, j + 4] & 63
        else:
            scales[:, j] = (q[:, j + 4] & 0xF) | ((q[:, j - 4] >> 6) << 4)
            mins[:, j] = (q[:, j + 4] >> 4) | ((q[:, j] >> 6) << 4)
    nibbles = sb[:, 16:].reshape(-1, 4, 32)
    out = np.zeros((len(sb), 8, 20), np.uint8)
    for j in range(8):
        codes = (nibbles[:, j // 2] >> (4 * (j % 2))) & 0xF  # the 32 codes of sub-block j, in order
        out[:, j, 0:2] = (d * scales[:, j]).astype(np.float16).view(np.uint8).reshape(-1, 2)
        out[:, j, 2:4] = (-(dmin * mins[:, j])).astype(np.float16).view(np.uint8).reshape(-1, 2)
        out[:, j, 4:] = codes[:, :16] | (codes[:, 16:] << 4)
    return out.reshape(rows, -1)


@pytest.mark.parametrize("threads", [1, 3])
def test_q4_k_becomes_q4_1_with_the_files_codes_and_its_products_rounded_once(threads):
    blocks = random_blocks(T.Q4_K, rows=23, k=512, seed=3)
    ours = gpt_kernels_testing.transcode_rows("q4_k", "q4_1", blocks, threads=threads)
    np.testing.assert_array_equal(ours, q4_k_as_q4_1_reference(blocks))
    # The values: gguf's own dequantizers of the two, apart by the fp16 rounding of d * scale and
    # dmin * min alone (at most 2^-11 of each, times a 4-bit code).
    theirs = gguf.quants.dequantize(blocks, T.Q4_K)
    kept = gguf.quants.dequantize(ours, T.Q4_1)
    bound = 2.0**-11 * (15 * np.abs(theirs).max() + np.abs(theirs).max()) + 1e-12
    assert np.abs(kept - theirs).max() <= bound
    assert np.abs(kept - theirs).max() > 0  # the scales were rounded: this is no byte copy


def test_a_q4_k_product_beyond_fp16_is_refused():
    blocks = random_blocks(T.Q4_K, rows=1, k=256, seed=4)
    blocks[0, 0:2] = np.array([60000.0], np.float16).view(np.uint8)  # d * scale over 65504
    blocks[0, 4] = 63  # sub-block 0's scale
    with pytest.raises(ValueError, match="beyond fp16's range"):
        gpt_kernels_testing.transcode_rows("q4_k", "q4_1", blocks)


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q5_0], ids=lambda t: t.name)
def test_q4_0_and_q5_0_become_q8_0_exactly(qtype):
    blocks = random_blocks(qtype, rows=11, k=160, seed=5)
    ours = gpt_kernels_testing.transcode_rows(qtype.name.lower(), "q8_0", blocks)
    np.testing.assert_array_equal(gguf.quants.dequantize(ours, T.Q8_0), gguf.quants.dequantize(blocks, qtype))
    block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
    np.testing.assert_array_equal(ours.reshape(-1, 34)[:, :2], blocks.reshape(-1, block_bytes)[:, :2])  # d kept


@pytest.mark.parametrize("qtype", [T.Q4_1, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K], ids=lambda t: t.name)
def test_the_others_become_q8_0_within_half_a_step(qtype):
    k = 512
    blocks = random_blocks(qtype, rows=9, k=k, seed=int(qtype))
    ours = gpt_kernels_testing.transcode_rows(qtype.name.lower(), "q8_0", blocks, threads=2)
    assert ours.shape == (9, k // 32 * 34)
    theirs = gguf.quants.dequantize(blocks, qtype).reshape(-1, 32)
    kept = gguf.quants.dequantize(ours, T.Q8_0).reshape(-1, 32)
    step = np.abs(theirs).max(axis=1, keepdims=True) / 127
    # Half a step, the fp16 rounding of the step times the largest code, and for blocks of tiny
    # weights (the random fields include fp16 subnormals) fp16's own resolution of the step.
    assert (np.abs(kept - theirs) <= 0.5 * step + 2.0**-11 * 127 * step + 2.0**-24 * 128).all()
    # As the model quantizes q8_0 (its own quantizer, along K, on the widened rows): the same bits.
    codes, scales = gpt_kernels_testing.quantize("q8_0", np.ascontiguousarray(theirs.reshape(9, k).T))
    blocks_out = ours.reshape(9, k // 32, 34)
    np.testing.assert_array_equal(blocks_out[..., :2].copy().view(np.uint16)[..., 0], scales.T)
    np.testing.assert_array_equal(blocks_out[..., 2:].copy().view(np.int8).reshape(9, k), codes.T)


def test_non_finite_values_are_refused_not_requantized():
    blocks = random_blocks(T.Q6_K, rows=2, k=256, seed=6)
    blocks[1, 208:210] = np.array([np.inf], np.float16).view(np.uint8)
    with pytest.raises(ValueError, match="block 0 of row 1 has a NaN or infinite scale"):
        gpt_kernels_testing.transcode_rows("q6_k", "q8_0", blocks)
    with pytest.raises(ValueError, match="no block type 'q3_k'"):
        gpt_kernels_testing.transcode_rows("q3_k", "q8_0", blocks)


def test_a_fused_weight_takes_the_most_precise_of_its_parts_formats():
    assert kept_formats.group_format(["Q4_K", "Q4_K", "Q6_K"], "auto") == "q8_0"
    assert kept_formats.group_format(["Q4_K", "Q4_K", "Q4_K"], "auto") == "q4_k"
    assert kept_formats.group_format(["Q4_0", "Q4_K"], "auto") == "q4_1"
    assert kept_formats.group_format(["Q4_0", "Q4_0"], "auto") == "q4_0"
    assert kept_formats.group_format(["Q4_K", "F16"], "auto") is None  # widened, then stored in q8_0
    # An explicit format keeps what converts to it without fewer bits, and widens the rest.
    assert kept_formats.group_format(["Q4_K", "Q6_K"], "q8_0") == "q8_0"
    assert kept_formats.group_format(["Q4_K", "Q4_0"], "q4_1") == "q4_1"
    assert kept_formats.group_format(["Q4_K", "Q6_K"], "q4_1") is None
    assert kept_formats.group_format(["Q4_K"], "q4_0") is None


# A shape whose rows tile Q4_K's 256-weight super-blocks (SmolLM2-135M's 576 do not: llama.cpp's
# quantizer writes Q5_0 there), with 8 layers so that some get Q6_K's extra bits and some do not.
SHAPE = make_gguf.Shape(8, 256, 4, 2, 512, 320, 256, 10000.0, True, None)


@pytest.fixture(scope="module")
def q4_k_m_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("kquant") / "tiny.q4_k_m.gguf")
    counts = make_gguf.write(path, SHAPE, "q4_k_m")
    assert counts.get("Q4_K") and counts.get("Q6_K"), counts
    return path


def test_a_q4_k_m_file_runs_in_its_own_q4_k_and_q6_k(q4_k_m_file):
    model = gpt.GPT.from_gguf(q4_k_m_file, gpt.CompileOptions(weights="auto", disk_cache=False))
    options = model.options
    assert options.weights == "q4_k"
    formats = dict(options.weight_formats)
    # make_gguf gives layers 0, 3, 6 and 7 Q6_K attn_v and ffn_down (llama.cpp's use_more_bits):
    # their v and down projections are q6_k, every other matmul weight q4_k. v is a matmul of its
    # own (separate_v_proj), so that q and k stay q4_k beside it (fused, all three were q8_0). The
    # tied Q6_K token table, also the LM head, stays q6_k.
    assert model.config.separate_v_proj
    more_bits = [i for i in range(8) if i < 1 or i >= 7 or (i - 1) % 3 == 2]
    expected = {"lm_head.weight_t": "q6_k"}
    for i in more_bits:
        expected[f"model.layers.{i}.self_attn.v_proj.weight"] = "q6_k"
        expected[f"model.layers.{i}.mlp.down_proj.weight"] = "q6_k"
    assert formats == expected
    assert "q8_0" not in model.ir("transformer", 4)
    # One block function for both kinds of layer: v and down behind a branch on the format index
    # each call passes (0: the q6_k of layer 0, 1: q4_k), so each layer reads its own format.
    ir = model.ir("transformer", 4)
    assert "func.func private @gpt_block(" in ir and "@gpt_block_1(" not in ir
    assert ir.count("scf.if") == 2

    # A q4_K weight is given to the model as the file's own blocks (no copy of the tensor) and
    # kept in its own numbers: the values are gguf's dequantization of them, exactly.
    _, kept, _ = gguf_llama.load(q4_k_m_file, keep_quantized="auto")
    up = kept["model.layers.1.mlp.up_proj.weight"]
    assert up.format == "q4_k" and up.blocks.shape == (512, 256 // 256 * 144)
    raw = next(t for t in gguf.GGUFReader(q4_k_m_file).tensors if t.name == "blk.1.ffn_up.weight").data
    expected = gguf.quants.dequantize(np.asarray(raw), T.Q4_K)
    np.testing.assert_array_equal(model.state_dict()["model.layers.1.mlp.up_proj.weight"], expected)

    # The weights the model computes with are the file's (gguf's dequantizer), exactly, Q6_K v
    # included (it was requantized to q8_0 with the fused q and k).
    reader = gguf.GGUFReader(q4_k_m_file)
    files = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}
    state = model.state_dict()
    for i in range(8):
        for name, tensor in (("self_attn.q_proj", "attn_q"), ("self_attn.v_proj", "attn_v"), ("mlp.up_proj", "ffn_up")):
            ours = state[f"model.layers.{i}.{name}.weight"]
            theirs = files[f"blk.{i}.{tensor}.weight"]
            if name == "self_attn.q_proj":  # llama.cpp's converter permuted the file's q rows
                theirs = gguf_llama.unpermute_rows(theirs, SHAPE.n_head)
            np.testing.assert_array_equal(ours, theirs, err_msg=f"layer {i} {name}")

    # Logits against the file's values in float32: the int8 activations of the dot-product path
    # move them as llama.cpp's q8_K activations do; the ranking of the likeliest tokens holds.
    reference = gpt.GPT.from_gguf(q4_k_m_file, gpt.CompileOptions(weights="f32", disk_cache=False))
    ids = [5, 17, 2, 200, 33, 8, 91, 4]
    ours, theirs = model.forward(ids), reference.forward(ids)
    # Measured: 0.029 apart at most where the logits spread 0.31, as the all-q8_0 model is (0.030).
    spread = theirs.std()
    assert np.abs(ours - theirs).max() < 0.25 * spread
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] > 0.999


def test_both_kinds_of_layer_share_one_block_function(q4_k_m_file, tmp_path):
    # The layers with Q6_K v and down and the others call one block function (two were compiled
    # before, the regions they share merged only after LLVM's own passes). It holds one OpenMP
    # region for each matmul and the attention: q and k, v, attention, o, gate and up, down; and
    # one more for v and for down, in the other format.
    model = gpt.GPT.from_gguf(q4_k_m_file, gpt.CompileOptions(weights="auto", disk_cache=False))
    bodies = function_bodies(disassemble(model, tmp_path, 4))
    assert not [n for n in bodies if n.startswith("gpt_block_1")], sorted(bodies)
    regions = [n for n in bodies if n.startswith("gpt_block..omp_par")]
    assert len(regions) == 5 + 2, sorted(regions)
    # Each compiled: none is a jump to another (what MergeFunctions leaves of a duplicate).
    assert not [n for n in regions if bodies[n][0].startswith("jmp")]


def test_an_untied_q6_k_head_is_kept_in_q6_k(tmp_path):
    """A Q4_K_M file of an untied model (as Llama-3.1-8B's) has a Q6_K output matrix. Under
    weights="auto" the LM head's matmul reads those blocks in q6_k, as llama.cpp does, where it
    widened them to q8_0 (1.3x the bytes of a decode step's largest weight); the token table the
    lookup reads stays q8_0."""
    path = str(tmp_path / "untied.q4_k_m.gguf")
    counts = make_gguf.write(path, make_gguf.Shape(2, 256, 4, 2, 512, 320, 256, 10000.0, False, None), "q4_k_m")
    assert counts.get("Q6_K"), counts
    model = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="auto", disk_cache=False))
    assert dict(model.options.weight_formats)["lm_head.weight_t"] == "q6_k"
    ir = model.ir("transformer", 4)
    assert "transformer.packed_matmul q6_k" in ir and "transformer.packed_embedding" in ir
    # The head's values are the file's, exactly (gguf's dequantizer).
    output = next(t for t in gguf.GGUFReader(path).tensors if t.name == "output.weight")
    assert output.tensor_type == T.Q6_K
    expected = gguf.quants.dequantize(np.asarray(output.data), T.Q6_K)
    np.testing.assert_array_equal(model.state_dict()["lm_head.weight"], expected)
    # Logits against the file's values in float32, as the tied file's test measures them.
    reference = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="f32", disk_cache=False))
    ids = [5, 17, 2, 200, 33, 8, 91, 4]
    ours, theirs = model.forward(ids), reference.forward(ids)
    assert np.abs(ours - theirs).max() < 0.25 * theirs.std()
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] > 0.999
    # An explicit format stores the head in its own head format (q8_0), converting the file's
    # blocks; given auto's options (the layers widened where q4_1 cannot hold them), in q6_k again.
    explicit = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="q8_0", disk_cache=False))
    assert explicit.options.weight_formats == () and "transformer.packed_matmul q6_k" not in explicit.ir(
        "transformer", 4
    )
    copied = gpt.CompileOptions(weights="q4_1", weight_formats=dict(model.options.weight_formats), disk_cache=False)
    np.testing.assert_array_equal(gpt.GPT.from_gguf(path, copied).state_dict()["lm_head.weight"], expected)


def test_a_tied_q6_k_table_is_kept_in_q6_k_for_the_head_and_the_lookup(tmp_path):
    """A Q4_K_M file of a tied model (as SmolLM2's and Llama-3.2's) has a Q6_K token table, which is
    also the LM head. Under weights="auto" both the head's matmul and the token lookup read it in
    q6_k, as llama.cpp does, where the load widened it to q8_0 (1.3x the bytes of a decode step's
    largest weight, and of the table's memory)."""
    path = str(tmp_path / "tied.q4_k_m.gguf")
    counts = make_gguf.write(path, make_gguf.Shape(2, 256, 4, 2, 512, 320, 256, 10000.0, True, None), "q4_k_m")
    table = next(t for t in gguf.GGUFReader(path).tensors if t.name == "token_embd.weight")
    assert table.tensor_type == T.Q6_K, counts
    model = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="auto", disk_cache=False))
    assert dict(model.options.weight_formats)["lm_head.weight_t"] == "q6_k"
    ir = model.ir("transformer", 4)
    assert "transformer.packed_matmul q6_k" in ir and "transformer.packed_embedding q6_k" in ir
    # The table's values are the file's, exactly (gguf's dequantizer), and so is every row the
    # lookup gathers: the first layer's input is the looked-up rows (a 1-layer prefix of the model
    # is not exposed, so the rows are checked through the head, which reads the same lanes).
    expected = gguf.quants.dequantize(np.asarray(table.data), T.Q6_K)
    np.testing.assert_array_equal(model.state_dict()["model.embed_tokens.weight"], expected)
    # Logits against the file's values in float32: the lookup's rows and the head's products.
    reference = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="f32", disk_cache=False))
    ids = [5, 17, 2, 200, 33, 8, 91, 4, 319, 0]
    ours, theirs = model.forward(ids), reference.forward(ids)
    assert np.abs(ours - theirs).max() < 0.25 * theirs.std()
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] > 0.999


def test_options_that_name_no_format_run_the_file_in_its_own(q4_k_m_file):
    # What a user writes: no options, or options for something else. Before "auto" was the default
    # these widened the file to float32: four times its memory, and an 8B file refused as too big.
    explicit = gpt.GPT.from_gguf(q4_k_m_file, gpt.CompileOptions(weights="auto", disk_cache=False))
    for options in (None, gpt.CompileOptions(threads=1, disk_cache=False)):
        model = gpt.GPT.from_gguf(q4_k_m_file, options)
        assert model.options.weights == "q4_k"
        assert model.options.weight_formats == explicit.options.weight_formats
        # The cache in f16, as llama.cpp keeps a GGUF model's.
        assert model.options.kv_cache == "f16" and model.new_cache(8).dtype == np.float16
    ids = [5, 17, 2, 200]
    np.testing.assert_array_equal(model.forward(ids), explicit.forward(ids))
    # The reference pipelines have no block formats: they take the file's values in f32.
    baseline = gpt.GPT.from_gguf(q4_k_m_file, gpt.CompileOptions(pipeline="baseline", disk_cache=False))
    assert baseline.options.weights == "f32" and baseline.options.weight_formats == ()
    # A model given float arrays takes the defaults as f32, its cache too.
    floats = gpt.GPT.random(gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=64, block_size=16)).options
    assert (floats.weights, floats.kv_cache) == ("f32", "f32")


def test_a_q4_k_m_file_of_a_width_no_super_block_tiles_keeps_its_down_projections_in_k_quants(tmp_path):
    """SmolLM2-135M's widths: n_embd 576 is no multiple of 256, so llama.cpp's quantizer gives the
    matmuls n_embd deep Q5_0 and only the n_ff-deep (1536) down projections Q4_K or Q6_K. Each
    weight's depth is checked against its own format, so the file loads under "auto"; a format
    that would put an n_embd-deep weight in super-blocks is refused, naming the depth."""
    path = str(tmp_path / "narrow.q4_k_m.gguf")
    counts = make_gguf.write(path, make_gguf.Shape(3, 576, 9, 3, 1536, 320, 256, 10000.0, True, None), "q4_k_m")
    assert counts.get("Q4_K") and counts.get("Q6_K") and counts.get("Q5_0"), counts
    model = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="auto", disk_cache=False))
    formats = dict(model.options.weight_formats)
    assert model.options.weights == "q5_0"  # Q5_0's blocks, kept as they are (5.5 bits a weight)
    assert {formats[f"model.layers.{i}.mlp.down_proj.weight"] for i in range(3)} == {"q4_k", "q6_k"}
    reference = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="f32", disk_cache=False))
    ids = [5, 17, 2, 200, 33, 8, 91, 4]
    ours, theirs = model.forward(ids), reference.forward(ids)
    assert np.abs(ours - theirs).max() < 0.25 * theirs.std()
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] > 0.999
    with pytest.raises(ValueError, match=r"q4_k weights need n_embd \(576\) to be a multiple of 256"):
        gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="q4_k", disk_cache=False))


def test_an_explicit_format_keeps_what_converts_to_it(q4_k_m_file):
    model = gpt.GPT.from_gguf(q4_k_m_file, gpt.CompileOptions(weights="q8_0", disk_cache=False))
    assert model.options.weights == "q8_0" and model.options.weight_formats == ()
    # One format for q, k and v: they stay one fused matmul.
    assert not model.config.separate_v_proj
    # Layer 0's Q6_K v, converted to q8_0 a block at a time as transcode_rows converts the file's rows.
    v = next(t for t in gguf.GGUFReader(q4_k_m_file).tensors if t.name == "blk.0.attn_v.weight")
    assert v.tensor_type == T.Q6_K
    rows = np.ascontiguousarray(v.data).reshape(int(v.shape[1]), -1)
    expected = gguf.quants.dequantize(gpt_kernels_testing.transcode_rows("q6_k", "q8_0", rows), T.Q8_0)
    np.testing.assert_array_equal(model.state_dict()["model.layers.0.self_attn.v_proj.weight"], expected)


def test_a_weight_named_in_weight_formats_takes_the_files_blocks_in_that_format(q4_k_m_file):
    # weights="q8_0" with layer 0's v named q6_k (as the "auto" options of the file name it): v is
    # its file's Q6_K blocks as they are, the rest q8_0. The load chose every kept format from
    # `weights` and gave v as q8_0 blocks, which the model, storing v in q6_k, refused.
    v_name = "model.layers.0.self_attn.v_proj.weight"
    options = gpt.CompileOptions(weights="q8_0", weight_formats={v_name: "q6_k"}, disk_cache=False)
    model = gpt.GPT.from_gguf(q4_k_m_file, options)
    assert model.config.separate_v_proj and dict(model.options.weight_formats) == {v_name: "q6_k"}
    tensors = {t.name: t for t in gguf.GGUFReader(q4_k_m_file).tensors}
    files = {name: gguf.quants.dequantize(t.data, t.tensor_type) for name, t in tensors.items()}
    state = model.state_dict()
    np.testing.assert_array_equal(state[v_name], files["blk.0.attn_v.weight"])
    up = tensors["blk.0.ffn_up.weight"]
    assert up.tensor_type == T.Q4_K
    rows = np.ascontiguousarray(up.data).reshape(int(up.shape[1]), -1)
    expected = gguf.quants.dequantize(gpt_kernels_testing.transcode_rows("q4_k", "q8_0", rows), T.Q8_0)
    np.testing.assert_array_equal(state["model.layers.0.mlp.up_proj.weight"], expected)


def test_weight_formats_name_layer_matmul_weights_only():
    cfg = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=96, block_size=32)
    with pytest.raises(ValueError, match="'transformer.h.0.ln_1.weight', which is no layer's matmul weight"):
        gpt.GPT.random(
            cfg, options=gpt.CompileOptions(weights="q4_0", weight_formats={"transformer.h.0.ln_1.weight": "q8_0"})
        )
    with pytest.raises(ValueError, match="weight_formats maps parameter names to one of"):
        gpt.CompileOptions(weight_formats={"transformer.h.0.mlp.c_fc.weight": "q3_k"})
    # By hand: layer 1's MLP in q8_0, the rest in q4_0; the logits are those of the same weights
    # given to a model that quantizes them itself the same way (an independent q8_0 / q4_0 mix
    # built from from_weights of the dequantized values would round again, so compare with the
    # formats' own round trip instead: state_dict is what the model computes with).
    options = gpt.CompileOptions(weights="q4_0", weight_formats={"transformer.h.1.mlp.c_fc.weight": "q8_0"})
    model = gpt.GPT.random(cfg, seed=3, options=options)
    assert dict(model.options.weight_formats) == {"transformer.h.1.mlp.c_fc.weight": "q8_0"}
    random = gpt.GPT.random(cfg, seed=3, options=gpt.CompileOptions(weights="q4_0"))
    q8 = gpt.GPT.random(cfg, seed=3, options=gpt.CompileOptions(weights="q8_0"))
    name = "transformer.h.1.mlp.c_fc.weight"
    np.testing.assert_array_equal(model.state_dict()[name], q8.state_dict()[name])
    other = "transformer.h.0.mlp.c_fc.weight"
    np.testing.assert_array_equal(model.state_dict()[other], random.state_dict()[other])


@pytest.mark.parametrize("fmt, weights", [("q4_k_m", "auto"), ("q8_0", "q8_0")])
def test_an_untied_file_keeps_both_tables_as_q8_0_blocks(tmp_path, fmt, weights):
    """Llama 3.1 8B's shape: an untied output matrix (Q6_K in a Q4_K_M file) beside the token table.
    Both are kept as q8_0 copies (the lookup reads its own), with no float32 table the model holds
    (two would be 4.2 GB at 8B); before, the untied head given as blocks was refused."""
    path = str(tmp_path / f"untied.{fmt}.gguf")
    make_gguf.write(path, make_gguf.dataclasses.replace(SHAPE, n_layer=2, tied=False), fmt)
    model = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights=weights, disk_cache=False))
    borrowed = set(model._compiled.borrowed_parameters())
    assert "model.embed_tokens.weight" not in borrowed and "lm_head.weight" not in borrowed
    reader = gguf.GGUFReader(path)
    files = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}
    state = model.state_dict()
    for ours, name in (
        (state["model.embed_tokens.weight"], "token_embd.weight"),
        (state["lm_head.weight"], "output.weight"),
    ):
        theirs = files[name]
        step = np.abs(theirs).reshape(-1, 32).max(axis=1) / 127
        error = np.abs(ours - theirs).reshape(-1, 32).max(axis=1)
        # Half a step, the fp16 rounding of the step (subnormal for the smallest blocks) times 127.
        assert (error <= 0.5 * step + 2.0**-11 * 127 * step + 2.0**-24 * 128).all(), name
    # The lookup reads the q8_0 table: the first layer sees the token's q8_0 row.
    reference = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="f32", disk_cache=False))
    ids = [3, 1, 4, 1, 5]
    ours, theirs = model.forward(ids), reference.forward(ids)
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] > 0.999


def laid_out(model) -> dict[str, bytes]:
    """Every argument the model laid out into its own storage (lanes, scales), byte for byte."""
    return {name: ctypes.string_at(address, size) for name, address, size in model._compiled.stored_arguments()}


def q4_0_as_q4_1(blocks: np.ndarray) -> np.ndarray:
    """q4_0 rows as q4_1 rows, as kept_formats made them in numpy before: m = -8 d, codes kept."""
    rows = blocks.reshape(blocks.shape[0], -1, 18)
    out = np.empty((rows.shape[0], rows.shape[1], 20), dtype=np.uint8)
    out[..., :2] = rows[..., :2]
    out[..., 2:4] = (rows[..., :2].copy().view("<f2") * np.float16(-8)).view(np.uint8)
    out[..., 4:] = rows[..., 2:]
    return out.reshape(blocks.shape[0], -1)


@pytest.mark.parametrize(
    "qtype, stored, given",
    [
        (T.Q5_0, "q8_0", "q8_0:q5_0"),
        (T.Q5_1, "q8_0", "q8_0:q5_1"),
        (T.Q5_K, "q8_0", "q8_0:q5_k"),
        (T.Q6_K, "q8_0", "q8_0:q6_k"),
        (T.Q4_K, "q8_0", "q8_0:q4_k"),
        (T.Q4_0, "q8_0", "q8_0:q4_0"),
        (T.Q4_1, "q8_0", "q8_0:q4_1"),
        (T.Q4_K, "q4_1", "q4_1:q4_k"),
        (T.Q4_0, "q4_1", "q4_1:q4_0"),
        (T.Q5_0, "q5_1", "q5_1:q5_0"),
    ],
    ids=lambda value: getattr(value, "name", value),
)
def test_blocks_converted_as_they_are_repacked_are_the_bits_of_a_converted_copy(qtype, stored, given):
    """set_weights took q8_0, q4_0, q4_1 and q4_k blocks only: a Q6_K or Q5_x tensor was copied
    into q8_0 blocks first (requantize_to_q8_0, single-threaded, a second copy of the tensor in
    memory). Now it takes the file's blocks and converts them a block at a time as it repacks
    them: the lanes and scales are the bytes the converted copy gives."""
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=256, vocab_size=96, block_size=16)
    floats = gpt.GPT.random(cfg, seed=1, options=gpt.CompileOptions(disk_cache=False)).state_dict()
    name = "transformer.h.0.mlp.c_fc.weight"  # [out 1024, in 256] as rows of blocks along in
    del floats[name]
    blocks = random_blocks(qtype, rows=1024, k=256, seed=7)
    assert kept_formats.given_format([qtype.name], stored) == given
    if stored == "q8_0":
        copy = gpt_kernels_testing.transcode_rows(qtype.name.lower(), "q8_0", blocks)
    elif qtype in (T.Q4_K, T.Q5_0):
        copy = gpt_kernels_testing.transcode_rows(qtype.name.lower(), stored, blocks)
    else:
        copy = q4_0_as_q4_1(blocks)

    def model(fmt, rows):
        options = gpt.CompileOptions(weights=stored, disk_cache=False)
        return gpt.GPT(cfg, dict(floats), options, _quantized={name: (fmt, rows)})

    ours, theirs = laid_out(model(given, blocks)), laid_out(model(stored, copy))
    assert ours.keys() == theirs.keys()
    for argument in ours:
        assert ours[argument] == theirs[argument], argument


def test_a_q4_k_m_file_is_laid_out_from_its_own_blocks_unread(q4_k_m_file, monkeypatch):
    """A Q4_K_M file's Q6_K tensors (a Q6_K v, the Q6_K token table) were copied into q8_0 blocks
    and every block's scales checked in Python before the model repacked them. Now the load gives
    the file's own blocks, a view of the map it never reads, and the model lays them out (a Q6_K v
    and down projection it keeps as q6_k): the same bytes as the converted copies."""
    _, kept, _ = gguf_llama.load(q4_k_m_file, keep_quantized="auto")
    assert kept["model.layers.0.self_attn.v_proj.weight"].format == "q6_k"  # v apart: its own format
    assert kept["model.layers.0.self_attn.q_proj.weight"].format == "q4_k"
    down = kept["model.layers.0.mlp.down_proj.weight"]
    assert down.format == "q6_k" and not down.blocks.flags.writeable and not down.blocks.flags.owndata
    assert kept["model.embed_tokens.weight"].format == "q6_k"  # the tied table, kept: head and lookup read q6_k
    reader = gguf.GGUFReader(q4_k_m_file)
    tensors = {t.name: t for t in reader.tensors}
    config = gpt.GPT.from_gguf(q4_k_m_file, gpt.CompileOptions(weights="f32", disk_cache=False)).config
    gguf_names = {
        p.hf.replace("{i}", str(i)): p.gguf.replace("{i}", str(i)) for p, i in gpt.architectures.parameters(config)
    }
    real_load = gpt.loading.load_gguf

    def converted_copies(path, keep_quantized=None, formats_given=()):
        """The blocks as the load gave them before: copies converted into the kept format."""
        config, weights, tokenizer = real_load(path, keep_quantized=keep_quantized, formats_given=formats_given)
        for name, weight in weights.items():
            if isinstance(weight, gpt.gguf_file.QuantizedTensor) and weight.format not in kept_formats.KEPT_QUANTIZED:
                tensor = tensors[gguf_names[name]]
                rows = np.ascontiguousarray(weight.blocks).reshape(int(tensor.shape[1]), -1)
                stored = kept_formats.stored_format(weight.format)
                if stored == "q8_0":
                    copy = gpt_kernels_testing.transcode_rows(tensor.tensor_type.name.lower(), "q8_0", rows)
                else:
                    copy = gpt_kernels_testing.transcode_rows("q4_k", "q4_1", rows)
                weights[name] = gpt.gguf_file.QuantizedTensor(stored, copy)
        return config, weights, tokenizer

    def never(*args, **kwargs):
        raise AssertionError("a kept tensor's blocks were read in Python")

    options = gpt.CompileOptions(weights="auto", disk_cache=False)
    monkeypatch.setattr(gpt.gguf.container, "_fp16_fields_finite", never)
    ours = gpt.GPT.from_gguf(q4_k_m_file, options)
    monkeypatch.undo()
    monkeypatch.setattr(gpt.loading, "load_gguf", converted_copies)
    theirs = gpt.GPT.from_gguf(q4_k_m_file, options)
    assert ours.options == theirs.options
    ours, theirs = laid_out(ours), laid_out(theirs)
    assert ours.keys() == theirs.keys()
    for argument in ours:
        assert ours[argument] == theirs[argument], argument


@pytest.mark.parametrize("bits, shown", [(0x7E00, "nan"), (0xFC00, "-inf")])
def test_a_non_finite_scale_in_a_converted_part_is_refused_by_the_repack(tmp_path, bits, shown):
    """The check of a kept tensor's fp16 scales moved from a Python pass over the file's blocks into
    the repack, which reads every block anyway: it names the weight, the part, the row and block."""
    path = tmp_path / "nan.q4_k_m.gguf"
    make_gguf.write(str(path), make_gguf.dataclasses.replace(SHAPE, n_layer=1), "q4_k_m")
    tensor = next(t for t in gguf.GGUFReader(path).tensors if t.name == "blk.0.attn_v.weight")
    assert tensor.tensor_type == T.Q6_K
    data = bytearray(path.read_bytes())
    at = int(tensor.data_offset) + 5 * 210 + 208  # row 5's (only) super-block, its fp16 d
    data[at : at + 2] = bits.to_bytes(2, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(gpt.ModelFileError) as raised:
        gpt.GPT.from_gguf(str(path), gpt.CompileOptions(weights="q8_0", disk_cache=False))
    assert str(raised.value) == (
        f"{path}: model.layers.0.self_attn.qkv_proj.weight: q6_k block 0 of row 5 of part 2 (values 0 to 255) "
        f"has fp16 scale {shown}; q6_k scales must be finite"
    )
