"""Checkpoints read from other formats: fp16 and bf16 safetensors (from_pretrained) and GGUF files
(from_gguf): the blocks of Q8_0 and Q4_0 files repacked and computed with as they are, other
llama.cpp types dequantized, the loader's reader against gguf's, and the files it refuses. Writing
GGUF files is test_gguf.py's."""

import json

import gguf
import gpt_kernels_testing
import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

import gpt
import quant_reference as ref
from checkpoints import hf_config, rewrite
from gpt import _gpt
from gpt.gguf_file import FORMATS, GgufFile, save_gguf
from gpt2_gguf import CFG, IDS, MATMUL_SUFFIXES, QTYPES, T, assert_weights_equal, dequantized_as_written, gguf_layout
from reference import gpt2_logits
from shapes import RTOL, exercising_weights, relative_error


@pytest.fixture(scope="module")
def weights():
    return exercising_weights(CFG, seed=5)


# -- fp16 / bf16 safetensors ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_from_pretrained_reads_half_precision_safetensors(tmp_path, weights, dtype):
    (tmp_path / "config.json").write_text(json.dumps(hf_config(CFG)))
    path = str(tmp_path / "model.safetensors")
    if dtype == "f16":
        safetensors.numpy.save_file({k: v.astype(np.float16) for k, v in weights.items()}, path)
        rounded = {k: v.astype(np.float16).astype(np.float32) for k, v in weights.items()}
    else:
        tensors = {k: torch.from_numpy(v).to(torch.bfloat16) for k, v in weights.items()}
        # A tied head as HF writes it (a copy of wte): compared after widening, then dropped.
        tensors["lm_head.weight"] = tensors["transformer.wte.weight"].clone()
        safetensors.torch.save_file(tensors, path)
        # torch's bf16 -> f32 is the oracle of the widening.
        rounded = {k: torch.from_numpy(v).to(torch.bfloat16).to(torch.float32).numpy() for k, v in weights.items()}
    assert any(not np.array_equal(rounded[k], weights[k]) for k in weights)  # the format did round
    model = gpt.GPT.from_pretrained(str(tmp_path))
    assert model.config == CFG and model.tokenizer is None
    assert_weights_equal(model.state_dict(), rounded)
    expected = gpt.GPT.from_weights(CFG, rounded).forward(IDS)
    np.testing.assert_allclose(model.forward(IDS), expected, rtol=0, atol=1e-5)


def test_bf16_safetensors_widen_exactly_including_signs_and_extremes(tmp_path, weights):
    """Special bf16 values: signed zero, the smallest subnormal, the largest finite, negatives."""
    (tmp_path / "config.json").write_text(json.dumps(hf_config(CFG)))
    bits = np.array([0x0000, 0x8000, 0x0001, 0x7F7F, 0xFF7F, 0x3F80, 0xBFC0, 0x4049], np.uint16)
    expected_values = np.array(
        [0.0, -0.0, 2.0**-133, 3.3895313892515355e38, -3.3895313892515355e38, 1.0, -1.5, 3.140625], np.float32
    )
    tensors = {k: torch.from_numpy(v).to(torch.bfloat16) for k, v in weights.items()}
    special = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16)
    bias = tensors["transformer.h.0.ln_1.bias"].clone()
    bias[:8] = special
    tensors["transformer.h.0.ln_1.bias"] = bias
    safetensors.torch.save_file(tensors, str(tmp_path / "model.safetensors"))
    loaded = gpt.GPT.from_pretrained(str(tmp_path)).state_dict()["transformer.h.0.ln_1.bias"][:8]
    np.testing.assert_array_equal(loaded.view(np.uint32), expected_values.view(np.uint32))


# -- GGUF ----------------------------------------------------------------------------------------


def block_codes(data, qtype, k, n):
    """(codes [K, N], fp16 scale bits [K/32, N]) of Q8_0 or Q4_0 blocks holding n rows of k weights
    (ne [K, N]), in the layout of the compiler's kernels (gpt_kernels_testing.quantize)."""
    size = 34 if qtype == T.Q8_0 else 18
    blocks = np.asarray(data).reshape(n, k // 32, size)
    scales = blocks[..., :2].copy().view(np.uint16)[..., 0].T
    if qtype == T.Q8_0:
        codes = blocks[..., 2:].copy().view(np.int8)
    else:  # byte j holds element j in its low nibble and element j + 16 in its high nibble
        codes = np.concatenate([blocks[..., 2:] & 15, blocks[..., 2:] >> 4], axis=-1)
    return np.ascontiguousarray(codes.reshape(n, k).T), np.ascontiguousarray(scales)


def file_blocks(tensor, k, n):
    """block_codes of a Q8_0 or Q4_0 tensor of ne [K, N]."""
    return block_codes(tensor.data, tensor.tensor_type, k, n)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
@pytest.mark.parametrize("k, n, padded_n", [(32, 1, 32), (64, 96, 96), (96, 40, 64), (256, 100, 128)])
def test_repacked_blocks_are_the_lanes_of_the_files_codes(fmt, k, n, padded_n):
    """from_gguf's repacking, bit for bit: llama.cpp's blocks (written by gguf's own quantizer) in
    the lane layouts of quant_reference.py, with the file's codes and scales unchanged, and
    padding columns past n (the LM head's vocabulary padding) that dequantize to 0."""
    rows = (np.random.default_rng(k + n).standard_normal((n, k)) * 0.02).astype(np.float32)  # [out, in]
    rows[0, :32] = 0.0  # an all-zero block
    rows[-1, -32:] = [1.0, -1.0] * 16  # ties of equal magnitude
    blocks = gguf.quants.quantize(rows, QTYPES[fmt])
    codes, scales = block_codes(blocks, QTYPES[fmt], k, n)
    pad = padded_n - n
    codes = np.pad(codes, ((0, 0), (0, pad)), constant_values=0 if fmt == "q8_0" else 8)
    scales = np.pad(scales, ((0, 0), (0, pad)))
    lanes = ref.q8_0_lanes if fmt == "q8_0" else ref.q4_0_lanes
    got_codes, got_scales = gpt_kernels_testing.repack_rows(fmt, blocks, k, padded_n, 32)
    np.testing.assert_array_equal(got_codes, lanes(codes))
    np.testing.assert_array_equal(got_scales, ref.scale_panels(scales))
    if pad:
        np.testing.assert_array_equal(got_codes[-1, :, 32 - pad :], 0 if fmt == "q8_0" else 0x88888888)
        np.testing.assert_array_equal(got_scales[-1, :, 32 - pad :], 0)


def test_repacking_refuses_blocks_that_are_not_whole_rows():
    with pytest.raises(ValueError, match="K = 40"):
        gpt_kernels_testing.repack_rows("q8_0", np.zeros(68, np.uint8), 40, 32, 32)
    with pytest.raises(ValueError, match="padded_n 16 must be at least the 20 rows"):
        gpt_kernels_testing.repack_rows("q4_0", np.zeros(20 * 18, np.uint8), 32, 16, 16)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_a_non_finite_scale_is_named_by_the_first_such_block_of_its_step(fmt):
    """The repack of a file's own blocks checks a step's 32 scales with one test and names the
    block by its row as the per-block check does: of two bad blocks in one step (block 2 of rows
    45 and 37, both in the second panel), the lower column's; of two steps, the earlier one's."""
    k, n = 128, 50
    blocks = gguf.quants.quantize(np.ones((n, k), np.float32), QTYPES[fmt]).reshape(n, k // 32, -1)
    blocks[45, 2, :2] = np.array([np.nan], np.float16).view(np.uint8)
    blocks[37, 2, :2] = np.array([-np.inf], np.float16).view(np.uint8)
    blocks[36, 3, :2] = np.array([np.inf], np.float16).view(np.uint8)
    with pytest.raises(ValueError, match=rf"{fmt} block 2 of row 37 \(values 64 to 95\) has fp16 scale -inf"):
        gpt_kernels_testing.repack_rows(fmt, blocks.reshape(-1), k, 64, 32, threads=2)
    blocks[37, 2, :2] = np.array([1.0], np.float16).view(np.uint8)
    with pytest.raises(ValueError, match=rf"{fmt} block 2 of row 45 \(values 64 to 95\) has fp16 scale nan"):
        gpt_kernels_testing.repack_rows(fmt, blocks.reshape(-1), k, 64, 32)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_repacked_and_requantized_weights_are_stored_alike(tmp_path, weights, fmt):
    """A file loaded in its own format (its blocks repacked) stores bit for bit what the float32
    detour (dequantize, quantize again at load) stores: the same lanes read back the same."""
    path = tmp_path / f"model-{fmt}.gguf"
    save_gguf(weights, CFG, path, fmt)
    options = gpt.CompileOptions(weights=fmt, disk_cache=False)
    direct = gpt.GPT.from_gguf(str(path), options).state_dict()
    detour = gpt.GPT.from_weights(CFG, gpt.GPT.from_gguf(str(path)).state_dict(), options).state_dict()
    assert_weights_equal(direct, detour)
    # The file's values: its matmul weights, and (q8_0; q4_0 keeps it in q8_0) its embedding.
    written = dequantized_as_written(weights, fmt)
    for name in written:
        if name.endswith(MATMUL_SUFFIXES) or (name == "transformer.wte.weight" and fmt == "q8_0"):
            np.testing.assert_array_equal(direct[name], written[name], err_msg=name)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "bf16"])
def test_the_compilers_quantizers_reproduce_the_files_codes(tmp_path, weights, fmt):
    """What from_gguf's docstring promises: quantizing the dequantized weights again with the
    compiler's load-time kernels gives back the file's codes and scales (bf16: its bits)."""
    path = tmp_path / "model.gguf"
    save_gguf(weights, CFG, path, fmt)
    loaded = gpt.GPT.from_gguf(str(path)).state_dict()
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    for gguf_name, hf_name in (
        ("blk.0.attn_qkv.weight", "transformer.h.0.attn.c_attn.weight"),
        ("blk.1.attn_output.weight", "transformer.h.1.attn.c_proj.weight"),
        ("blk.0.ffn_up.weight", "transformer.h.0.mlp.c_fc.weight"),
        ("blk.1.ffn_down.weight", "transformer.h.1.mlp.c_proj.weight"),
    ):
        matrix = loaded[hf_name]  # HF [K, N]
        if fmt == "bf16":
            file_bits = np.asarray(tensors[gguf_name].data).view(np.uint16).reshape(matrix.T.shape).T
            np.testing.assert_array_equal(gpt_kernels_testing.quantize_bf16(matrix), file_bits, err_msg=gguf_name)
            continue
        codes, scales = gpt_kernels_testing.quantize(fmt, matrix)
        want_codes, want_scales = file_blocks(tensors[gguf_name], *matrix.shape)
        np.testing.assert_array_equal(scales, want_scales, err_msg=gguf_name)
        np.testing.assert_array_equal(codes, want_codes, err_msg=gguf_name)


@pytest.mark.parametrize("fmt", ["bf16", "q8_0", "q4_0"])
def test_compiling_in_the_files_format_computes_with_the_files_values(tmp_path, weights, fmt):
    """End to end: a file loaded with CompileOptions(weights=<its format>) gives the logits of the
    float64 reference on the values it computes with: the file's weights (for q4_0, whose tied
    embedding the model keeps in q8_0, the file's embedding re-quantized to q8_0), and each
    matmul's activations rounded as the format's dot products take them (bf16, or int8 blocks)."""
    try:
        options = gpt.CompileOptions(weights=fmt)
    except ValueError as e:
        pytest.skip(f"the compiler does not take weights={fmt!r} yet: {e}")
    path = tmp_path / f"model-{fmt}.gguf"
    save_gguf(weights, CFG, path, fmt)
    model = gpt.GPT.from_gguf(str(path), options=options)
    activations = ref.bf16_activations if fmt == "bf16" else ref.int8_activations
    stored = model.state_dict()
    reference = gpt2_logits(stored, IDS, CFG.n_layer, CFG.n_head, matmul_input=activations)
    assert relative_error(model.forward(IDS), reference) < RTOL


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_quantized_tensors_reach_the_compiler_without_a_float32_copy(tmp_path, fmt):
    """A q8_0 / q4_0 file loaded in its own format: its matmul weights (and, for q8_0, the token
    embedding) come out of the reader as the file's blocks and are repacked as they are. The
    model computes exactly what the float32 detour (dequantize, then quantize again at load)
    computes, while the float32 values of those weights are never materialized: the peak of
    traced memory while loading stays below their float32 size."""
    import tracemalloc

    from gpt.gguf_file import QuantizedTensor, load_gguf

    cfg = gpt.GPTConfig(n_layer=2, n_head=4, n_embd=256, vocab_size=512, block_size=64)
    path = tmp_path / f"model-{fmt}.gguf"
    save_gguf(exercising_weights(cfg, seed=3), cfg, path, fmt)
    _, loaded, _ = load_gguf(str(path), keep_quantized=fmt)
    kept = {name for name, value in loaded.items() if isinstance(value, QuantizedTensor)}
    matmuls = {name for name in loaded if name.endswith(".weight") and ("attn.c_" in name or "mlp.c_" in name)}
    assert matmuls <= kept
    assert ("transformer.wte.weight" in kept) == (fmt == "q8_0")

    detour = gpt.GPT.from_weights(cfg, gpt.GPT.from_gguf(str(path)).state_dict(), gpt.CompileOptions(weights=fmt))
    tracemalloc.start()
    direct = gpt.GPT.from_gguf(str(path), gpt.CompileOptions(weights=fmt))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    ids = list(range(1, 40))
    np.testing.assert_array_equal(direct.forward(ids), detour.forward(ids))
    float32_bytes = sum(4 * loaded[name].blocks.size * 32 // (34 if fmt == "q8_0" else 18) for name in kept)
    assert peak < 0.5 * float32_bytes


# -- refusals ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def f32_file(tmp_path_factory, weights):
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    save_gguf(weights, CFG, path, "f32")
    return path


def test_refuses_another_architecture(tmp_path, f32_file):
    rewrite(f32_file, tmp_path / "falcon.gguf", arch="falcon")
    with pytest.raises(ValueError, match="falcon.gguf: general.architecture 'falcon' is not supported"):
        gpt.GPT.from_gguf(str(tmp_path / "falcon.gguf"))


def test_refuses_a_missing_tensor(tmp_path, f32_file):
    rewrite(f32_file, tmp_path / "m.gguf", drop=["blk.1.ffn_down.bias"])
    with pytest.raises(ValueError, match=r"tensor\(s\) missing: blk.1.ffn_down.bias"):
        gpt.GPT.from_gguf(str(tmp_path / "m.gguf"))


def test_refuses_a_tensor_type_gguf_cannot_dequantize(tmp_path, f32_file, weights):
    qkv = gguf_layout("attn.c_attn.weight", weights["transformer.h.0.attn.c_attn.weight"])
    rewrite(f32_file, tmp_path / "m.gguf", replace={"blk.0.attn_qkv.weight": (qkv.astype(np.int32), T.I32)})
    with pytest.raises(ValueError, match="tensor blk.0.attn_qkv.weight has type I32, which this loader does not read"):
        gpt.GPT.from_gguf(str(tmp_path / "m.gguf"))


@pytest.mark.parametrize("qtype", ["Q5_0", "Q4_1", "Q5_1"])
def test_reads_other_llama_cpp_types_by_dequantizing_them(tmp_path, f32_file, weights, qtype):
    """A tensor in a type the compiler does not store (llama-quantize writes k-quants and others
    beside Q4_0) is dequantized with gguf's own implementation and loaded like float32 values."""
    qtype = getattr(T, qtype)
    qkv = gguf_layout("attn.c_attn.weight", weights["transformer.h.0.attn.c_attn.weight"])
    blocks = gguf.quants.quantize(qkv, qtype)
    rewrite(f32_file, tmp_path / "m.gguf", replace={"blk.0.attn_qkv.weight": (blocks, qtype)})
    loaded = gpt.GPT.from_gguf(str(tmp_path / "m.gguf")).state_dict()["transformer.h.0.attn.c_attn.weight"]
    expected = gguf.quants.dequantize(blocks, qtype).reshape(qkv.shape).T
    np.testing.assert_array_equal(loaded, expected)
    assert not np.array_equal(loaded, weights["transformer.h.0.attn.c_attn.weight"])


def test_refuses_an_untied_output_weight_and_accepts_a_tied_one(tmp_path, f32_file, weights):
    embedding = weights["transformer.wte.weight"]
    rewrite(f32_file, tmp_path / "untied.gguf", add={"output.weight": (embedding + np.float32(0.5), T.F32)})
    with pytest.raises(ValueError, match="output.weight differs from token_embd.weight"):
        gpt.GPT.from_gguf(str(tmp_path / "untied.gguf"))
    rewrite(f32_file, tmp_path / "tied.gguf", add={"output.weight": (embedding.astype(np.float16), T.F16)})
    with pytest.raises(ValueError, match="output.weight differs"):  # rounded to f16: not the same head
        gpt.GPT.from_gguf(str(tmp_path / "tied.gguf"))
    rewrite(f32_file, tmp_path / "tied.gguf", add={"output.weight": (embedding.copy(), T.F32)})
    assert_weights_equal(gpt.GPT.from_gguf(str(tmp_path / "tied.gguf")).state_dict(), weights)


def test_refuses_misshapen_unexpected_tensors_and_bad_metadata(tmp_path, f32_file, weights):
    bias = weights["transformer.h.0.attn.c_attn.bias"]
    rewrite(f32_file, tmp_path / "a.gguf", replace={"blk.0.attn_qkv.bias": (bias[:100].copy(), T.F32)})
    with pytest.raises(ValueError, match=r"tensor blk.0.attn_qkv.bias has ne \[100\], expected \[192\]"):
        gpt.GPT.from_gguf(str(tmp_path / "a.gguf"))
    rewrite(f32_file, tmp_path / "b.gguf", add={"blk.0.attn_q.weight": (np.zeros((64, 64), np.float32), T.F32)})
    with pytest.raises(ValueError, match="unexpected tensor.*blk.0.attn_q.weight"):
        gpt.GPT.from_gguf(str(tmp_path / "b.gguf"))
    rewrite(f32_file, tmp_path / "c.gguf", drop_keys=["gpt2.attention.head_count"])
    with pytest.raises(ValueError, match="metadata key gpt2.attention.head_count is missing"):
        gpt.GPT.from_gguf(str(tmp_path / "c.gguf"))
    rewrite(f32_file, tmp_path / "d.gguf", set_keys={"gpt2.feed_forward_length": (512, gguf.GGUFValueType.UINT32)})
    with pytest.raises(ValueError, match="gpt2.feed_forward_length 512 is not supported"):
        gpt.GPT.from_gguf(str(tmp_path / "d.gguf"))
    rewrite(f32_file, tmp_path / "e.gguf", set_keys={"gpt2.attention.head_count": (3, gguf.GGUFValueType.UINT32)})
    with pytest.raises(ValueError, match="e.gguf: GPTConfig.n_embd \\(64\\) must be divisible by n_head \\(3\\)"):
        gpt.GPT.from_gguf(str(tmp_path / "e.gguf"))


def test_refuses_unreadable_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        gpt.GPT.from_gguf(str(tmp_path / "nope.gguf"))
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="junk.gguf is not a readable GGUF file"):
        gpt.GPT.from_gguf(str(tmp_path / "junk.gguf"))


def test_a_header_that_asks_for_more_memory_than_there_is_is_refused_before_loading(tmp_path, f32_file):
    # 2^30 positions: a KV cache and a position table of terabytes, in a file of kilobytes.
    rewrite(f32_file, tmp_path / "huge.gguf", set_keys={"gpt2.context_length": (2**30, gguf.GGUFValueType.UINT32)})
    with pytest.raises(MemoryError, match=r"block_size=1073741824.* needs about [0-9.]+ GiB .* this process can use"):
        gpt.GPT.from_gguf(str(tmp_path / "huge.gguf"))


def assert_reads_like_gguf(path):
    """gpt's GgufFile against gguf's own GGUFReader (the independent reference): every metadata
    value, and every tensor's type, shape and data (the same dtype and numpy shape)."""
    ours, theirs = GgufFile(str(path)), gguf.GGUFReader(path)
    for key, field in theirs.fields.items():
        if key.startswith("GGUF."):  # the reader's own pseudo-fields for the header counts
            continue
        assert ours.get_field(key) is not None and ours.get_field(key).contents() == field.contents(), key
    assert ours.get_field("no.such.key") is None
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for mine, reference in zip(ours.tensors, theirs.tensors, strict=True):
        assert mine.tensor_type == reference.tensor_type and list(mine.shape) == reference.shape.tolist()
        assert mine.data.dtype == reference.data.dtype and mine.data.shape == reference.data.shape, mine.name
        np.testing.assert_array_equal(mine.data, reference.data)
        assert not mine.data.flags.writeable


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_loaders_reader_reads_what_gguf_reads(tmp_path, weights, fmt):
    path = tmp_path / f"model-{fmt}.gguf"
    save_gguf(weights, CFG, path, fmt)
    assert_reads_like_gguf(path)


def test_the_loaders_reader_reads_the_real_model_as_gguf_does():
    from gpt import models

    assert_reads_like_gguf(models.find("smollm2"))  # a tokenizer's 98,000 strings, Q4_1 and Q8_0


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_1"])
def test_the_kernels_widen_blocks_as_gguf_does(fmt):
    """The compiler's row dequantizers (how an f32 model reads a quantized file) against gguf's own
    numpy dequantizer, bit for bit: random codes under fp16 scales and mins of every magnitude
    (subnormal, negative, zero, the largest finite), in a [2, 3, K] batch of rows."""
    qtype = QTYPES[fmt]
    block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(7)
    blocks = rng.integers(0, 256, size=(2, 3, 4 * block_bytes), dtype=np.uint8)
    halves = np.array([0x0001, 0x8001, 0x0000, 0x7BFF, 0xFBFF, 0x3C00, 0x2E66, 0xB400], dtype=np.uint16)
    header = 4 if fmt == "q4_1" else 2
    for row in blocks.reshape(-1, 4, block_bytes):
        row[:, :header] = rng.choice(halves, size=(4, header // 2)).view(np.uint8).reshape(4, header)
    expected = gguf.quants.dequantize(blocks, qtype)
    actual = _gpt.dequantize_rows(fmt, blocks)
    assert actual.shape == expected.shape == (2, 3, 4 * block) and actual.dtype == np.float32
    np.testing.assert_array_equal(actual.view(np.uint32), expected.astype(np.float32).view(np.uint32))
    with pytest.raises(ValueError, match="whole blocks"):
        _gpt.dequantize_rows(fmt, blocks[..., :-1].copy())
