"""Forward logits against the external oracle: HF transformers' GPT2LMHeadModel (PyTorch, CPU)."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import gpt
from shapes import GPT2_SMALL, MID, NANO, RTOL, config, exercising_weights, relative_error, token_ids


def hf_model(cfg, weights):
    hf_config = GPT2Config(
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_embd=cfg.n_embd,
        vocab_size=cfg.vocab_size,
        n_positions=cfg.block_size,
        layer_norm_epsilon=cfg.layer_norm_eps,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel(hf_config).eval()
    state = {name: torch.from_numpy(value) for name, value in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied to wte
    return model


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([list(ids)])).logits[0].numpy()


@pytest.fixture(scope="module", params=[("nano", NANO), ("mid", MID), ("gpt2-small", GPT2_SMALL)], ids=lambda p: p[0])
def models(request):
    torch.manual_seed(0)
    cfg = config(request.param[1])
    weights = exercising_weights(cfg, seed=11)
    return cfg, gpt.GPT.from_weights(cfg, weights), hf_model(cfg, weights)


@pytest.mark.parametrize("length", (1, 7, 64, 128))
def test_logits_match_hf_gpt2(models, length):
    cfg, ours, theirs = models
    ids = token_ids(cfg, length, seed=100 + length)
    assert relative_error(ours.forward(ids), hf_logits(theirs, ids)) < RTOL


def test_from_pretrained_reads_save_pretrained_directory(tmp_path):
    torch.manual_seed(1)
    cfg = config(NANO)
    hf_config = GPT2Config(
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_embd=cfg.n_embd,
        vocab_size=cfg.vocab_size,
        n_positions=cfg.block_size,
        bos_token_id=0,
        eos_token_id=0,
    )
    theirs = GPT2LMHeadModel(hf_config).eval()
    with torch.no_grad():  # HF initialises biases to zero: make them count.
        for name, param in theirs.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.02)
    theirs.save_pretrained(tmp_path, safe_serialization=True)
    ours = gpt.GPT.from_pretrained(str(tmp_path))
    assert ours.config == cfg
    ids = token_ids(cfg, 23, seed=4)
    assert relative_error(ours.forward(ids), hf_logits(theirs, ids)) < RTOL
