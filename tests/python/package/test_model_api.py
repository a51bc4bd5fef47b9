"""The gpt.GPT API: constructors, configuration checks, bad input, compile cache, IR stages."""

import dataclasses
import json
import os
import struct

import numpy as np
import pytest
import safetensors.numpy

import gpt
from gpt.weights import expected_shapes, random_weights
from shapes import NANO, config, exercising_weights

CFG = config(NANO)


@pytest.fixture(scope="module")
def model():
    return gpt.GPT.random(CFG, seed=0)


def test_random_is_deterministic_in_seed():
    a, b, c = (random_weights(CFG, s) for s in (0, 0, 1))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["transformer.wte.weight"], c["transformer.wte.weight"])


def test_gpt2_initialisation_statistics():
    w = random_weights(config(dict(NANO, n_layer=8)), 0)
    assert abs(w["transformer.wte.weight"].std() - 0.02) < 0.002
    assert abs(w["transformer.h.0.mlp.c_proj.weight"].std() - 0.02 / 4) < 0.001  # 0.02 / sqrt(2 * 8)
    assert np.all(w["transformer.h.0.ln_1.weight"] == 1) and np.all(w["transformer.h.0.attn.c_attn.bias"] == 0)


def test_forward_shape_and_determinism(model):
    a = model.forward([1, 2, 3])
    assert a.shape == (3, 256) and a.dtype == np.float32
    np.testing.assert_array_equal(a, model.forward(np.array([1, 2, 3], dtype=np.int32)))


def test_second_call_of_same_bucket_does_not_compile(model):
    model.forward([4] * 5)
    before = model.compiled_lengths()
    model.forward([4] * 6)  # same bucket (8)
    model.forward([4] * 3)
    assert model.compiled_lengths() == before
    model.forward([4] * 9)  # next bucket (16) compiles once
    assert set(model.compiled_lengths()) == set(before) | {16}


def test_buckets_are_powers_of_two_capped_at_block_size(model):
    assert [model.bucket_for(n) for n in (1, 8, 9, 33, 100, 128)] == [8, 8, 16, 64, 128, 128]
    odd = gpt.GPT.random(gpt.GPTConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=64, block_size=100))
    assert odd.bucket_for(70) == 100
    odd.forward(list(range(64)) + list(range(36)))  # exactly block_size tokens


@pytest.mark.parametrize(
    "bad, error, message",
    [
        ([], ValueError, "at least one token"),
        ([1, 256], ValueError, r"token id 256 is out of range \[0, vocab_size=256\)"),
        ([-1], ValueError, "token id -1 is out of range"),
        ([[1, 2]], ValueError, "1-D sequence"),
        ([1.5, 2.0], TypeError, "must be integers"),
        (list(range(129)), ValueError, "longer than block_size=128"),
    ],
)
def test_bad_ids_raise(model, bad, error, message):
    with pytest.raises(error, match=message):
        model.forward(bad)


def test_wrong_weights_are_named():
    weights = exercising_weights(CFG)
    bad_shape = dict(weights, **{"transformer.h.1.mlp.c_fc.weight": np.zeros((64, 255), np.float32)})
    with pytest.raises(
        ValueError, match=r"transformer.h.1.mlp.c_fc.weight has shape \(64, 255\), expected \(64, 256\)"
    ):
        gpt.GPT.from_weights(CFG, bad_shape)
    bad_dtype = dict(weights, **{"transformer.ln_f.bias": np.zeros(64, np.int32)})
    with pytest.raises(ValueError, match="transformer.ln_f.bias has dtype int32"):
        gpt.GPT.from_weights(CFG, bad_dtype)
    missing = {k: v for k, v in weights.items() if k != "transformer.h.0.ln_2.weight"}
    with pytest.raises(ValueError, match="missing parameter.*transformer.h.0.ln_2.weight"):
        gpt.GPT.from_weights(CFG, missing)
    extra = dict(weights, **{"transformer.h.2.ln_1.weight": np.ones(64, np.float32)})
    with pytest.raises(ValueError, match="unexpected parameter.*transformer.h.2.ln_1.weight"):
        gpt.GPT.from_weights(CFG, extra)
    nan = dict(weights, **{"transformer.wpe.weight": np.full((128, 64), np.nan, np.float32)})
    with pytest.raises(ValueError, match="transformer.wpe.weight contains NaN"):
        gpt.GPT.from_weights(CFG, nan)


def exercising_weights_are_not_modified_and_float64_is_converted():
    weights = exercising_weights(CFG)
    copies = {k: v.copy() for k, v in weights.items()}
    model = gpt.GPT.from_weights(CFG, {k: v.astype(np.float64) for k, v in weights.items()})
    model.forward([1, 2, 3, 4, 5])
    assert all(np.array_equal(weights[k], copies[k]) for k in weights)
    np.testing.assert_allclose(model.forward([3, 1]), gpt.GPT.from_weights(CFG, weights).forward([3, 1]), atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(NANO, n_embd=65), "divisible by n_head"),
        (dict(NANO, n_layer=0), "n_layer must be a positive int"),
        (dict(NANO, pos_embedding="alibi"), "pos_embedding must be one of"),
        (dict(NANO, n_embd=12, n_head=4, pos_embedding="rope"), "even head size"),
        (dict(NANO, layer_norm_eps=0.0), "layer_norm_eps must be a positive number"),
        (dict(NANO, layer_norm_eps=True), "layer_norm_eps must be a positive number"),
        (dict(NANO, n_layer=2**70), "n_layer=1180591620717411303424 is larger than 2147483647"),
    ],
)
def test_bad_config_raises(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gpt.GPTConfig(**kwargs)


def test_bad_compile_options_raise():
    with pytest.raises(ValueError, match="pipeline must be one of"):
        gpt.CompileOptions(pipeline="O3")
    with pytest.raises(ValueError, match="threads must be None or a positive int"):
        gpt.CompileOptions(threads=0)
    with pytest.raises(ValueError, match="disk_cache must be a bool, got 'no'"):
        gpt.CompileOptions(disk_cache="no")
    assert gpt.CompileOptions(cache_dir="~/x").resolved_cache_dir() == os.path.join(os.path.expanduser("~"), "x")


def test_save_object_needs_a_path(model):
    with pytest.raises(TypeError, match="path must be a str or os.PathLike, got NoneType"):
        model.save_object(None)


def test_from_pretrained_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        gpt.GPT.from_pretrained(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        gpt.GPT.from_pretrained(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"n_layer": 1}))
    with pytest.raises(FileNotFoundError, match="model.safetensors is missing"):
        gpt.GPT.from_pretrained(str(tmp_path))


def write_checkpoint(directory, hf_config, tensors):
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(json.dumps(hf_config))
    safetensors.numpy.save_file(tensors, str(directory / "model.safetensors"))


HF_NANO = dict(model_type="gpt2", n_layer=2, n_head=4, n_embd=64, vocab_size=256, n_positions=128)


@pytest.mark.parametrize(
    "option, value",
    [
        ("tie_word_embeddings", False),
        ("scale_attn_weights", False),
        ("scale_attn_by_inverse_layer_idx", True),
        ("add_cross_attention", True),
        ("model_type", "mistral"),  # llama and qwen2 have their own loader (gpt/hf_checkpoint.py)
    ],
)
def test_from_pretrained_refuses_configs_it_does_not_implement(tmp_path, option, value):
    write_checkpoint(tmp_path, dict(HF_NANO, **{option: value}), random_weights(CFG))
    with pytest.raises(ValueError, match=f"{option} {value!r} is not supported|{option}={value!r} is not supported"):
        gpt.GPT.from_pretrained(str(tmp_path))


def test_from_pretrained_refuses_an_untied_head(tmp_path):
    weights = random_weights(CFG)
    weights["lm_head.weight"] = weights["transformer.wte.weight"] + 1.0
    write_checkpoint(tmp_path, HF_NANO, weights)
    with pytest.raises(ValueError, match="lm_head.weight differs from transformer.wte.weight"):
        gpt.GPT.from_pretrained(str(tmp_path))
    weights["lm_head.weight"] = weights["transformer.wte.weight"].copy()  # tied: accepted
    write_checkpoint(tmp_path, HF_NANO, weights)
    assert gpt.GPT.from_pretrained(str(tmp_path)).forward([1, 2]).shape == (2, 256)


def test_from_pretrained_names_unreadable_files_and_tensors(tmp_path):
    write_checkpoint(tmp_path, HF_NANO, random_weights(CFG))
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with pytest.raises(ValueError, match="model.safetensors is not a readable safetensors file"):
        gpt.GPT.from_pretrained(str(tmp_path))
    # An fp8 tensor (safetensors' format: header length, JSON header, data); F32, F16, BF16 and
    # F64 are read (tests/python/models/test_gguf.py loads fp16 and bf16 checkpoints).
    header = json.dumps({"transformer.wte.weight": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [0, 4]}})
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode() + bytes(4))
    with pytest.raises(ValueError, match="tensor transformer.wte.weight has dtype F8_E4M3, which is not a floating"):
        gpt.GPT.from_pretrained(str(tmp_path))


def test_ir_stages(model):
    transformer = model.ir("transformer")
    assert "transformer.causal_attention" in transformer and "tensor<*xf32>" not in transformer
    linalg = model.ir("linalg")
    assert "linalg.transpose" in linalg and "gpt.packed_matmul" in linalg and "transformer." not in linalg
    # Decode's one query takes a dot product with each cached key row (a row reduction), instead
    # of reading the keys column by column.
    step = model.ir("linalg", entry="step")
    assert "linalg.matmul_transpose_b" not in step and 'iterator_types = ["parallel", "reduction"]' in step
    vectorized = model.ir("vectorized")  # every matmul of nano tiles evenly: none stays a linalg op
    assert "vector.outerproduct" in vectorized and "linalg.matmul" not in vectorized
    assert "memref<8x64xf32>" in model.ir("bufferized")
    assert "llvm.func @_mlir_ciface_forward" in model.ir("llvm")
    assert "tensor<16x64xf32>" in model.ir("transformer", seq_len=16)
    with pytest.raises(ValueError, match="unknown stage"):
        model.ir("asm")
    with pytest.raises(ValueError, match="outside"):
        model.ir("linalg", seq_len=1000)


def test_public_names():
    assert set(gpt.__all__) >= {"GPT", "GPTConfig", "CompileOptions", "GenerationStats", "KVCache", "STAGES"}
    assert all(hasattr(gpt, name) for name in gpt.__all__)
    assert [f.name for f in dataclasses.fields(gpt.GenerationStats)] == [
        "prompt_tokens",
        "generated_tokens",
        "prompt_seconds",
        "generate_seconds",
        "compile_seconds",
    ]


def test_compile_statistics_are_methods_and_settings_are_properties(model):
    for name in ("compiled_lengths", "compiled_steps", "disk_cache_hits", "compile_seconds"):
        assert callable(getattr(model, name)), name
    assert isinstance(model.config, gpt.GPTConfig) and isinstance(model.options, gpt.CompileOptions)
    model.forward([1, 2])
    assert model.compile_seconds() >= sum(model.compiled_lengths().values()) > 0


def test_expected_shapes_use_hf_names():
    shapes = expected_shapes(CFG)
    assert shapes["transformer.h.0.attn.c_attn.weight"] == (64, 192)
    assert shapes["transformer.h.1.mlp.c_proj.weight"] == (256, 64)
    assert "transformer.wpe.weight" not in expected_shapes(config(NANO, "rope"))


@pytest.mark.parametrize("pipeline", ["baseline", "default"])
def test_editing_the_callers_arrays_later_does_not_change_the_model(pipeline):
    weights = exercising_weights(CFG)
    model = gpt.GPT.from_weights(CFG, weights, gpt.CompileOptions(pipeline=pipeline, disk_cache=False))
    before = model.forward([5, 6, 7])
    # Every kind of parameter: the tied embedding, positions, a bias, a LayerNorm scale, a matmul.
    for name in (
        "transformer.wte.weight",
        "transformer.wpe.weight",
        "transformer.h.0.attn.c_attn.bias",
        "transformer.h.1.ln_2.weight",
        "transformer.h.0.mlp.c_fc.weight",
    ):
        weights[name] += 1.0
    np.testing.assert_array_equal(model.forward([5, 6, 7]), before)
    assert not model.state_dict()["transformer.wte.weight"].flags.writeable
