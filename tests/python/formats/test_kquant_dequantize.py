"""The compiler's dequantizers of llama.cpp's blocks (every type of _gpt.gguf_block_types;
each format's file of cc/kernels/formats/) against gguf.quants, bit for bit, and the GGUF loader using them;
and the layout kernels' thread split leaving their results unchanged."""

import ctypes
import importlib.util
import os

import gguf
import gpt_kernels_testing
import numpy as np
import pytest

import gpt
from gpt import _gpt, architecture_weights, gguf_file, gguf_llama
from gpt.gguf_file import QuantizedTensor, load_gguf

T = gguf.GGMLQuantizationType
# type -> byte offsets of the block's fp16 fields (scales, mins), from ggml-common.h's block structs
FP16_OFFSETS = {
    T.Q8_0: (0,),
    T.Q4_0: (0,),
    T.Q4_1: (0, 2),
    T.Q5_0: (0,),
    T.Q5_1: (0, 2),
    T.Q4_K: (0, 2),
    T.Q5_K: (0, 2),
    T.Q6_K: (208,),
}
KERNELS = tuple(FP16_OFFSETS)


def test_the_block_type_table_is_ggmls():
    """_gpt.gguf_block_types (the one table the loaders' checks and dequantization read) against
    gguf's block sizes and ggml-common.h's fp16 fields."""
    rows = {name: (values, nbytes, halves) for name, values, nbytes, halves in _gpt.gguf_block_types()}
    assert set(rows) == {qtype.name.lower() for qtype in FP16_OFFSETS}
    for qtype, offsets in FP16_OFFSETS.items():
        values, nbytes, halves = rows[qtype.name.lower()]
        assert (values, nbytes) == gguf.GGML_QUANT_SIZES[qtype]
        assert tuple(halves.values()) == offsets


def random_blocks(qtype, rows: int, k: int, seed: int) -> np.ndarray:
    """Rows of random blocks: every code and sub-block scale bit pattern, and finite fp16 fields
    (normal, subnormal, zero and negative; a NaN would compare unequal to itself)."""
    values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(rows, k // values, block_bytes), dtype=np.uint8)
    count = rows * (k // values)
    halves = np.concatenate(
        [
            np.array([0.0, -0.0, 6e-8, -65504.0], dtype=np.float16),  # zero, a subnormal, the largest
            rng.standard_normal(count).astype(np.float16),
        ]
    )[:count]
    for offset in FP16_OFFSETS[qtype]:
        blocks.reshape(count, block_bytes)[:, offset : offset + 2] = (
            rng.permutation(halves).view(np.uint8).reshape(-1, 2)
        )
    return blocks.reshape(rows, -1)


@pytest.mark.parametrize("qtype", list(KERNELS), ids=lambda t: t.name)
@pytest.mark.parametrize("threads", [1, 3])
def test_dequantizers_match_gguf_bit_for_bit(qtype, threads):
    k = 512 if qtype in (T.Q4_K, T.Q5_K, T.Q6_K) else 96
    blocks = random_blocks(qtype, rows=37, k=k, seed=int(qtype))
    ours = _gpt.dequantize_rows(qtype.name.lower(), blocks, threads=threads)
    theirs = gguf.quants.dequantize(blocks, qtype)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape == (37, k)
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("qtype", list(KERNELS), ids=lambda t: t.name)
def test_dequantizers_refuse_partial_blocks(qtype):
    block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
    with pytest.raises(ValueError, match=f"whole blocks of {block_bytes} bytes"):
        _gpt.dequantize_rows(qtype.name.lower(), np.zeros((2, block_bytes + 1), dtype=np.uint8))


class _Tensor:
    """What gguf_file._dequantize reads of a gguf.ReaderTensor."""

    def __init__(self, qtype, data, shape):
        self.name, self.tensor_type, self.data, self.shape = "token_embd.weight", qtype, data, list(shape[::-1])


@pytest.mark.parametrize("qtype", list(KERNELS), ids=lambda t: t.name)
def test_the_loader_dequantizes_these_types_with_the_compilers_kernels(monkeypatch, qtype):
    k = 256 if qtype in (T.Q4_K, T.Q5_K, T.Q6_K) else 64
    blocks = random_blocks(qtype, rows=5, k=k, seed=7)
    expected = gguf.quants.dequantize(blocks, qtype).astype(np.float32)

    def refuse(*args, **kwargs):
        raise AssertionError("gguf.quants.dequantize was called")

    monkeypatch.setattr(gguf.quants, "dequantize", refuse)
    values = gguf_file._dequantize(_Tensor(qtype, blocks, (5, k)), (5, k), "model.gguf")
    np.testing.assert_array_equal(values.view(np.uint32), expected.view(np.uint32))


def test_the_loader_names_a_non_finite_scale_in_these_types():
    blocks = random_blocks(T.Q6_K, rows=3, k=256, seed=3)
    blocks[1, 208:210] = np.array([np.inf], dtype=np.float16).view(np.uint8)
    with pytest.raises(gguf_file.ModelFileError, match=r"model.gguf: tensor token_embd.weight \(Q6_K\) holds"):
        gguf_file._dequantize(_Tensor(T.Q6_K, blocks, (3, 256)), (3, 256), "model.gguf")


@pytest.mark.parametrize("name, bytes_per_block", [("q8_0", 34), ("q4_0", 18), ("q4_1", 20)])
def test_repacking_on_several_threads_gives_the_same_layout(name, bytes_per_block):
    rng = np.random.default_rng(11)
    k, n, width = 128, 200, 16
    blocks = rng.integers(0, 256, size=(n, k // 32, bytes_per_block), dtype=np.uint8)
    # Finite fp16 fields (the scale, and q4_1's min; an exponent below 31): the repacking checks them.
    blocks[:, :, 1 : 4 if name == "q4_1" else 2 : 2] &= 0xBF
    blocks = blocks.reshape(n, -1)
    one = gpt_kernels_testing.repack_rows(name, blocks, k, 208, width, threads=1)
    for threads in (2, 5, 64):  # more threads than panels too
        many = gpt_kernels_testing.repack_rows(name, blocks, k, 208, width, threads=threads)
        for a, b in zip(one, many, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "qtype, stored",
    [(T.Q8_0, "q8_0"), (T.Q4_0, "q4_0"), (T.Q4_1, "q4_1"), (T.Q4_K, "q4_k"), (T.Q5_K, "q5_k"), (T.Q6_K, "q6_k")],
)
def test_rows_llama_cpp_permuted_are_repacked_in_the_models_order_without_a_copy(qtype, stored):
    """A `llama` file's q/k rows are repacked as they lie in the file, read within each head in the
    order unpermute_rows gives (what the model's rope expects): the same bits as the un-permuted copy."""
    k, heads, head_rows, width = 512, 3, 8, 16
    blocks = random_blocks(qtype, rows=heads * head_rows, k=k, seed=13).reshape(heads * head_rows, -1)
    copied = np.ascontiguousarray(gguf_llama.unpermute_rows(blocks, heads))
    assert not np.array_equal(copied, blocks)
    expected = gpt_kernels_testing.repack_rows(stored, copied, k, 32, width, threads=2)
    got = gpt_kernels_testing.repack_rows(stored, blocks, k, 32, width, threads=2, permuted_heads=heads)
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(
        ValueError, match="24 rows is not an even row count for each of 8 permuted heads"
    ):  # heads of 3 rows cannot be halves of pairs
        gpt_kernels_testing.repack_rows(stored, blocks, k, 32, width, permuted_heads=8)


def test_lane_packing_on_several_threads_gives_the_same_layout():
    rng = np.random.default_rng(12)
    matrix = rng.standard_normal((64, 96)).astype(np.float32)
    codes = rng.integers(-127, 128, size=(64, 96), dtype=np.int8)
    nibbles = rng.integers(0, 16, size=(64, 96), dtype=np.uint8)
    for fmt, source in (("bf16", matrix), ("q8_0", codes), ("q4_0", nibbles)):
        np.testing.assert_array_equal(
            gpt_kernels_testing.pack_lanes(fmt, source, 16, threads=1),
            gpt_kernels_testing.pack_lanes(fmt, source, 16, threads=4),
        )


def _make_gguf():
    spec = importlib.util.spec_from_file_location("make_gguf", os.path.join("tools", "dev", "make_gguf.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("fmt", ["q4_0", "q4_1", "q8_0"])
def test_fused_weights_repacked_from_their_parts_equal_the_concatenated_blocks(tmp_path, fmt):
    """q/k/v and gate/up given as the file's separate blocks (to_compiler_quantized(concatenate=False))
    store the very bytes, and compute the very logits, of their concatenation."""
    make_gguf = _make_gguf()
    path = str(tmp_path / f"small.{fmt}.gguf")
    shape = make_gguf.dataclasses.replace(
        make_gguf.SHAPES["smollm2-135m"], n_layer=2, vocab_size=512, context=64, tokenizer=None
    )
    make_gguf.write(path, shape, fmt, pure=True)
    options = gpt.CompileOptions(weights=fmt, disk_cache=False)
    stored, logits = [], []
    for concatenate in (True, False):
        config, weights, _ = load_gguf(path, keep_quantized=fmt)
        quantized = {n: (w.format, w.blocks) for n, w in weights.items() if isinstance(w, QuantizedTensor)}
        floats = architecture_weights.to_compiler(config, {n: w for n, w in weights.items() if n not in quantized})
        quantized = architecture_weights.to_compiler_quantized(config, quantized, concatenate=concatenate)
        if not concatenate:
            assert isinstance(quantized["model.layers.0.self_attn.qkv_proj.weight"][1], list)
        model = gpt.GPT(config, floats, options, _copy_weights=False, _quantized=quantized)
        stored.append(
            {name: ctypes.string_at(address, size) for name, address, size in model._compiled.stored_arguments()}
        )
        logits.append(model._compiled.forward(np.array([1, 2, 3, 500], dtype=np.int64)))
    assert stored[0].keys() == stored[1].keys() and len(stored[0]) > 0
    for name in stored[0]:
        assert stored[0][name] == stored[1][name], name
    np.testing.assert_array_equal(logits[0], logits[1])


def test_set_weights_refuses_a_part_that_is_not_whole_rows(tmp_path):
    make_gguf = _make_gguf()
    path = str(tmp_path / "small.q8_0.gguf")
    shape = make_gguf.dataclasses.replace(
        make_gguf.SHAPES["smollm2-135m"], n_layer=1, vocab_size=512, context=64, tokenizer=None
    )
    make_gguf.write(path, shape, "q8_0", pure=True)
    config, weights, _ = load_gguf(path, keep_quantized="q8_0")
    quantized = {n: (w.format, w.blocks) for n, w in weights.items() if isinstance(w, QuantizedTensor)}
    floats = architecture_weights.to_compiler(config, {n: w for n, w in weights.items() if n not in quantized})
    quantized = architecture_weights.to_compiler_quantized(config, quantized, concatenate=False)
    fmt, parts = quantized["model.layers.0.self_attn.qkv_proj.weight"]
    flat = np.concatenate([p.reshape(-1) for p in parts])
    row = parts[0].shape[1]  # bytes of one row: split one row in two
    quantized["model.layers.0.self_attn.qkv_proj.weight"] = (fmt, [flat[: row // 2], flat[row // 2 :]])
    with pytest.raises(ValueError, match=r"qkv_proj.weight: a part of \d+ bytes of q8_0 blocks is not whole rows"):
        gpt.GPT(config, floats, gpt.CompileOptions(weights="q8_0", disk_cache=False), _quantized=quantized)
