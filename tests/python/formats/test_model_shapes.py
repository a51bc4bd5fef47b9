"""tools/dev/make_gguf.py: random-weight GGUF files in real models' shapes, with the tensor types
llama.cpp's quantizer gives each format, that gpt loads and runs (CI writes 2-layer files of
SmolLM2-135M's widths: the same code paths as the big shapes, in seconds)."""

import importlib.util
import os

import gguf
import numpy as np
import pytest

import gpt
from gpt.gguf_file import native_weights_format

T = gguf.GGMLQuantizationType
spec = importlib.util.spec_from_file_location("make_gguf", os.path.join("tools", "dev", "make_gguf.py"))
make_gguf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_gguf)


def test_q4_k_m_gives_more_bits_where_llama_cpp_does():
    shape = make_gguf.SHAPES["smollm2-1.7b"]  # 24 layers: the first and last 3 get more bits
    types = make_gguf.tensor_types(shape, "q4_k_m", pure=False)
    more = [i for i in range(24) if types[f"blk.{i}.attn_v.weight"] == T.Q6_K]
    assert more == [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]
    assert all(types[f"blk.{i}.ffn_down.weight"] == types[f"blk.{i}.attn_v.weight"] for i in range(24))
    assert {types[f"blk.{i}.attn_q.weight"] for i in range(24)} == {T.Q4_K}
    assert types["token_embd.weight"] == T.Q6_K  # tied: the embedding is the output matrix
    untied = make_gguf.tensor_types(make_gguf.SHAPES["llama-3.1-8b"], "q4_0", pure=False)
    assert (untied["token_embd.weight"], untied["output.weight"]) == (T.Q4_0, T.Q6_K)
    pure = make_gguf.tensor_types(shape, "q4_k_m", pure=True)
    assert set(pure.values()) == {T.Q4_K}


def test_the_shapes_are_the_real_models_parameter_counts():
    def parameters(name):
        shape = make_gguf.SHAPES[name]
        return sum(rows * columns for rows, columns in make_gguf.matrix_shapes(shape).values())

    # HF's model cards (norms, a few hundred thousand, left out): 1.7B, 1.24B, 3.2B, 8.0B.
    assert 1.70e9 < parameters("smollm2-1.7b") < 1.72e9
    assert 1.23e9 < parameters("llama-3.2-1b") < 1.24e9
    assert 3.2e9 < parameters("llama-3.2-3b") < 3.22e9
    assert 8.0e9 < parameters("llama-3.1-8b") < 8.04e9


# q4_k_m: Q4_K, Q6_K, Q5_0 and Q8_0; q5_k_m: Q5_K, Q6_K, Q5_0 and Q8_0 (576 wide: the K-quants only n_ff deep).
@pytest.mark.parametrize("fmt", ["q4_0", "q4_k_m", "q5_k_m", "f16"])
def test_a_two_layer_file_loads_and_runs_in_gpt(tmp_path, fmt):
    path = str(tmp_path / f"tiny.{fmt}.gguf")
    shape = make_gguf.dataclasses.replace(make_gguf.SHAPES["smollm2-135m"], n_layer=2, context=512)
    make_gguf.write(path, shape, fmt)
    reader = gguf.GGUFReader(path)
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        if tensor.name.endswith("_norm.weight"):
            assert abs(values.mean() - 1) < 0.05
        else:  # GPT-2's initialisation, within a factor of two
            assert 0.01 < values.std() < 0.04, (tensor.name, tensor.tensor_type.name, values.std())
    weights = native_weights_format(path)
    model = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights=weights))
    assert (model.config.n_layer, model.config.n_embd, model.config.n_kv_head, model.config.block_size) == (
        2,
        576,
        3,
        512,
    )
    if fmt == "q5_k_m":  # under "auto", layer 0's Q5_K down projection runs in its own format
        auto = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="auto"))
        assert dict(auto.options.weight_formats)["model.layers.0.mlp.down_proj.weight"] == "q5_k"
        assert np.isfinite(auto.forward(auto.tokenizer.encode("The capital of France is"))).all()
    assert model.tokenizer is not None  # SmolLM2's, copied from the installed file
    logits = model.forward(model.tokenizer.encode("The capital of France is"))
    assert np.isfinite(logits).all() and logits.std() > 0
