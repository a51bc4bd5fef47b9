"""Checkpoints in other formats: fp16 and bf16 safetensors (from_pretrained) and GGUF files
(from_gguf, save_gguf) in F32, F16, BF16, Q8_0 and Q4_0, with their tokenizer."""

import json
import os
import subprocess
import sys

import gguf
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
from reference import gpt2_logits
from shapes import RTOL, exercising_weights, relative_error

CFG = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=96, block_size=32)
IDS = [3, 17, 95, 0, 42, 42, 7, 60, 1, 88, 23]
T = gguf.GGMLQuantizationType
QTYPES = {"f32": T.F32, "f16": T.F16, "bf16": T.BF16, "q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_1": T.Q4_1}
# HF GPT-2's Conv1D matmul weights, which llama.cpp stores transposed (torch Linear layout).
MATMUL_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))


@pytest.fixture(scope="module")
def weights():
    return exercising_weights(CFG, seed=5)


def assert_weights_equal(actual, expected):
    assert actual.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


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


def gguf_layout(name, array):
    """An HF GPT-2 array in the layout llama.cpp stores it (numpy order, ne reversed)."""
    return np.ascontiguousarray(array.T) if name.endswith(MATMUL_SUFFIXES) else array


def expected_kind(name, array, fmt):
    """The tensor type llama.cpp's converter / llama-quantize --pure give each tensor."""
    return T.F32 if array.ndim == 1 or name == "transformer.wpe.weight" else QTYPES[fmt]


def dequantized_as_written(weights, fmt):
    """What a file of this format holds, by gguf's own quantize/dequantize, in HF layout."""
    out = {}
    for name, array in weights.items():
        kind = expected_kind(name, array, fmt)
        stored = gguf.quants.dequantize(gguf.quants.quantize(gguf_layout(name, array), kind), kind)
        out[name] = gguf_layout(name, stored.astype(np.float32))  # the transpose is its own inverse
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_save_and_load_gguf_in_every_format(tmp_path, weights, fmt):
    path = tmp_path / f"model-{fmt}.gguf"
    save_gguf(weights, CFG, path, fmt)
    model = gpt.GPT.from_gguf(str(path))
    assert model.config == CFG and model.config.layer_norm_eps == 1e-5
    assert model.tokenizer is None
    loaded = model.state_dict()
    expected = dequantized_as_written(weights, fmt)
    assert_weights_equal(loaded, expected)
    if fmt == "f32":
        assert_weights_equal(loaded, weights)
    else:
        # The embedding and matmul weights went through the format; the rest stayed exact.
        assert not np.array_equal(loaded["transformer.wte.weight"], weights["transformer.wte.weight"])
        assert not np.array_equal(
            loaded["transformer.h.1.mlp.c_proj.weight"], weights["transformer.h.1.mlp.c_proj.weight"]
        )
        for name in ("transformer.wpe.weight", "transformer.h.0.attn.c_attn.bias", "transformer.ln_f.weight"):
            np.testing.assert_array_equal(loaded[name], weights[name])
    reference = gpt.GPT.from_weights(CFG, expected).forward(IDS)
    np.testing.assert_allclose(model.forward(IDS), reference, rtol=0, atol=1e-5)


@pytest.mark.parametrize("fmt", ["f32", "q8_0"])
def test_gguf_file_has_llama_cpps_names_layout_and_metadata(tmp_path, weights, fmt):
    """The file, read with gguf's reader, against what llama.cpp's gpt2 loader asks for
    (llama-model.cpp: tok_embd {n_embd, n_vocab}, wqkv {n_embd, 3 n_embd}, ffn_up {n_embd, n_ff},
    ffn_down {n_ff, n_embd}, ...; ne order) and convert_hf_to_gguf.py's GPT2Model writes."""
    path = tmp_path / "model.gguf"
    save_gguf(weights, CFG, path, fmt)
    reader = gguf.GGUFReader(path)
    meta = {name: field.contents() for name, field in reader.fields.items()}
    assert meta["general.architecture"] == "gpt2"
    assert meta["gpt2.block_count"] == 2 and meta["gpt2.context_length"] == 32
    assert meta["gpt2.embedding_length"] == 64 and meta["gpt2.feed_forward_length"] == 256
    assert meta["gpt2.attention.head_count"] == 2
    assert meta["gpt2.attention.layer_norm_epsilon"] == pytest.approx(1e-5)
    assert meta["general.file_type"] == {"f32": 0, "q8_0": 7}[fmt]
    assert meta["general.quantization_version"] == 2
    assert meta["tokenizer.ggml.model"] == "none" and meta["gpt2.vocab_size"] == 96
    e, ff, v, ctx = 64, 256, 96, 32
    ne = {
        "token_embd.weight": [e, v],
        "position_embd.weight": [e, ctx],
        "output_norm.weight": [e],
        "output_norm.bias": [e],
    }
    for i in range(2):
        ne.update(
            {
                f"blk.{i}.attn_norm.weight": [e],
                f"blk.{i}.attn_norm.bias": [e],
                f"blk.{i}.attn_qkv.weight": [e, 3 * e],
                f"blk.{i}.attn_qkv.bias": [3 * e],
                f"blk.{i}.attn_output.weight": [e, e],
                f"blk.{i}.attn_output.bias": [e],
                f"blk.{i}.ffn_norm.weight": [e],
                f"blk.{i}.ffn_norm.bias": [e],
                f"blk.{i}.ffn_up.weight": [e, ff],
                f"blk.{i}.ffn_up.bias": [ff],
                f"blk.{i}.ffn_down.weight": [ff, e],
                f"blk.{i}.ffn_down.bias": [e],
            }
        )
    tensors = {t.name: t for t in reader.tensors}
    assert {name: [int(n) for n in t.shape] for name, t in tensors.items()} == ne
    quantized = {"token_embd.weight"} | {
        n for n in ne if n.endswith(("qkv.weight", "output.weight", "up.weight", "down.weight"))
    }
    for name, t in tensors.items():
        assert t.tensor_type == (QTYPES[fmt] if name in quantized else T.F32), name
    if fmt == "f32":
        # Contents: ggml's y = W x with W [out, in] in numpy order is HF's x @ Conv1D [in, out].
        np.testing.assert_array_equal(
            tensors["blk.1.attn_qkv.weight"].data, weights["transformer.h.1.attn.c_attn.weight"].T
        )
        np.testing.assert_array_equal(
            tensors["blk.0.attn_output.weight"].data, weights["transformer.h.0.attn.c_proj.weight"].T
        )
        np.testing.assert_array_equal(
            tensors["blk.0.ffn_down.weight"].data, weights["transformer.h.0.mlp.c_proj.weight"].T
        )
        np.testing.assert_array_equal(tensors["token_embd.weight"].data, weights["transformer.wte.weight"])
        np.testing.assert_array_equal(tensors["blk.1.ffn_norm.bias"].data, weights["transformer.h.1.ln_2.bias"])


@pytest.mark.parametrize("fmt", ["f32", "q4_0"])
def test_transformers_reads_the_same_weights_from_our_gguf(tmp_path, weights, fmt):
    """An independent reader: HF transformers' GGUF loader (its GPT-2 tensor processor undoes
    llama.cpp's converter) sees the weights from_gguf sees."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = str(tmp_path / "model.gguf")
    save_gguf(weights, CFG, path, fmt)
    # The loader maps names against a model of the file's shape (HF's config from the file lacks
    # the vocabulary size when there is no tokenizer, and names the context n_ctx).
    meta = load_gguf_checkpoint(path)["config"]
    assert (meta["n_layer"], meta["n_head"], meta["n_embd"], meta["n_ctx"]) == (2, 2, 64, 32)
    skeleton = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, n_positions=32, vocab_size=96))
    theirs = load_gguf_checkpoint(path, return_tensors=True, model_to_load=skeleton)["tensors"]
    ours = gpt.GPT.from_gguf(path).state_dict()
    assert set(theirs) == set(ours)
    for name, value in ours.items():
        np.testing.assert_array_equal(theirs[name].float().numpy(), value, err_msg=name)


def block_codes(data, qtype, k, n):
    """(codes [K, N], fp16 scale bits [K/32, N]) of Q8_0 or Q4_0 blocks holding n rows of k weights
    (ne [K, N]), in the layout of the compiler's kernels (_gpt.quantize_q8_0 / quantize_q4_0)."""
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
    repack, lanes = (
        (_gpt.repack_q8_0_rows, ref.q8_0_lanes) if fmt == "q8_0" else (_gpt.repack_q4_0_rows, ref.q4_0_lanes)
    )
    got_codes, got_scales = repack(blocks, k, padded_n, 32)
    np.testing.assert_array_equal(got_codes, lanes(codes))
    np.testing.assert_array_equal(got_scales, ref.scale_panels(scales))
    if pad:
        np.testing.assert_array_equal(got_codes[-1, :, 32 - pad :], 0 if fmt == "q8_0" else 0x88888888)
        np.testing.assert_array_equal(got_scales[-1, :, 32 - pad :], 0)


def test_repacking_refuses_blocks_that_are_not_whole_rows():
    with pytest.raises(ValueError, match="K = 40"):
        _gpt.repack_q8_0_rows(np.zeros(68, np.uint8), 40, 32, 32)
    with pytest.raises(ValueError, match="padded_n 16 must be at least the 20 rows"):
        _gpt.repack_q4_0_rows(np.zeros(20 * 18, np.uint8), 32, 16, 16)


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
            np.testing.assert_array_equal(_gpt.quantize_bf16(matrix), file_bits, err_msg=gguf_name)
            continue
        codes, scales = (_gpt.quantize_q8_0 if fmt == "q8_0" else _gpt.quantize_q4_0)(matrix)
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


def test_a_gguf_round_trips_through_save_gguf_of_the_loaded_model(tmp_path, weights):
    save_gguf(weights, CFG, tmp_path / "a.gguf", "q8_0")
    model = gpt.GPT.from_gguf(str(tmp_path / "a.gguf"))
    save_gguf(model, None, tmp_path / "b.gguf", "q8_0")
    a, b = gguf.GGUFReader(tmp_path / "a.gguf"), gguf.GGUFReader(tmp_path / "b.gguf")
    for ta, tb in zip(a.tensors, b.tensors, strict=True):
        assert ta.name == tb.name and ta.tensor_type == tb.tensor_type
        np.testing.assert_array_equal(np.asarray(ta.data), np.asarray(tb.data), err_msg=ta.name)


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


def test_save_gguf_refusals(tmp_path, weights):
    with pytest.raises(ValueError, match="format must be one of"):
        save_gguf(weights, CFG, tmp_path / "x.gguf", "q5_0")
    rope = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=96, block_size=32, pos_embedding="rope")
    with pytest.raises(ValueError, match="pos_embedding='rope' cannot be written"):
        save_gguf(gpt.GPT.random(rope), None, tmp_path / "x.gguf")
    odd = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=48, vocab_size=96, block_size=32)
    with pytest.raises(ValueError, match="token_embd.weight rows have 48 values, not a multiple of q8_0's block of 32"):
        save_gguf(gpt.GPT.random(odd), None, tmp_path / "x.gguf", "q8_0")
    assert not (tmp_path / "x.gguf").exists()


# -- tokenizer -----------------------------------------------------------------------------------

CORPUS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "Once upon a time, there was a little compiler that wanted to run GPT-2 quickly.",
    "The quick brown fox jumps over the lazy dog. It's 12:30 and we're done!",
] * 20


def byte_level_bpe(vocab_size=300):
    """A GPT-2-style tokenizer (byte-level BPE with <|endoftext|>), trained here: no network."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    assert tokenizer.get_vocab_size() == vocab_size
    return tokenizer


TEXTS = [
    "def fibonacci(n): return 42",
    "Once upon a time<|endoftext|>The quick brown fox",
    "  spaces,\ttabs\nand UTF-8: héllo wörld ✓ 日本",
]


def test_tokenizer_round_trips_through_gguf(tmp_path):
    tokenizer = byte_level_bpe()
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=300, block_size=32)
    save_gguf(exercising_weights(cfg, seed=2), cfg, tmp_path / "tok.gguf", "f16", tokenizer=tokenizer)
    meta = {name: field.contents() for name, field in gguf.GGUFReader(tmp_path / "tok.gguf").fields.items()}
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "gpt-2"
    vocab = tokenizer.get_vocab()
    assert meta["tokenizer.ggml.tokens"] == sorted(vocab, key=vocab.get)
    endoftext = vocab["<|endoftext|>"]
    assert meta["tokenizer.ggml.bos_token_id"] == meta["tokenizer.ggml.eos_token_id"] == endoftext
    assert meta["tokenizer.ggml.token_type"][endoftext] == gguf.TokenType.CONTROL
    assert len(meta["tokenizer.ggml.merges"]) == 300 - 256 - 1

    model = gpt.GPT.from_gguf(str(tmp_path / "tok.gguf"))
    assert isinstance(model.tokenizer, gpt.HFTokenizer) and model.tokenizer.vocab_size == 300
    for text in TEXTS:
        ids = tokenizer.encode(text).ids
        assert model.tokenizer.encode(text) == ids, text
        assert model.tokenizer.decode(ids) == tokenizer.decode(ids)
    assert endoftext in model.tokenizer.encode(TEXTS[1])  # the special token is one token
    assert len(model.tokenizer.encode(TEXTS[0])) < len(TEXTS[0].encode())  # merges are applied
    assert model.tokenizer.decode(model.tokenizer.encode(TEXTS[2])) == TEXTS[2]

    # Written again from the loaded model (its tokenizer by default): the same vocabulary.
    save_gguf(model, None, tmp_path / "again.gguf", "f32")
    again = {name: field.contents() for name, field in gguf.GGUFReader(tmp_path / "again.gguf").fields.items()}
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
        assert again[key] == meta[key], key


def test_a_smaller_tokenizer_is_padded_as_llama_cpp_does(tmp_path):
    tokenizer = byte_level_bpe(280)
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=288, block_size=32)
    save_gguf(exercising_weights(cfg), cfg, tmp_path / "pad.gguf", "f32", tokenizer=tokenizer)
    meta = {name: field.contents() for name, field in gguf.GGUFReader(tmp_path / "pad.gguf").fields.items()}
    assert meta["tokenizer.ggml.tokens"][280:] == [f"[PAD{i}]" for i in range(280, 288)]
    assert meta["tokenizer.ggml.token_type"][280:] == [gguf.TokenType.USER_DEFINED] * 8
    model = gpt.GPT.from_gguf(str(tmp_path / "pad.gguf"))
    assert model.tokenizer.encode(TEXTS[0]) == tokenizer.encode(TEXTS[0]).ids
    with pytest.raises(ValueError, match="token id 279, outside the model's vocabulary of 96"):
        save_gguf(exercising_weights(CFG), CFG, tmp_path / "x.gguf", tokenizer=tokenizer)


def test_a_gguf_tokenizer_that_does_not_fit_is_refused(tmp_path):
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=300, block_size=32)
    save_gguf(exercising_weights(cfg), cfg, tmp_path / "tok.gguf", "f32", tokenizer=byte_level_bpe())
    rewrite(
        tmp_path / "tok.gguf",
        tmp_path / "pre.gguf",
        set_keys={"tokenizer.ggml.pre": ("llama3", gguf.GGUFValueType.STRING)},
    )
    with pytest.raises(ValueError, match="tokenizer.ggml.pre 'llama3' is not supported"):
        gpt.GPT.from_gguf(str(tmp_path / "pre.gguf"))
    # Another kind of vocabulary (SentencePiece): loaded without a tokenizer.
    rewrite(
        tmp_path / "tok.gguf",
        tmp_path / "spm.gguf",
        set_keys={"tokenizer.ggml.model": ("llama", gguf.GGUFValueType.STRING)},
    )
    assert gpt.GPT.from_gguf(str(tmp_path / "spm.gguf")).tokenizer is None


# -- the command line ----------------------------------------------------------------------------


def run_cli(*args):
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    return subprocess.run([sys.executable, "-m", "gpt", *args], capture_output=True, text=True, env=env, timeout=600)


def test_generate_with_a_gguf_file(tmp_path):
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=300, block_size=32)
    path = str(tmp_path / "cli.gguf")
    save_gguf(exercising_weights(cfg, seed=9), cfg, path, "q8_0", tokenizer=byte_level_bpe())
    result = run_cli("generate", "--model", path, "--prompt", "def fib", "--max_new_tokens", "8", "--temperature", "0")
    assert result.returncode == 0, result.stderr
    model = gpt.GPT.from_gguf(path)
    prompt = model.tokenizer.encode("def fib")
    expected = "def fib" + model.tokenizer.decode(model.generate(prompt, max_new_tokens=8))
    assert result.stdout.split("\n[gpt]")[0] == expected
    assert f"[gpt] prompt: {len(prompt)} tokens" in result.stdout

    save_gguf(exercising_weights(CFG), CFG, tmp_path / "bare.gguf")  # vocabulary 96, no tokenizer
    bare = run_cli("generate", "--model", str(tmp_path / "bare.gguf"))
    assert bare.returncode == 2 and "no tokenizer" in bare.stderr
    missing = run_cli("generate", "--model", str(tmp_path / "nope.gguf"))
    assert missing.returncode == 2 and "no such GGUF file" in missing.stderr


def test_save_gguf_leaves_the_callers_arrays_writable(tmp_path, weights):
    """Writing a file reads the weights; it must not flip the caller's arrays to read-only."""
    mine = {name: value.copy() for name, value in weights.items()}
    save_gguf(mine, CFG, tmp_path / "w.gguf", "q8_0")
    assert all(value.flags.writeable for value in mine.values())
    mine["transformer.wte.weight"] += 1.0  # would raise on a read-only array


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
    actual = getattr(_gpt, f"dequantize_{fmt}_rows")(blocks)
    assert actual.shape == expected.shape == (2, 3, 4 * block) and actual.dtype == np.float32
    np.testing.assert_array_equal(actual.view(np.uint32), expected.astype(np.float32).view(np.uint32))
    with pytest.raises(ValueError, match="whole blocks"):
        getattr(_gpt, f"dequantize_{fmt}_rows")(blocks[..., :-1].copy())
