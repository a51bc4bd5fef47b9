"""GGUF files of the Llama family (gpt.gguf_llama): the real SmolLM2-135M-Instruct file against
transformers' own GGUF loader and against llama.cpp's rotary embedding, and small `llama` and
`qwen2` files written with gguf.GGUFWriter as llama.cpp's converter writes them (q/k rows
permuted for `llama`) from random HF LlamaForCausalLM / Qwen2ForCausalLM weights."""

import math

import gguf
import gpt_kernels_testing
import numpy as np
import pytest
import torch
import transformers

import gpt
from gpt import ModelFileError, architectures, gguf_llama
from gpt import models as installed

T = gguf.GGMLQuantizationType
ROPE_BASE = 50000.0


# -- the real file -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2():
    path = installed.find("smollm2")
    config, weights, tokenizer = gguf_llama.load(path)
    return path, config, weights, tokenizer


def test_smollm2_config_and_tensors(smollm2):
    _, config, weights, tokenizer = smollm2
    assert (config.architecture, config.n_layer, config.n_embd, config.n_head, config.n_kv_head) == (
        "llama",
        30,
        576,
        9,
        3,
    )
    assert (config.head_size, config.n_ff, config.vocab_size, config.block_size) == (64, 1536, 49152, 8192)
    assert (config.norm, config.mlp, config.pos_embedding) == ("rms", "swiglu", "rope")
    assert (config.layer_norm_eps, config.rope_base, config.rope_layout, config.rope_scaling) == (
        1e-5,
        100000.0,
        "half",
        None,
    )
    assert config.tied_head and "lm_head.weight" not in weights
    shapes = architectures.hf_shapes(config)
    assert len(weights) == len(shapes) == 272  # 30 x 9 + embedding + final norm
    assert {name: w.shape for name, w in weights.items()} == shapes
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (192, 576)  # 3 KV heads of 64
    assert shapes["model.layers.29.mlp.down_proj.weight"] == (576, 1536)
    assert all(w.dtype == np.float32 and np.isfinite(w).all() for w in weights.values())
    assert tokenizer is not None and tokenizer.eos_token_id == 2


def test_smollm2_weights_equal_transformers_gguf_loader(smollm2):
    """transformers reads GGUF files into HF state dicts with code of its own (gguf's dequantize,
    its own reverse of llama.cpp's q/k permutation): every tensor must be bit-identical."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path, config, weights, _ = smollm2
    read = load_gguf_checkpoint(path, return_tensors=False)["config"]
    assert (read["num_key_value_heads"], read["intermediate_size"], read["rope_theta"]) == (3, 1536, 100000.0)
    hf_config = transformers.LlamaConfig(**read)
    with torch.device("meta"):
        skeleton = transformers.LlamaForCausalLM(hf_config)
    tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=skeleton)["tensors"]
    assert set(tensors) == set(weights)
    for name, value in weights.items():
        np.testing.assert_array_equal(np.asarray(tensors[name]), value, err_msg=name)


def rope(x, positions, base, layout):
    """Rotary embedding of x [T, heads, d] in float64: "interleaved" rotates rows (2i, 2i+1)
    (llama.cpp's mode NORM, what it runs on a `llama` file's q/k as stored), "half" rotates
    (i, i + d/2) (NeoX and HF), both by positions * base^(-2i/d)."""
    d = x.shape[-1]
    angles = positions[:, None, None] * base ** (-np.arange(0, d, 2) / d)
    cos, sin = np.cos(angles), np.sin(angles)
    out = np.empty_like(x)
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    else:
        a, b = x[..., : d // 2], x[..., d // 2 :]
        out[..., : d // 2], out[..., d // 2 :] = a * cos - b * sin, a * sin + b * cos
    return out


def test_smollm2_attention_scores_equal_llama_cpps_on_the_stored_rows(smollm2):
    """What un-permuting must preserve: llama.cpp rotates the file's q/k rows as stored, in
    interleaved pairs; the loaded (HF-order) rows rotated as rotate-half pairs give the same q.k
    scores for every query head against its KV head, at any positions."""
    path, config, weights, _ = smollm2
    reader = gguf.GGUFReader(path)
    stored = {
        t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        for t in reader.tensors
        if t.name.startswith("blk.7.attn_")
    }
    x = np.random.default_rng(0).standard_normal((5, config.n_embd))
    positions = np.array([0, 1, 17, 1000, 8000], np.float64)
    group = config.n_head // config.n_kv_head

    def scores(wq, wk, layout):
        q = rope((x @ wq.T).reshape(5, config.n_head, -1), positions, config.rope_base, layout)
        k = rope((x @ wk.T).reshape(5, config.n_kv_head, -1), positions, config.rope_base, layout)
        return np.einsum("thd,shd->hts", q, np.repeat(k, group, axis=1))

    layer = "model.layers.7.self_attn"
    expected = scores(stored["blk.7.attn_q.weight"], stored["blk.7.attn_k.weight"], "interleaved")
    actual = scores(
        weights[f"{layer}.q_proj.weight"].astype(np.float64),
        weights[f"{layer}.k_proj.weight"].astype(np.float64),
        "half",
    )
    np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())
    # and the stored rows, read as HF's, would not: the un-permutation is needed.
    wrong = scores(stored["blk.7.attn_q.weight"], stored["blk.7.attn_k.weight"], "half")
    assert np.abs(wrong - expected).max() > 0.1 * np.abs(expected).max()


# -- small files, written as llama.cpp's converter writes them ---------------------------------


def llama_cpp_permute(weights, n_head, n_head_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute, as it is there."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def hf_model(architecture, tied, n_ff=96, seed=0):
    """A random HF model (config, state dict as float32 numpy), GQA 4 query heads over 2."""
    torch.manual_seed(seed)
    kwargs = dict(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=n_ff,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        rope_theta=ROPE_BASE,
        tie_word_embeddings=tied,
    )
    if architecture == "llama":
        config, model = transformers.LlamaConfig(**kwargs), None
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.Qwen2Config(**kwargs)
        model = transformers.Qwen2ForCausalLM(config)
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    for name, value in state.items():  # norms and biases away from their initial 1 and 0
        if value.ndim == 1:
            state[name] = value + np.random.default_rng(seed).standard_normal(value.shape).astype(np.float32) * 0.1
    if tied:
        del state["lm_head.weight"]
    return config, state


GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf_name):
    if hf_name in GGUF_NAMES:
        return GGUF_NAMES[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    return f"blk.{layer}.{GGUF_NAMES[rest]}"


def write_file(
    path, architecture, hf_config, state, types=None, meta=None, extra=None, drop=(), file_architecture=None
):
    """A GGUF file as convert_hf_to_gguf.py writes one (metadata keys, names, q/k permuted for
    `llama`), each 2-D tensor in types.get(hf name, F32) (norms and biases stay F32). `meta`
    adds or replaces metadata keys {key: (GGUFWriter kind, value)}."""
    types = types or {}
    a, c = architecture, hf_config
    keys = {
        f"{a}.block_count": ("uint32", c.num_hidden_layers),
        f"{a}.context_length": ("uint32", c.max_position_embeddings),
        f"{a}.embedding_length": ("uint32", c.hidden_size),
        f"{a}.feed_forward_length": ("uint32", c.intermediate_size),
        f"{a}.attention.head_count": ("uint32", c.num_attention_heads),
        f"{a}.attention.head_count_kv": ("uint32", c.num_key_value_heads),
        f"{a}.rope.freq_base": ("float32", ROPE_BASE),
        f"{a}.attention.layer_norm_rms_epsilon": ("float32", c.rms_norm_eps),
        f"{a}.rope.dimension_count": ("uint32", c.hidden_size // c.num_attention_heads),
        f"{a}.vocab_size": ("uint32", c.vocab_size),
    }
    keys.update(meta or {})
    writer = gguf.GGUFWriter(str(path), arch=file_architecture or architecture)
    for key, (kind, value) in keys.items():
        getattr(writer, f"add_{kind}")(key, value)
    for name, value in state.items():
        if name in drop:
            continue
        if architecture == "llama" and ".q_proj." in name:
            value = llama_cpp_permute(value, c.num_attention_heads, c.num_attention_heads)
        if architecture == "llama" and ".k_proj." in name:
            value = llama_cpp_permute(value, c.num_attention_heads, c.num_key_value_heads)
        kind = types.get(name, T.F32) if value.ndim == 2 else T.F32
        data = value if kind == T.F32 else gguf.quants.quantize(value, kind)
        writer.add_tensor(gguf_name(name), data, raw_dtype=kind)
    for name, (data, kind) in (extra or {}).items():
        writer.add_tensor(name, data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


@pytest.mark.parametrize("architecture, tied", [("llama", True), ("llama", False), ("qwen2", True), ("qwen2", False)])
def test_f32_files_read_back_as_the_hf_weights(tmp_path, architecture, tied):
    hf_config, state = hf_model(architecture, tied)
    path = write_file(tmp_path / "m.gguf", architecture, hf_config, state)
    config, weights, tokenizer = gguf_llama.load(path)
    assert (config.architecture, config.n_layer, config.n_head, config.n_kv_head, config.n_embd) == (
        architecture,
        2,
        4,
        2,
        64,
    )
    assert (config.n_ff, config.vocab_size, config.block_size, config.tied_head) == (96, 96, 128, tied)
    assert (config.layer_norm_eps, config.rope_base, config.rope_layout) == (1e-6, 50000.0, "half")
    assert config.qkv_bias == (architecture == "qwen2")
    assert tokenizer is None
    # Exactly HF's tensors: the q/k permutation of a `llama` file undone, a `qwen2` one untouched.
    assert weights.keys() == state.keys()
    for name in state:
        np.testing.assert_array_equal(weights[name], state[name], err_msg=name)


FORMATS = [T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1]


@pytest.mark.parametrize("qtype", FORMATS, ids=lambda t: t.name)
def test_quantized_files_read_as_their_dequantized_values(tmp_path, qtype):
    """Every matmul weight in `qtype`: each reads back as gguf's dequantization of its blocks.
    Blocks run along rows, which the q/k permutation moves whole, so the expected values are the
    HF weights quantized in HF order."""
    hf_config, state = hf_model("llama", tied=False)
    types = {name: qtype for name, value in state.items() if value.ndim == 2}
    path = write_file(tmp_path / "m.gguf", "llama", hf_config, state, types)
    _, weights, _ = gguf_llama.load(path)
    for name, value in state.items():
        expected = gguf.quants.dequantize(gguf.quants.quantize(value, qtype), qtype) if value.ndim == 2 else value
        np.testing.assert_array_equal(weights[name], expected, err_msg=name)
        if value.ndim == 2 and qtype not in (T.F16, T.BF16):
            assert not np.array_equal(weights[name], value)  # the format did round


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q5_K, T.Q6_K, T.Q2_K, T.Q3_K], ids=lambda t: t.name)
def test_k_quants_are_read_by_dequantizing(tmp_path, qtype):
    """gguf cannot quantize k-quants, so the file gets random blocks with small finite fp16 scales;
    ffn_down (rows of n_ff = 256 values, one super-block) must read back as gguf dequantizes them."""
    hf_config, state = hf_model("llama", tied=True, n_ff=256)
    block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(1)
    name = "model.layers.1.mlp.down_proj.weight"
    rows = state[name].shape[0]
    raw = rng.integers(0, 256, size=(rows, 256 // block_values * block_bytes), dtype=np.uint8)
    # Every fp16 in a block (its scales) finite: rewrite any NaN or inf pattern (exponent all ones).
    halves = raw.view(np.uint16)
    halves[(halves & 0x7C00) == 0x7C00] &= 0x3FFF
    expected = gguf.quants.dequantize(raw, qtype)
    if not np.isfinite(expected).all():
        pytest.skip("random blocks made a non-finite value")
    path = write_file(
        tmp_path / "m.gguf", "llama", hf_config, state, drop={name}, extra={"blk.1.ffn_down.weight": (raw, qtype)}
    )
    _, weights, _ = gguf_llama.load(path)
    np.testing.assert_array_equal(weights[name], expected.reshape(state[name].shape))


@pytest.mark.parametrize("fmt, qtype", [("q8_0", T.Q8_0), ("q4_0", T.Q4_0), ("q4_1", T.Q4_1)])
def test_kept_quantized_blocks_are_the_files_rows_in_hf_order(tmp_path, fmt, qtype):
    hf_config, state = hf_model("llama", tied=True)
    types = {name: qtype for name, value in state.items() if value.ndim == 2}
    path = write_file(tmp_path / "m.gguf", "llama", hf_config, state, types)
    _, floats, _ = gguf_llama.load(path)
    _, kept, _ = gguf_llama.load(path, keep_quantized=fmt)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert isinstance(kept[q], gguf_llama.QuantizedTensor) and kept[q].format == fmt
    # The embedding is the LM head, which a block-quantized model stores in q8_0 (a 4-bit model keeps
    # it in higher precision), kept as the file's blocks with no float32 table (gpt.kept_formats),
    # which the model converts as it repacks them: q4_0's become q8_0 exactly, q4_1's (which have a
    # min) are requantized, half a q8_0 step apart at most.
    embedding = kept["model.embed_tokens.weight"]
    assert isinstance(embedding, gguf_llama.QuantizedTensor)
    assert embedding.format == ("q8_0" if fmt == "q8_0" else f"q8_0:{fmt}")
    for name, value in kept.items():
        if isinstance(value, gguf_llama.QuantizedTensor):
            blocks = (
                gpt_kernels_testing.transcode_rows(fmt, "q8_0", value.blocks) if ":" in value.format else value.blocks
            )
            values = gguf.quants.dequantize(blocks, T.Q8_0 if value.format.startswith("q8_0") else qtype)
            if value.format == fmt or qtype == T.Q4_0:
                np.testing.assert_array_equal(values, floats[name], err_msg=name)
            else:
                step = np.abs(floats[name]).reshape(-1, 32).max(axis=1) / 127
                error = np.abs(values - floats[name]).reshape(-1, 32).max(axis=1)
                assert (error <= 0.5 * step + 2.0**-11 * 127 * step + 1e-7).all(), name
        else:
            np.testing.assert_array_equal(value, floats[name], err_msg=name)


@pytest.mark.parametrize("fmt, qtype", [("q4_0", T.Q4_0), ("q4_1", T.Q4_1)])
def test_a_4bit_files_q8_0_embedding_is_kept_as_the_q8_0_head(tmp_path, fmt, qtype):
    """As SmolLM2's Q4_1 file: 4-bit layers and a Q8_0 tied embedding. The model stores its LM head
    (the embedding) in q8_0, so both stay the file's blocks: no float32 copy of either; and the
    compiled model computes with exactly the file's values."""
    hf_config, state = hf_model("llama", tied=True)
    types = {name: qtype for name, value in state.items() if value.ndim == 2}
    types["model.embed_tokens.weight"] = T.Q8_0
    path = write_file(tmp_path / "m.gguf", "llama", hf_config, state, types)
    _, kept, _ = gguf_llama.load(path, keep_quantized=fmt)
    _, floats, _ = gguf_llama.load(path)
    embedding = kept["model.embed_tokens.weight"]
    assert isinstance(embedding, gguf_llama.QuantizedTensor) and embedding.format == "q8_0"
    assert kept["model.layers.1.mlp.down_proj.weight"].format == fmt
    model = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights=fmt, disk_cache=False))
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, floats[name], err_msg=name)


def test_a_fused_weight_is_kept_quantized_whole_or_not_at_all(tmp_path):
    """The compiler fuses q/k/v and gate/up: with v (or up) in another type, q and k (or gate)
    come back as float32 too, with the values of their blocks."""
    hf_config, state = hf_model("llama", tied=True)
    types = {name: T.Q8_0 for name, value in state.items() if value.ndim == 2}
    types["model.layers.0.self_attn.v_proj.weight"] = T.F16
    types["model.layers.1.mlp.up_proj.weight"] = T.F16
    path = write_file(tmp_path / "m.gguf", "llama", hf_config, state, types)
    _, kept, _ = gguf_llama.load(path, keep_quantized="q8_0")
    _, floats, _ = gguf_llama.load(path)
    widened = {f"model.layers.0.self_attn.{p}_proj.weight" for p in "qkv"} | {
        f"model.layers.1.mlp.{p}_proj.weight" for p in ("gate", "up")
    }
    for name in widened:
        assert isinstance(kept[name], np.ndarray), name
        np.testing.assert_array_equal(kept[name], floats[name], err_msg=name)
    for name in ("model.layers.1.self_attn.q_proj.weight", "model.layers.0.mlp.gate_proj.weight"):
        assert isinstance(kept[name], gguf_llama.QuantizedTensor), name


def llama3_factors(head_size, base, factor, low, high, original):
    """convert_hf_to_gguf.py's rope_freqs for rope_type "llama3", as it computes them."""
    freqs = 1.0 / (base ** (torch.arange(0, head_size, 2, dtype=torch.float32) / head_size))
    low_wavelen, high_wavelen = original / low, original / high
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(factors, dtype=torch.float32).numpy()


@pytest.mark.parametrize("factor, low, high, original", [(32.0, 1.0, 4.0, 8192), (8.0, 1.0, 16.0, 1024)])
def test_llama3_rope_scaling_is_recovered_from_rope_freqs(tmp_path, factor, low, high, original):
    """Llama 3.x's own parameters, and others the divisors alone determine (with the original
    context a file may give as llama.rope.scaling.original_context_length)."""
    hf_config, state = hf_model("llama", tied=True)
    factors = llama3_factors(16, ROPE_BASE, factor, low, high, original)
    assert 1 < len(set(factors.tolist())) < len(factors)  # some kept, some divided, some between
    meta = {} if original == 8192 else {"llama.rope.scaling.original_context_length": ("uint32", original)}
    path = write_file(
        tmp_path / "m.gguf", "llama", hf_config, state, meta=meta, extra={"rope_freqs.weight": (factors, T.F32)}
    )
    config, _, _ = gguf_llama.load(path)
    scaling = config.rope_scaling
    assert (scaling.factor, scaling.original_max_position_embeddings) == (factor, original)
    np.testing.assert_allclose([scaling.low_freq_factor, scaling.high_freq_factor], [low, high], rtol=1e-6)
    np.testing.assert_allclose(gguf_llama.llama3_rope_factors(config, scaling), factors, rtol=1e-6)


def test_rope_freqs_that_are_not_llama3_scaling_are_refused(tmp_path):
    hf_config, state = hf_model("llama", tied=True)
    factors = np.linspace(3.0, 1.0, 8).astype(np.float32)  # divisors growing with frequency
    path = write_file(tmp_path / "m.gguf", "llama", hf_config, state, extra={"rope_freqs.weight": (factors, T.F32)})
    with pytest.raises(
        ModelFileError, match="rope_freqs.weight holds rope divisors that Llama 3's scaling does not make"
    ):
        gguf_llama.load(path)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(drop={"model.layers.1.mlp.up_proj.weight"}), r"tensor\(s\) missing: blk.1.ffn_up.weight"),
        (
            dict(extra={"blk.0.attn_q.bias": (np.zeros(64, np.float32), T.F32)}),
            r"unexpected tensor\(s\) for llama: blk.0.attn_q.bias",
        ),
        (dict(meta={"llama.rope.dimension_count": ("uint32", 8)}), "llama.rope.dimension_count is 8"),
        (dict(meta={"llama.attention.key_length": ("uint32", 32)}), "llama.attention.key_length is 32"),
        (dict(meta={"llama.rope.scaling.type": ("string", "yarn")}), "llama.rope.scaling.type 'yarn' is not supported"),
        (dict(meta={"llama.attention.head_count_kv": ("uint32", 3)}), r"n_kv_head \(3\) must divide n_head \(4\)"),
        (
            dict(meta={"llama.vocab_size": ("uint32", 97)}),
            "llama.vocab_size 97 differs from token_embd.weight's 96 rows",
        ),
        (
            dict(meta={"llama.feed_forward_length": ("uint32", 100)}),
            r"tensor blk.0.ffn_gate.weight has ne \[64, 96\], expected \[64, 100\]",
        ),
        (dict(file_architecture="gpt2"), "general.architecture 'gpt2' is not a Llama-family architecture"),
        (dict(meta={"llama.block_count": ("string", "2")}), "metadata key llama.block_count is '2', expected int"),
    ],
)
def test_files_it_cannot_read_are_refused_by_name(tmp_path, change, message):
    hf_config, state = hf_model("llama", tied=True)
    path = write_file(tmp_path / "bad.gguf", "llama", hf_config, state, **change)
    with pytest.raises(ModelFileError, match=message):
        gguf_llama.load(path)


def test_a_llama_file_with_a_sentencepiece_vocabulary_has_its_tokenizer(tmp_path):
    """As TinyLlama's or Mistral's files: tokenizer.ggml.model "llama" (SentencePiece, scored
    pieces, <0xXX> byte tokens). from_gguf gives the model its tokenizer, with llama.cpp's ids
    (spm_reference.py) and BOS added."""
    from spm_reference import LlamaCppSPM

    pieces = ["\u2581", "a", "b", "c", "\u2581a", "\u2581ab", "bc", "\u2581abc", "ab"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    scores = [0.0] * 259 + [-float(rank) for rank in range(len(pieces))]
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    hf_config, state = hf_model("llama", tied=True)
    hf_config.vocab_size = len(tokens)
    state["model.embed_tokens.weight"] = np.random.default_rng(0).standard_normal((len(tokens), 64)).astype(np.float32)
    state.pop("lm_head.weight", None)
    meta = {
        "tokenizer.ggml.model": ("string", "llama"),
        "tokenizer.ggml.tokens": ("array", tokens),
        "tokenizer.ggml.scores": ("array", scores),
        "tokenizer.ggml.token_type": ("array", types),
        "tokenizer.ggml.bos_token_id": ("uint32", 1),
        "tokenizer.ggml.eos_token_id": ("uint32", 2),
    }
    path = write_file(tmp_path / "spm.gguf", "llama", hf_config, state, meta=meta)
    model = gpt.GPT.from_gguf(path, gpt.CompileOptions(disk_cache=False))
    reference = LlamaCppSPM(tokens, scores, types, bos_id=1)
    for text in ["abc", "ab abc cab", "a☃b"]:
        assert model.tokenizer.encode(text) == reference.encode(text), text
        assert model.tokenizer.decode(model.tokenizer.encode(text)) == text
    assert model.tokenizer.encode("abc") == [1, tokens.index("\u2581abc")]
    assert model.end_of_generation == {2}
