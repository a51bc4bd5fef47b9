"""Phi-3 (architecture "phi3", HF Phi3ForCausalLM, llama.cpp's `phi3` GGUF files) against HF
transformers on random weights: from_pretrained logits and greedy generation, its fused qkv_proj
and gate_up_proj taken whole, the sliding window, a `phi3` GGUF file written as llama.cpp's
converter writes one (attn_qkv, ffn_up holding gate and up), and the refusals by name of what is
not implemented (longrope scaling, partial rotary)."""

import json

import gguf
import numpy as np
import pytest
import torch
from transformers import Phi3Config, Phi3ForCausalLM

import gpt
from gpt import ModelFileError, architectures
from shapes import RTOL, relative_error

# 4 query heads over 2 key/value heads, an MLP width apart from 4 n_embd, a vocabulary the LM
# head pads, as test_llama's.
SHAPE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96)
VOCAB, CONTEXT = 300, 128
T = gguf.GGMLQuantizationType
OPTIONS = gpt.CompileOptions(disk_cache=False)


def hf_model(seed=0, **overrides):
    """A random Phi3ForCausalLM whose norm scales are perturbed too (HF initialises them to one)."""
    settings = dict(
        SHAPE,
        vocab_size=VOCAB,
        max_position_embeddings=CONTEXT,
        original_max_position_embeddings=CONTEXT,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    settings.update(overrides)
    torch.manual_seed(seed)
    model = Phi3ForCausalLM(Phi3Config(**settings)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    return model


def hf_weights(model):
    return {name: value.detach().numpy().copy() for name, value in model.state_dict().items()}


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([list(ids)])).logits[0].double().numpy()


def token_ids(length, seed=0):
    return np.random.default_rng(seed).integers(0, VOCAB, size=length).tolist()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    model = hf_model()
    directory = tmp_path_factory.mktemp("phi3")
    model.save_pretrained(directory, safe_serialization=True)
    return model, str(directory)


@pytest.fixture(scope="module")
def loaded(checkpoint):
    theirs, directory = checkpoint
    return theirs, gpt.GPT.from_pretrained(directory, OPTIONS)


def test_from_pretrained_reads_a_phi3_config(loaded):
    _, ours = loaded
    c = ours.config
    assert (c.architecture, c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.n_ff) == ("phi3", 2, 4, 2, 64, 96)
    assert (c.norm, c.mlp, c.pos_embedding, c.tied_head, c.attention_window) == ("rms", "swiglu", "rope", False, None)


def test_the_fused_hf_weights_are_the_compilers_transposed(loaded):
    """Phi-3's checkpoints fuse q/k/v and gate/up as the compiler does: each is one parameter,
    taken whole ([out, in] -> [in, out]), and state_dict gives back HF's tensors."""
    theirs, ours = loaded
    shapes = architectures.hf_shapes(ours.config)
    assert shapes["model.layers.0.self_attn.qkv_proj.weight"] == (64 + 2 * 32, 64)
    assert shapes["model.layers.1.mlp.gate_up_proj.weight"] == (2 * 96, 64)
    expected = hf_weights(theirs)
    state = ours.state_dict()
    assert set(state) == set(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(state[name], value, err_msg=name)


@pytest.mark.parametrize("length", (1, 9, 40))
def test_logits_match_transformers(loaded, length):
    theirs, ours = loaded
    ids = token_ids(length, seed=length)
    assert relative_error(ours.forward(ids), hf_logits(theirs, ids)) < RTOL


def test_cached_greedy_generation_equals_transformers_generate(loaded):
    theirs, ours = loaded
    prompt = token_ids(11, seed=3)
    with torch.no_grad():
        expected = theirs.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False, min_new_tokens=20)
    assert ours.generate(prompt, max_new_tokens=20, stop_at_eos=False) == expected[0, len(prompt) :].tolist()


def test_from_weights_equals_from_pretrained(checkpoint, loaded):
    theirs, _ = checkpoint
    _, pretrained = loaded
    given = gpt.GPT.from_weights(pretrained.config, hf_weights(theirs), OPTIONS)
    ids = token_ids(13, seed=4)
    np.testing.assert_array_equal(given.forward(ids), pretrained.forward(ids))


def test_the_sliding_window_matches_transformers(tmp_path):
    """config.json's sliding_window is the attention window (key j visible from query i iff
    i - W < j <= i, transformers' and llama.cpp's rule): forward and cached decode past it."""
    theirs = hf_model(seed=5, sliding_window=6)
    theirs.save_pretrained(tmp_path, safe_serialization=True)
    ours = gpt.GPT.from_pretrained(str(tmp_path), OPTIONS)
    assert ours.config.attention_window == 6
    ids = token_ids(30, seed=6)
    expected = hf_logits(theirs, ids)
    assert relative_error(ours.forward(ids), expected) < RTOL
    cache = ours.new_cache()
    ours.prefill(ids[:20], cache)
    for position in range(20, 30):
        assert relative_error(ours.decode(ids[position], cache), expected[position]) < RTOL
    # The window matters at these lengths: full attention gives other logits.
    assert relative_error(hf_logits(hf_model(seed=5), ids), expected) > 10 * RTOL


def rewrite_config(directory, **changes):
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def test_longrope_and_partial_rotary_are_refused_by_name(checkpoint, tmp_path):
    theirs, _ = checkpoint
    theirs.save_pretrained(tmp_path, safe_serialization=True)
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}
    rewrite_config(tmp_path, rope_parameters=rope)
    with pytest.raises(ModelFileError, match="rope type 'longrope' is not supported"):
        gpt.GPT.from_pretrained(str(tmp_path), OPTIONS)
    rewrite_config(
        tmp_path, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    )
    with pytest.raises(ModelFileError, match=r"partial_rotary_factor=0\.5 is not supported"):
        gpt.GPT.from_pretrained(str(tmp_path), OPTIONS)


def test_head_dim_is_the_head_width_and_a_bad_one_is_refused_by_name():
    fields = dict(n_layer=1, n_head=4, n_embd=64, vocab_size=50, block_size=16, architecture="phi3")
    assert gpt.GPTConfig(**fields, head_dim=16).head_size == 16
    assert gpt.GPTConfig(**fields, head_dim=32).head_size == 32  # Gemma's and Qwen3's wider heads
    with pytest.raises(ValueError, match=r"GPTConfig.head_dim must be None or a positive int, got 0"):
        gpt.GPTConfig(**fields, head_dim=0)


# -- GGUF ------------------------------------------------------------------------------------

GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.qkv_proj.weight": "attn_qkv.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf_name):
    if hf_name in GGUF_NAMES:
        return GGUF_NAMES[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    return f"blk.{layer}.{GGUF_NAMES[rest]}"


def write_phi3_gguf(path, model, qtype=T.F32, window=None, extra=None):
    """A `phi3` file as convert_hf_to_gguf.py's Phi3MiniModel writes one: HF's tensors under
    llama.cpp's names, q/k/v and gate/up fused as HF has them, rows in HF's order (rope NEOX)."""
    c = model.config
    writer = gguf.GGUFWriter(str(path), arch="phi3")
    writer.add_uint32("phi3.block_count", c.num_hidden_layers)
    writer.add_uint32("phi3.context_length", c.max_position_embeddings)
    writer.add_uint32("phi3.embedding_length", c.hidden_size)
    writer.add_uint32("phi3.feed_forward_length", c.intermediate_size)
    writer.add_uint32("phi3.attention.head_count", c.num_attention_heads)
    writer.add_uint32("phi3.attention.head_count_kv", c.num_key_value_heads)
    writer.add_float32("phi3.attention.layer_norm_rms_epsilon", c.rms_norm_eps)
    writer.add_uint32("phi3.rope.dimension_count", c.hidden_size // c.num_attention_heads)
    writer.add_float32("phi3.rope.freq_base", 10000.0)
    writer.add_uint32("phi3.rope.scaling.original_context_length", c.original_max_position_embeddings)
    if window is not None:
        writer.add_uint32("phi3.attention.sliding_window", window)
    for name, value in hf_weights(model).items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue  # a tied head is the token embedding: no output.weight
        kind = qtype if value.ndim == 2 else T.F32
        data = value if kind == T.F32 else gguf.quants.quantize(value, kind)
        writer.add_tensor(gguf_name(name), data, raw_dtype=kind)
    for name, data in (extra or {}).items():
        writer.add_tensor(name, data, raw_dtype=T.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def test_a_phi3_gguf_file_gives_transformers_logits(checkpoint, tmp_path):
    theirs, _ = checkpoint
    ours = gpt.GPT.from_gguf(write_phi3_gguf(tmp_path / "phi3.gguf", theirs), OPTIONS)
    assert (ours.config.architecture, ours.config.n_kv_head, ours.config.attention_window) == ("phi3", 2, None)
    for name, value in hf_weights(theirs).items():
        np.testing.assert_array_equal(ours.state_dict()[name], value, err_msg=name)
    ids = token_ids(25, seed=7)
    assert relative_error(ours.forward(ids), hf_logits(theirs, ids)) < RTOL


def test_a_q8_0_phi3_file_keeps_its_fused_blocks(tmp_path):
    """With weights="q8_0" the file's attn_qkv and ffn_up blocks are the compiler's fused
    weights as they are; widened instead, they read back as their dequantized values. (A tied
    head: an untied output.weight given as blocks is refused by the runtime today, Llama's too.)"""
    theirs = hf_model(seed=9, tie_word_embeddings=True)
    path = write_phi3_gguf(tmp_path / "phi3-q8.gguf", theirs, qtype=T.Q8_0)
    kept = gpt.GPT.from_gguf(path, gpt.CompileOptions(disk_cache=False, weights="q8_0"))
    widened = gpt.GPT.from_gguf(path, OPTIONS)
    qkv = "model.layers.0.self_attn.qkv_proj.weight"
    value = hf_weights(theirs)[qkv]
    blocks = gguf.quants.dequantize(gguf.quants.quantize(value, T.Q8_0), T.Q8_0)
    np.testing.assert_array_equal(widened.state_dict()[qkv], blocks)
    np.testing.assert_array_equal(kept.state_dict()[qkv], blocks)
    ids = token_ids(12, seed=8)
    assert relative_error(kept.forward(ids), widened.forward(ids)) < 2e-2  # int8 activations on one side


def test_a_phi3_files_sliding_window_is_read(checkpoint, tmp_path):
    theirs, _ = checkpoint
    ours = gpt.GPT.from_gguf(write_phi3_gguf(tmp_path / "w.gguf", theirs, window=6), OPTIONS)
    assert ours.config.attention_window == 6


def test_a_longrope_phi3_file_is_refused_by_name(checkpoint, tmp_path):
    theirs, _ = checkpoint
    factors = np.ones(8, dtype=np.float32)
    path = write_phi3_gguf(tmp_path / "long.gguf", theirs, extra={"rope_factors_long.weight": factors})
    with pytest.raises(ModelFileError, match="rope_factors_long.weight is longrope"):
        gpt.GPT.from_gguf(path, OPTIONS)
