"""Gemma 3's text model (architecture "gemma3", HF Gemma3ForCausalLM, llama.cpp's `gemma3` GGUF
files) against HF transformers on random weights, and what it brought to every architecture: a
head width apart from n_embd / n_head, checked on Llama against LlamaForCausalLM."""

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import gpt
from gpt import architecture_weights, architectures
from shapes import RTOL, relative_error

VOCAB, CONTEXT = 300, 128
OPTIONS = gpt.CompileOptions(disk_cache=False)


def perturb_norms(model):
    """HF initialises norm scales to one (Gemma's to zero, as it computes 1 + w), which would hide
    a bug in them: perturb each."""
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


def hf_greedy(model, prompt, tokens):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    return out[0, len(prompt) :].tolist()


# -- head_dim apart from n_embd / n_head (Llama) --------------------------------------------------


@pytest.fixture(scope="module")
def wide_heads(tmp_path_factory):
    """A LlamaForCausalLM whose heads are twice n_embd / n_head wide (q is 128 wide over n_embd 64),
    saved, and ours from its directory."""
    torch.manual_seed(0)
    settings = dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=96,
        vocab_size=VOCAB,
        max_position_embeddings=CONTEXT,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
    )
    theirs = perturb_norms(LlamaForCausalLM(LlamaConfig(**settings)).eval())
    directory = tmp_path_factory.mktemp("llama_wide_heads")
    theirs.save_pretrained(directory, safe_serialization=True)
    return theirs, gpt.GPT.from_pretrained(str(directory), OPTIONS)


def test_head_dim_is_read_from_config_json_and_sizes_q_and_o(wide_heads):
    _, ours = wide_heads
    assert (ours.config.head_dim, ours.config.head_size) == (32, 32)
    shapes = architectures.hf_shapes(ours.config)
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (128, 64)
    assert shapes["model.layers.0.self_attn.o_proj.weight"] == (64, 128)
    cache = ours.new_cache()
    assert cache.nbytes == 2 * (2 * 2 * cache.slots * 32) * 4  # keys and values: layers, kv heads, slots, 32


@pytest.mark.parametrize("length", (1, 9, 40))
def test_wide_heads_logits_match_transformers(wide_heads, length):
    theirs, ours = wide_heads
    ids = token_ids(length, seed=length)
    assert relative_error(ours.forward(ids), hf_logits(theirs, ids)) < RTOL


def test_wide_heads_cached_generation_equals_transformers(wide_heads):
    theirs, ours = wide_heads
    prompt = token_ids(7, seed=5)
    assert ours.generate(prompt, max_new_tokens=12, stop_at_eos=False) == hf_greedy(theirs, prompt, 12)


def test_wide_heads_in_q8_0_stay_near_transformers(wide_heads):
    """The output projection's K is n_head * head_dim (128), not n_embd: its blocks are laid out by it."""
    theirs, ours = wide_heads
    quantized = gpt.GPT.from_weights(
        ours.config, hf_weights(theirs), gpt.CompileOptions(disk_cache=False, weights="q8_0")
    )
    ids = token_ids(9, seed=2)
    assert relative_error(quantized.forward(ids), hf_logits(theirs, ids)) < 0.05


# -- Gemma 3 --------------------------------------------------------------------------------------

# 4 query heads of 32 over 2 key/value heads (q is 128 wide over n_embd 64), a query scale apart
# from head_dim's, and a window of 4 on the sliding layers, so that sequences past it see the
# local layers' window, the global layer's whole context, and the two rope bases.
GEMMA = dict(
    hidden_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    intermediate_size=96,
    vocab_size=VOCAB,
    max_position_embeddings=CONTEXT,
    query_pre_attn_scalar=24,
    sliding_window=4,
    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    rms_norm_eps=1e-6,
)


def hf_gemma(seed=0, **overrides):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    return perturb_norms(Gemma3ForCausalLM(Gemma3TextConfig(**dict(GEMMA, **overrides))).eval())


def gemma_weights(model):
    """HF's state_dict without the tied head's copy of the table."""
    weights = hf_weights(model)
    del weights["lm_head.weight"]
    return weights


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    theirs = hf_gemma()
    directory = tmp_path_factory.mktemp("gemma3")
    theirs.save_pretrained(directory, safe_serialization=True)
    return theirs, str(directory), gpt.GPT.from_pretrained(str(directory), OPTIONS)


def test_from_pretrained_reads_a_gemma3_config(gemma):
    _, _, ours = gemma
    c = ours.config
    assert (c.architecture, c.n_layer, c.n_head, c.n_kv_head, c.head_size, c.n_ff) == ("gemma3", 3, 4, 2, 32, 96)
    assert (c.norm, c.mlp, c.tied_head, c.attention_window) == ("rms", "geglu", True, None)
    assert c.layer_windows == (4, 0, 4)
    assert (c.rope_base, c.rope_local_base, c.attention_scale) == (1e6, 1e4, 24**-0.5)


def test_norms_are_taken_as_one_plus_w(gemma):
    """Gemma's RMSNorm computes x * (1 + w): the compiler's weight is 1 + w, and state_dict gives
    HF's w back."""
    theirs, _, ours = gemma
    expected = gemma_weights(theirs)
    compiler = architecture_weights.to_compiler(ours.config, dict(expected))
    name = "model.layers.1.self_attn.q_norm.weight"
    np.testing.assert_array_equal(compiler[name], expected[name] + np.float32(1))
    state = ours.state_dict()
    assert set(state) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(state[name], value, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("length", (1, 3, 9, 40))
def test_gemma3_logits_match_transformers(gemma, length):
    theirs, _, ours = gemma
    ids = token_ids(length, seed=length)
    assert relative_error(ours.forward(ids), hf_logits(theirs, ids)) < RTOL


def test_gemma3_cached_greedy_generation_equals_transformers_generate(gemma):
    """Prefill and decode past the window: the local layers' caches hold every position and
    their attention sees the last 4."""
    theirs, _, ours = gemma
    prompt = token_ids(11, seed=3)
    assert ours.generate(prompt, max_new_tokens=20, stop_at_eos=False) == hf_greedy(theirs, prompt, 20)


def test_the_engine_serves_gemma3_through_its_paged_step(gemma):
    """The paged batch step attends per layer too (windows of 4 on the local layers, over pools of
    head_dim-wide heads): each request gets what transformers.generate gives it alone."""
    theirs, _, ours = gemma
    rng = np.random.default_rng(14)
    prompts = [[int(t) for t in rng.integers(0, VOCAB, n)] for n in (1, 6, 13)]
    engine = gpt.Engine(ours, num_blocks=24, block_size=8, max_batch_tokens=16, start=False)
    handles = [engine.submit(prompt, 8) for prompt in prompts]
    while engine.step():
        pass
    for handle, prompt in zip(handles, prompts, strict=True):
        assert handle.tokens == hf_greedy(theirs, prompt, 8)


def test_gemma3_from_weights_equals_from_pretrained(gemma):
    theirs, _, pretrained = gemma
    given = gpt.GPT.from_weights(pretrained.config, gemma_weights(theirs), OPTIONS)
    ids = token_ids(13, seed=4)
    np.testing.assert_array_equal(given.forward(ids), pretrained.forward(ids))


def test_gemma3_all_global_layers_match_transformers():
    """A window as long as the context: every layer attends to all, only the rope bases differ."""
    theirs = hf_gemma(seed=1, sliding_window=CONTEXT)
    config = gpt.GPTConfig(
        n_layer=3,
        n_head=4,
        n_kv_head=2,
        n_embd=64,
        head_dim=32,
        n_ff=96,
        vocab_size=VOCAB,
        block_size=CONTEXT,
        architecture="gemma3",
        layer_norm_eps=1e-6,
        rope_base=1e6,
        rope_local_base=1e4,
        attention_scale=24**-0.5,
        layer_windows=(CONTEXT, 0, CONTEXT),
    )
    ours = gpt.GPT.from_weights(config, gemma_weights(theirs), OPTIONS)
    ids = token_ids(30, seed=6)
    assert relative_error(ours.forward(ids), hf_logits(theirs, ids)) < RTOL


def test_gemma3_linear_rope_scaling_on_the_global_layers(tmp_path):
    """Gemma 3 4B's rope: linear scaling (theta_i / 8) on the full layers, none on the local ones."""
    rope = {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
    }
    theirs = hf_gemma(seed=2, rope_parameters=rope)
    theirs.save_pretrained(tmp_path, safe_serialization=True)
    ours = gpt.GPT.from_pretrained(str(tmp_path), OPTIONS)
    assert ours.config.rope_scaling.factor == 8.0
    ids = token_ids(24, seed=7)
    assert relative_error(ours.forward(ids), hf_logits(theirs, ids)) < RTOL


def rewrite_config(directory, **changes):
    import json

    path = directory / "config.json"
    settings = json.loads(path.read_text())
    settings.update(changes)
    path.write_text(json.dumps(settings))


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("final_logit_softcapping", 30.0, r"final_logit_softcapping=30\.0 is not supported \(only None\)"),
        ("attn_logit_softcapping", 50.0, r"attn_logit_softcapping=50\.0 is not supported \(only None\)"),
        ("hidden_activation", "gelu", r"hidden_activation='gelu' is not supported"),
        ("layer_types", ["full_attention"], r"layer_types must list num_hidden_layers \(3\)"),
    ],
)
def test_gemma3_refuses_what_it_does_not_compute_by_name(tmp_path, key, value, message):
    hf_gemma(seed=1).save_pretrained(tmp_path, safe_serialization=True)
    rewrite_config(tmp_path, **{key: value})
    with pytest.raises(gpt.ModelFileError, match=message):
        gpt.GPT.from_pretrained(str(tmp_path), OPTIONS)


def test_gemma3_layer_types_default_to_every_sixth_layer_global():
    from gpt import hf_checkpoint

    hf = dict(GEMMA, model_type="gemma3_text", num_hidden_layers=12, sliding_window=512)
    del hf["layer_types"]
    config = hf_checkpoint._config(hf, "config.json")
    assert config.layer_windows == (512,) * 5 + (0,) + (512,) * 5 + (0,)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(layer_windows=(4, 0)), r"GPTConfig.layer_windows must be a tuple of n_layer \(3\) windows"),
        (dict(layer_windows=(4, -1, 4)), r"GPTConfig.layer_windows holds ints >= 1 \(or 0 for full attention\)"),
        (dict(layer_windows=(4, 0, 4), attention_window=4), r"layer_windows excludes attention_window"),
        (dict(rope_local_base=1e4), r"rope_local_base applies to rope models with layer_windows only"),
        (dict(attention_scale=0.0), r"GPTConfig.attention_scale must be None or a positive number, got 0.0"),
    ],
)
def test_per_layer_attention_fields_are_checked_by_name(fields, message):
    base = dict(n_layer=3, n_head=4, n_embd=64, vocab_size=VOCAB, block_size=CONTEXT, architecture="gemma3")
    with pytest.raises(ValueError, match=message):
        gpt.GPTConfig(**base, **fields)


# -- GGUF -----------------------------------------------------------------------------------------

GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}


def gguf_name(hf_name):
    if hf_name in GGUF_NAMES:
        return GGUF_NAMES[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    return f"blk.{layer}.{GGUF_NAMES[rest]}"


def write_gemma3_gguf(path, model, rope_scaling=None):
    """A `gemma3` file as convert_hf_to_gguf.py's Gemma3Model writes one: HF's tensors under
    llama.cpp's names, rows in HF's order (rope NEOX), every norm stored as 1 + w (norm_shift), no
    output.weight (tied); head_dim as key_length and value_length, the window, rope_theta."""
    import gguf

    c = model.config
    writer = gguf.GGUFWriter(str(path), arch="gemma3")
    for key, value in (
        ("block_count", c.num_hidden_layers),
        ("context_length", c.max_position_embeddings),
        ("embedding_length", c.hidden_size),
        ("feed_forward_length", c.intermediate_size),
        ("attention.head_count", c.num_attention_heads),
        ("attention.head_count_kv", c.num_key_value_heads),
        ("attention.key_length", c.head_dim),
        ("attention.value_length", c.head_dim),
        ("attention.sliding_window", c.sliding_window),
    ):
        writer.add_uint32(f"gemma3.{key}", value)
    writer.add_float32("gemma3.attention.layer_norm_rms_epsilon", c.rms_norm_eps)
    writer.add_float32("gemma3.rope.freq_base", c.rope_parameters["full_attention"]["rope_theta"])
    if rope_scaling:
        writer.add_string("gemma3.rope.scaling.type", "linear")
        writer.add_float32("gemma3.rope.scaling.factor", rope_scaling)
    for name, value in gemma_weights(model).items():
        if name.endswith("norm.weight"):
            value = value + np.float32(1)
        writer.add_tensor(gguf_name(name), value, raw_dtype=gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


@pytest.mark.parametrize("rope_scaling", (None, 8.0))
def test_a_gemma3_gguf_file_gives_transformers_logits(tmp_path, rope_scaling):
    """llama.cpp's reading of a `gemma3` file: every sixth layer global (7 layers: the sixth), the
    others windowed with rope base 10000, q.k scaled by head_dim ** -0.5 (the HF model's
    query_pre_attn_scalar is head_dim here); the 1 of the norms not added twice."""
    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
    rope["full_attention"] = {"rope_type": "default", "rope_theta": 1e6}
    if rope_scaling:
        rope["full_attention"] = {"rope_type": "linear", "factor": rope_scaling, "rope_theta": 1e6}
    theirs = hf_gemma(seed=3, num_hidden_layers=7, layer_types=None, query_pre_attn_scalar=32, rope_parameters=rope)
    ours = gpt.GPT.from_gguf(write_gemma3_gguf(tmp_path / "gemma3.gguf", theirs, rope_scaling), OPTIONS)
    c = ours.config
    assert (c.architecture, c.head_size, c.tied_head) == ("gemma3", 32, True)
    assert c.layer_windows == (4, 4, 4, 4, 4, 0, 4)
    for name, value in gemma_weights(theirs).items():
        np.testing.assert_allclose(ours.state_dict()[name], value, atol=1e-6, err_msg=name)
    ids = token_ids(20, seed=8)
    assert relative_error(ours.forward(ids), hf_logits(theirs, ids)) < RTOL


def test_gpu_export_is_refused_until_checked_on_a_device(gemma, tmp_path):
    # Its GPU programs have never run against the CPU's logits: refused, not exported unchecked.
    _, _, ours = gemma
    with pytest.raises(ValueError, match="gemma3 models are not exported for the GPU yet"):
        ours.export(str(tmp_path / "artifact"))
    assert not (tmp_path / "artifact").exists()
