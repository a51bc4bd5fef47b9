"""The Llama family (architectures "llama" and "qwen2": RMSNorm, SwiGLU, grouped-query attention,
rotary positions, q/k/v biases, untied heads) against HF transformers' LlamaForCausalLM and
Qwen2ForCausalLM on the same random weights: from_pretrained and from_weights logits, cached
greedy generation against transformers.generate, every pipeline level, the low-precision weight
formats against HF run in float64 on the reference-rounded weights and activations, the rope
variants (base, interleaved pairs, Llama 3 scaling), and the configuration's checks."""

import dataclasses

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

import gpt
import quant_reference as ref
from gpt import architectures
from shapes import RTOL, relative_error

# Small enough to compile quickly, with every feature in play: 4 query heads over 2 key/value
# heads (GQA), an MLP width that is neither 4 n_embd nor a multiple of n_embd, and a vocabulary
# that the LM head pads (300 -> 512 columns).
SHAPE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96)
VOCAB, CONTEXT = 300, 128
FAMILIES = {
    "llama": (LlamaConfig, LlamaForCausalLM, dict(rms_norm_eps=1e-5)),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(rms_norm_eps=1e-6)),
}


def hf_model(family, seed=0, **overrides):
    """A random-initialised HF model whose norm scales and biases are perturbed too (HF
    initialises them to one and zero, which would hide a bug in either)."""
    config_class, model_class, defaults = FAMILIES[family]
    settings = dict(SHAPE, vocab_size=VOCAB, max_position_embeddings=CONTEXT, tie_word_embeddings=False)
    settings.update(defaults)
    settings.update(overrides)
    torch.manual_seed(seed)
    model = model_class(config_class(**settings)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.1)
    return model


def hf_weights(model):
    return {name: value.detach().numpy().copy() for name, value in model.state_dict().items()}


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([list(ids)])).logits[0].double().numpy()


def token_ids(length, seed=0):
    return np.random.default_rng(seed).integers(0, VOCAB, size=length).tolist()


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def checkpoint(request, tmp_path_factory):
    """(family, HF model, directory it was saved to with save_pretrained)."""
    model = hf_model(request.param)
    directory = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(directory, safe_serialization=True)
    return request.param, model, str(directory)


@pytest.fixture(scope="module", params=["default", "baseline"])
def loaded(request, checkpoint):
    family, theirs, directory = checkpoint
    ours = gpt.GPT.from_pretrained(directory, gpt.CompileOptions(pipeline=request.param, disk_cache=False))
    return family, theirs, ours


def test_from_pretrained_reads_the_config(loaded):
    family, theirs, ours = loaded
    c = ours.config
    assert (c.architecture, c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.n_ff) == (family, 2, 4, 2, 64, 96)
    assert (c.vocab_size, c.block_size, c.tied_head, c.pos_embedding) == (VOCAB, CONTEXT, False, "rope")
    assert c.layer_norm_eps == pytest.approx(theirs.config.rms_norm_eps)
    assert (c.norm, c.mlp, c.qkv_bias) == ("rms", "swiglu", family == "qwen2")


@pytest.mark.parametrize("length", (1, 7, 33, 64))
def test_logits_match_transformers(loaded, length):
    _, theirs, ours = loaded
    ids = token_ids(length, seed=length)
    assert relative_error(ours.forward(ids), hf_logits(theirs, ids)) < RTOL


def test_cached_greedy_generation_equals_transformers_generate(loaded):
    _, theirs, ours = loaded
    prompt = token_ids(11, seed=3)
    with torch.no_grad():
        expected = theirs.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False, min_new_tokens=24)
    # min_new_tokens: transformers goes on past the EOS (config.json's eos_token_id), and so does ours.
    assert ours.generate(prompt, max_new_tokens=24, stop_at_eos=False) == expected[0, len(prompt) :].tolist()


def test_prefill_and_decode_match_transformers_position_by_position(loaded):
    _, theirs, ours = loaded
    ids = token_ids(40, seed=5)
    expected = hf_logits(theirs, ids)
    cache = ours.new_cache()
    # The cache holds the key/value heads only: a third of SmolLM2's, half of these models'.
    assert cache._keys.shape == (2, 2, CONTEXT, 16)
    assert relative_error(ours.prefill(ids[:25], cache), expected[24]) < RTOL
    for position in range(25, 40):
        assert relative_error(ours.decode(ids[position], cache), expected[position]) < RTOL


def test_state_dict_gives_back_the_hf_weights(loaded):
    _, theirs, ours = loaded
    expected = hf_weights(theirs)
    state = ours.state_dict()
    assert set(state) == set(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(state[name], value, err_msg=name)


def test_from_weights_equals_from_pretrained(checkpoint):
    _, theirs, directory = checkpoint
    ids = token_ids(19, seed=8)
    pretrained = gpt.GPT.from_pretrained(directory, gpt.CompileOptions(disk_cache=False))
    given = gpt.GPT.from_weights(pretrained.config, hf_weights(theirs), gpt.CompileOptions(disk_cache=False))
    np.testing.assert_array_equal(given.forward(ids), pretrained.forward(ids))


def test_v_apart_computes_what_transformers_computes(checkpoint):
    """GPTConfig.separate_v_proj (a GGUF file's Q6_K v beside Q4_K q and k): v's projection is a
    matmul of its own, with its own bias (Qwen2), instead of a part of the fused q/k/v matmul; the
    logits and cached decode are transformers', and the weights come back as HF's."""
    _, theirs, directory = checkpoint
    fused = gpt.GPT.from_pretrained(directory, gpt.CompileOptions(disk_cache=False))
    config = dataclasses.replace(fused.config, separate_v_proj=True)
    apart = gpt.GPT.from_weights(config, hf_weights(theirs), gpt.CompileOptions(disk_cache=False))
    ids = token_ids(13, seed=4)
    assert relative_error(apart.forward(ids), hf_logits(theirs, ids)) < RTOL
    # One more matmul in the layers' block function: v's, [n_embd, kv].
    op = "transformer.packed_matmul"
    assert apart.ir("transformer", 4).count(op) == fused.ir("transformer", 4).count(op) + 1
    assert list(apart.generate(ids, max_new_tokens=6, temperature=0)) == list(
        fused.generate(ids, max_new_tokens=6, temperature=0)
    )
    state = apart.state_dict()
    for name, value in hf_weights(theirs).items():
        np.testing.assert_array_equal(state[name], value, err_msg=name)


def test_v_apart_needs_an_architecture_whose_v_is_its_own_tensor():
    with pytest.raises(ValueError, match="architecture 'gpt2' has no v projection to set apart"):
        gpt.GPTConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=64, block_size=16, separate_v_proj=True)
    with pytest.raises(ValueError, match="architecture 'phi3' has no v projection to set apart"):
        gpt.GPTConfig(
            n_layer=1, n_head=2, n_embd=32, vocab_size=64, block_size=16, architecture="phi3", separate_v_proj=True
        )


def test_a_tied_head_and_bf16_tensors(tmp_path):
    """tie_word_embeddings=True (no lm_head.weight in the file) and a checkpoint saved in bf16,
    which widens to float32 exactly: the same logits as HF's model run in float32 on those values."""
    theirs = hf_model("llama", seed=2, tie_word_embeddings=True).to(torch.bfloat16)
    theirs.save_pretrained(tmp_path, safe_serialization=True)
    theirs = theirs.float()
    ours = gpt.GPT.from_pretrained(str(tmp_path), gpt.CompileOptions(disk_cache=False))
    assert ours.config.tied_head
    assert "lm_head.weight" not in ours.state_dict()
    ids = token_ids(21, seed=9)
    assert relative_error(ours.forward(ids), hf_logits(theirs, ids)) < RTOL


def test_sharded_checkpoints_are_read_through_their_index(tmp_path):
    theirs = hf_model("qwen2", seed=4)
    theirs.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    ours = gpt.GPT.from_pretrained(str(tmp_path), gpt.CompileOptions(disk_cache=False))
    ids = token_ids(9, seed=10)
    assert relative_error(ours.forward(ids), hf_logits(theirs, ids)) < RTOL


def test_the_engine_serves_grouped_query_models(loaded):
    """Many requests through the engine's paged batch step (pools of n_kv_head heads) give each
    what it gives alone, and what transformers.generate gives; a shared prefix is reused."""
    _, theirs, ours = loaded
    rng = np.random.default_rng(14)
    prefix = [int(t) for t in rng.integers(0, VOCAB, 20)]
    prompts = [prefix + [int(t) for t in rng.integers(0, VOCAB, 1 + i)] for i in range(4)]
    prompts += [[int(t) for t in rng.integers(0, VOCAB, n)] for n in (1, 9, 37)]
    engine = gpt.Engine(ours, num_blocks=48, block_size=8, max_batch_tokens=32, start=False)
    assert engine._pool.keys.shape[2] == 2  # n_kv_head heads per block
    handles = [engine.submit(prompt, 10) for prompt in prompts]
    while engine.step():
        pass
    assert engine.metrics().prefix_hit_tokens > 0
    for handle, prompt in zip(handles, prompts, strict=True):
        with torch.no_grad():
            expected = theirs.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False, min_new_tokens=10)
        assert handle.tokens == expected[0, len(prompt) :].tolist()


# -- rope variants ---------------------------------------------------------------------------


def test_rope_base_and_llama3_scaling_match_transformers(tmp_path):
    """A rope base of 500000 and Llama 3's frequency scaling, with an original context short
    enough (16) that every band of frequencies (kept, smoothed, divided) occurs at head size 16."""
    rope = dict(
        rope_type="llama3",
        rope_theta=500000.0,
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=16,
    )
    theirs = hf_model("llama", seed=6, rope_parameters=rope)
    theirs.save_pretrained(tmp_path, safe_serialization=True)
    ours = gpt.GPT.from_pretrained(str(tmp_path), gpt.CompileOptions(disk_cache=False))
    assert ours.config.rope_base == 500000.0
    assert ours.config.rope_scaling == gpt.config.RopeScaling(8.0, 1.0, 4.0, 16)
    ids = token_ids(70, seed=11)
    expected = hf_logits(theirs, ids)
    assert relative_error(ours.forward(ids), expected) < RTOL
    # Without the scaling the logits differ: the test sees it.
    plain = hf_model("llama", seed=6, rope_parameters=dict(rope_type="default", rope_theta=500000.0))
    assert relative_error(hf_logits(plain, ids), expected) > 10 * RTOL


def interleave(weight, heads):
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows: within each head, the rows of the
    two halves [x_0 .. x_{d/2-1}, y_0 .. y_{d/2-1}] become pairs [x_0, y_0, x_1, y_1, ...]."""
    out, inner = weight.shape[0], weight.shape[1:]
    return weight.reshape(heads, 2, out // heads // 2, *inner).swapaxes(1, 2).reshape(weight.shape)


def test_interleaved_rope_computes_permuted_weights_as_stored():
    """rope_layout="interleaved" on q/k rows permuted as llama.cpp's `llama` GGUF files store them
    gives HF's logits: the rotation pairs (2i, 2i + 1) are exactly HF's (i, i + d/2)."""
    theirs = hf_model("qwen2", seed=7)
    weights = hf_weights(theirs)
    for layer in range(2):
        for name, heads in (("q_proj", 4), ("k_proj", 2)):
            for kind in ("weight", "bias"):
                key = f"model.layers.{layer}.self_attn.{name}.{kind}"
                weights[key] = np.ascontiguousarray(interleave(weights[key], heads))
    config = gpt.GPTConfig(
        n_layer=2,
        n_head=4,
        n_kv_head=2,
        n_embd=64,
        n_ff=96,
        vocab_size=VOCAB,
        block_size=CONTEXT,
        architecture="qwen2",
        tied_head=False,
        layer_norm_eps=1e-6,
        rope_layout="interleaved",
    )
    ids = token_ids(30, seed=12)
    ours = gpt.GPT.from_weights(config, weights, gpt.CompileOptions(disk_cache=False))
    expected = hf_logits(theirs, ids)
    assert relative_error(ours.forward(ids), expected) < RTOL
    cache = ours.new_cache()
    ours.prefill(ids[:20], cache)
    for position in range(20, 30):
        logits = ours.decode(ids[position], cache)
    assert relative_error(logits, expected[29]) < RTOL
    # The same permuted weights with rotate-half are wrong: the layout matters.
    half = gpt.GPT.from_weights(
        dataclass_replace(config, rope_layout="half"), weights, gpt.CompileOptions(disk_cache=False)
    )
    assert relative_error(half.forward(ids), expected) > 100 * RTOL


def dataclass_replace(config, **changes):
    import dataclasses

    return dataclasses.replace(config, **changes)


# -- low-precision weights -------------------------------------------------------------------


def low_precision_reference(theirs, fmt):
    """HF's model in float64 computing what a `fmt` model computes: every Linear's [out, in] weight
    rounded (bf16) or quantized in blocks of 32 along `in` (q8_0, q4_0, q4_1; the LM head in q8_0 as
    llama.cpp keeps it) by quant_reference.py, and every Linear's input rounded to bf16 or to int8
    per block of 32, as the dot-product instructions see it; a block-quantized model's untied token
    table in q8_0 too (its lookup reads a q8_0 copy, as llama.cpp's reads its quantized table).
    Norms, rope, SwiGLU, attention and biases stay exact."""
    model = theirs.__class__(theirs.config).eval()
    model.load_state_dict(theirs.state_dict())
    model = model.double()
    into = ref.bf16_activations if fmt == "bf16" else ref.int8_activations
    with torch.no_grad():
        embedding = model.get_input_embeddings().weight
        if fmt != "bf16" and not theirs.config.tie_word_embeddings:
            table = embedding.numpy().astype(np.float32)
            embedding.copy_(torch.from_numpy(ref.dequantized("q8_0", table.T).T.astype(np.float64)))
        for name, module in model.named_modules():
            if not isinstance(module, torch.nn.Linear):
                continue
            w = module.weight.numpy()
            kind = "q8_0" if fmt in ("q4_0", "q4_1") and name == "lm_head" else fmt
            if fmt == "bf16":
                rounded = ref.bf16_rounded(w).astype(np.float64)
            else:
                rounded = ref.dequantized(kind, w.T.astype(np.float32)).T
            module.weight.copy_(torch.from_numpy(np.ascontiguousarray(rounded)))
            module.register_forward_pre_hook(lambda _, args: (torch.from_numpy(into(args[0].numpy())),))
    return model


@pytest.mark.parametrize("fmt, lengths", [("bf16", (1, 6)), ("q8_0", (1, 9)), ("q4_0", (1, 9)), ("q4_1", (1, 9))])
def test_low_precision_weights_match_the_rounded_reference(fmt, lengths):
    theirs = hf_model("qwen2", seed=13)
    # Norm weights away from 1: with a q8_0 token table and unit norm weights, a row's normalized
    # activations sit on the table's own quantization grid, where the int8 rounding of activations
    # meets exact ties that float64 and float32 break apart (a code off by one, 5e-3 in the logits).
    with torch.no_grad():
        generator = torch.Generator().manual_seed(5)
        for name, parameter in theirs.named_parameters():
            if name.endswith("norm.weight"):
                parameter.copy_(1 + 0.1 * torch.randn(parameter.shape, generator=generator))
    config = gpt.GPTConfig(
        n_layer=2,
        n_head=4,
        n_kv_head=2,
        n_embd=64,
        n_ff=96,
        vocab_size=VOCAB,
        block_size=CONTEXT,
        architecture="qwen2",
        tied_head=False,
        layer_norm_eps=1e-6,
    )
    ours = gpt.GPT.from_weights(config, hf_weights(theirs), gpt.CompileOptions(weights=fmt, disk_cache=False))
    reference = low_precision_reference(theirs, fmt)
    for length in lengths:
        ids = token_ids(length, seed=20 + length)
        expected = hf_logits(reference, ids)
        assert relative_error(ours.forward(ids), expected) < RTOL
        # The rounding is real: f32 weights give measurably different logits.
        assert relative_error(hf_logits(theirs, ids), expected) > 10 * RTOL
    prompt = token_ids(7, seed=30)
    assert ours.generate(prompt, max_new_tokens=12) == ours.generate(prompt, max_new_tokens=12, use_cache=False)


# -- configuration and weights checks --------------------------------------------------------


def llama_config(**changes):
    settings = dict(n_layer=1, n_head=4, n_embd=64, vocab_size=VOCAB, block_size=32, architecture="llama")
    settings.update(changes)
    return gpt.GPTConfig(**settings)


def test_config_defaults_are_gpt2_and_the_architecture_fills_in_the_rest():
    gpt2 = gpt.GPTConfig(n_layer=1, n_head=4, n_embd=64, vocab_size=VOCAB, block_size=32)
    assert (gpt2.architecture, gpt2.pos_embedding, gpt2.n_kv_head, gpt2.n_ff, gpt2.norm, gpt2.mlp) == (
        "gpt2",
        "learned",
        4,
        256,
        "layer",
        "gelu",
    )
    llama = llama_config()
    assert (llama.pos_embedding, llama.n_kv_head, llama.n_ff, llama.norm, llama.mlp, llama.bias) == (
        "rope",
        4,
        256,
        "rms",
        "swiglu",
        False,
    )


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(n_kv_head=3), r"n_kv_head \(3\) must divide n_head \(4\)"),
        (dict(n_kv_head=0), "n_kv_head must be a positive int"),
        (dict(n_ff=0), "n_ff must be a positive int"),
        (dict(architecture="mistral"), "unknown architecture 'mistral'; known: gpt2, llama, qwen2"),
        (dict(pos_embedding="learned"), "architecture 'llama' has rotary positions only"),
        (dict(rope_layout="pairs"), "rope_layout must be one of"),
        (dict(rope_base=1.0), "rope_base must be a finite number > 1"),
        (dict(rope_scaling=(8.0, 1.0, 4.0, 8192)), "rope_scaling must be None or a gpt.config.RopeScaling"),
        (dict(tied_head=1), "tied_head must be a bool"),
    ],
)
def test_config_refuses_by_name(changes, message):
    with pytest.raises(ValueError, match=message):
        llama_config(**changes)


def test_rope_fields_need_rope_positions():
    with pytest.raises(ValueError, match="apply to pos_embedding='rope' only"):
        gpt.GPTConfig(n_layer=1, n_head=4, n_embd=64, vocab_size=VOCAB, block_size=32, rope_base=500000.0)


def test_rope_scaling_is_checked():
    with pytest.raises(ValueError, match=r"high_freq_factor \(1.0\) must be larger than low_freq_factor \(4.0\)"):
        gpt.config.RopeScaling(8.0, 4.0, 1.0, 8192)


def test_from_weights_names_the_hf_parameter_at_fault():
    theirs = hf_model("llama", seed=1)
    config = gpt.GPTConfig(
        n_layer=2,
        n_head=4,
        n_kv_head=2,
        n_embd=64,
        n_ff=96,
        vocab_size=VOCAB,
        block_size=CONTEXT,
        architecture="llama",
        tied_head=False,
    )
    weights = hf_weights(theirs)
    del weights["model.layers.1.self_attn.k_proj.weight"]
    with pytest.raises(ValueError, match=r"missing parameter\(s\): model.layers.1.self_attn.k_proj.weight"):
        gpt.GPT.from_weights(config, weights)
    weights = hf_weights(theirs)
    weights["model.layers.0.mlp.up_proj.weight"] = weights["model.layers.0.mlp.up_proj.weight"].T.copy()
    with pytest.raises(
        ValueError, match=r"model.layers.0.mlp.up_proj.weight has shape \(64, 96\), expected \(96, 64\)"
    ):
        gpt.GPT.from_weights(config, weights)
    weights = hf_weights(theirs)
    weights["model.layers.0.self_attn.q_proj.bias"] = np.zeros(64, np.float32)  # llama has no q/k/v biases
    with pytest.raises(ValueError, match=r"unexpected parameter\(s\) for this config: model.layers.0.self_attn.q_proj"):
        gpt.GPT.from_weights(config, weights)


def test_from_weights_copies_the_callers_arrays():
    theirs = hf_model("llama", seed=1)
    config = gpt.GPTConfig(
        n_layer=2,
        n_head=4,
        n_kv_head=2,
        n_embd=64,
        n_ff=96,
        vocab_size=VOCAB,
        block_size=CONTEXT,
        architecture="llama",
        tied_head=False,
    )
    weights = hf_weights(theirs)
    ours = gpt.GPT.from_weights(config, weights, gpt.CompileOptions(pipeline="baseline", disk_cache=False))
    ids = token_ids(5)
    before = ours.forward(ids)
    for value in weights.values():
        value[...] = 0.0
    np.testing.assert_array_equal(ours.forward(ids), before)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("hidden_act", "gelu", "hidden_act='gelu' is not supported"),
        ("attention_bias", True, "attention_bias=True is not supported"),
        ("head_dim", 0, "GPTConfig.head_dim must be None or a positive int, got 0"),
        ("rope_parameters", {"rope_type": "yarn", "rope_theta": 10000.0}, "rope type 'yarn' is not supported"),
        ("num_key_value_heads", 3, r"n_kv_head \(3\) must divide n_head \(4\)"),
    ],
)
def test_from_pretrained_refuses_what_it_does_not_compute(tmp_path, key, value, message):
    import json

    hf_model("llama", seed=1).save_pretrained(tmp_path, safe_serialization=True)
    config_path = tmp_path / "config.json"
    settings = json.loads(config_path.read_text())
    settings[key] = value
    config_path.write_text(json.dumps(settings))
    with pytest.raises(gpt.ModelFileError, match=message):
        gpt.GPT.from_pretrained(str(tmp_path))


def test_from_pretrained_names_a_missing_tensor(tmp_path):
    theirs = hf_model("llama", seed=1)
    theirs.save_pretrained(tmp_path, safe_serialization=True)
    weights = {name: value for name, value in hf_weights(theirs).items() if "layers.1.mlp.gate_proj" not in name}
    save_file(weights, str(tmp_path / "model.safetensors"))
    with pytest.raises(gpt.ModelFileError, match=r"missing tensor\(s\): model.layers.1.mlp.gate_proj.weight"):
        gpt.GPT.from_pretrained(str(tmp_path))


def test_the_tables_name_every_parameter_for_hf_and_gguf():
    config = gpt.GPTConfig(
        n_layer=2,
        n_head=4,
        n_kv_head=2,
        n_embd=64,
        n_ff=96,
        vocab_size=VOCAB,
        block_size=CONTEXT,
        architecture="qwen2",
        tied_head=False,
    )
    assert set(architectures.hf_shapes(config)) == set(hf_weights(hf_model("qwen2")))
    names = architectures.gguf_names(config)
    assert names["blk.1.attn_k.bias"] == "model.layers.1.self_attn.k_proj.bias"
    assert names["output.weight"] == "lm_head.weight" and names["token_embd.weight"] == "model.embed_tokens.weight"
    # Tied: no output.weight; llama: no q/k/v biases.
    tied = dataclass_replace(config, architecture="llama", tied_head=True)
    assert "output.weight" not in architectures.gguf_names(tied)
    assert not any(name.endswith("bias") for name in architectures.gguf_names(tied))
    assert architectures.ARCHITECTURES["llama"].gguf_rope_layout == "interleaved"
    assert architectures.ARCHITECTURES["qwen2"].gguf_rope_layout == "half"
