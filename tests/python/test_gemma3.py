"""Gemma 3's text model (architecture "gemma3", HF Gemma3ForCausalLM, llama.cpp's `gemma3` GGUF
files) against HF transformers on random weights, and what it brought to every architecture: a
head width apart from n_embd / n_head, checked on Llama against LlamaForCausalLM."""

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import gpt
from gpt import architectures
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
