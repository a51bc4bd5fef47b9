"""gpt.compile_module on HF Llama-family models (LlamaForCausalLM, Qwen2ForCausalLM) with their
default config (use_cache=True), against transformers' own logits; RMSNorm, SwiGLU, the rotary
embedding and grouped-query attention recovered into the builder's ops; and the written-out forms
that are not recovered, against eager PyTorch."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

import gpt
from shapes import RTOL

SMALL = dict(
    num_hidden_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    vocab_size=256,
    max_position_embeddings=128,
)


def hf_model(family: str, seed: int = 0, **overrides):
    """A random HF model of the family with random RMSNorm weights and biases too (their default
    ones and zeros would hide a norm weight or a q/k/v bias that is dropped)."""
    torch.manual_seed(seed)
    config_class, model_class = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[
        family
    ]
    model = model_class(config_class(**{**SMALL, **overrides}))
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=generator))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=generator))
    return model.eval()


def check_close(actual, expected):
    actual, expected = np.asarray(actual), expected.detach().numpy()
    assert actual.shape == expected.shape
    error = np.abs(actual - expected).max() / np.abs(expected).max()
    assert error <= RTOL, f"relative error {error}"


def options(pipeline="default"):
    return gpt.CompileOptions(pipeline=pipeline, threads=2, disk_cache=False)


def op_count(ir: str, op: str) -> int:
    return len(re.findall(rf"= transformer\.{op} ", ir))


# (family, config overrides, sequence length): grouped-query (2 and 1 key/value heads) and
# multi-head attention, tied and untied heads, Qwen2's q/k/v biases, rope bases 1e4 / 5e5 / 1e6,
# HF's SDPA and eager attention, one token to 33.
CASES = [
    ("llama", dict(), 8),
    ("llama", dict(num_key_value_heads=4, tie_word_embeddings=True), 13),
    ("llama", dict(num_key_value_heads=1, hidden_size=128, rope_theta=500000.0), 33),
    ("llama", dict(attn_implementation="eager"), 16),
    ("qwen2", dict(rope_theta=1000000.0), 17),
    ("qwen2", dict(tie_word_embeddings=True), 1),
]


@pytest.mark.parametrize("family, overrides, length", CASES)
def test_hf_llama_family_against_transformers(family, overrides, length):
    model = hf_model(family, **overrides)
    config = model.config
    assert config.use_cache  # the default: the export leaves the cache out
    ids = torch.randint(0, config.vocab_size, (1, length), generator=torch.Generator().manual_seed(1))
    compiled = gpt.compile_module(model, (ids,), options())
    with torch.no_grad():
        out, ref = compiled(ids), model(ids)
    assert type(out) is type(ref) and out.past_key_values is None
    check_close(out.logits, ref.logits)
    other = torch.randint(0, config.vocab_size, (1, length), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        check_close(compiled(other).logits, model(other).logits)

    # The imported model runs the builder's ops: every norm, MLP, rotary embedding and attention
    # recovered, nothing of their written-out forms left.
    layers, heads, kv_heads = config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads
    canonical = compiled.ir("transformer")
    assert op_count(canonical, "rms_norm") == 2 * layers + 1
    assert op_count(canonical, "swiglu") == layers
    assert op_count(canonical, "rope") == 2 * layers
    assert op_count(canonical, "causal_attention") == layers
    for written_out in ("mean", "rsqrt", "mul", "silu", "concat", "neg", "broadcast", "softmax", "where"):
        assert op_count(canonical, written_out) == 0, written_out
    # Grouped-query attention reads the key/value heads themselves, not repeat_kv's copies.
    head_size = config.hidden_size // heads
    for line in canonical.splitlines():
        if "transformer.causal_attention" in line:
            keys = re.search(r"\((tensor<[^>]*>), (tensor<[^>]*>)", line).group(2)
            assert keys in (
                f"tensor<{kv_heads}x{length}x{head_size}xf32>",
                f"tensor<{length}x{kv_heads}x{head_size}xf32>",
            )
    # The base fitted to HF's cos/sin tables; 1e4 is the attribute's default (not printed), and one
    # token's tables (position 0) fit any base.
    theta = overrides.get("rope_theta", 10000.0)
    bases = set(re.findall(r"transformer\.rope .*base = ([^ ]*) : f32", canonical))
    assert bases == (set() if length == 1 or theta == 10000.0 else {f"{theta:e}"})


def test_llama_every_pipeline_level():
    model = hf_model("llama")
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = model(ids).logits
    for pipeline in ("baseline", "fused", "vectorized"):
        compiled = gpt.compile_module(model, (ids,), options(pipeline))
        check_close(compiled(ids).logits, ref)


@pytest.mark.parametrize("form", ["tuple", "dict"])
def test_dynamic_sequence_length_with_the_default_config(form):
    model = hf_model("qwen2")
    length = torch.export.Dim("T", max=64)
    shapes = ({1: length},) if form == "tuple" else {"input_ids": {1: length}}
    example = torch.zeros(1, 8, dtype=torch.int64)
    compiled = gpt.compile_module(model, (example,), options(), dynamic_shapes=shapes)
    ids = torch.randint(0, 256, (1, 11), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        check_close(compiled(ids).logits, model(ids).logits)
    assert compiled.compiled_buckets() == [16]


def test_torch_compile_with_the_default_config():
    """torch.compile keeps HF's DynamicCache in Python: the captured graph also returns the
    layers' keys and values, concatenated onto the cache's empty start."""
    model = hf_model("llama")
    ids = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = model(ids).logits
        out = torch.compile(model, backend="gpt", options={"strict": True, "disk_cache": False})(ids).logits
    check_close(out, ref)


# -- the written-out forms that are not recovered --------------------------------------------------


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class WrittenOut(nn.Module):
    """mean with and without keepdim, an unweighted RMSNorm, SiLU alone and times a broadcast
    column, and a rotary embedding (of heads, and of [1, T, d]) by frequencies `scale` times HF's
    (1: recovered as transformer.rope; 0.5, linear position scaling: not a rope the op computes,
    left written out)."""

    def __init__(self, scale: float):
        super().__init__()
        self.fc = nn.Linear(16, 32)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.int64).float() / 8))
        self.register_buffer("inv_freq", inv_freq * scale, persistent=False)

    def forward(self, x):  # x: [1, 6, 16]
        h = self.fc(x)
        mean = h.mean(-1)  # [1, 6]
        norm = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
        silu = F.silu(h)
        gated = F.silu(h) * h[..., :1]  # broadcast: not swiglu's operands
        q = h.view(1, 6, 4, 8).transpose(1, 2)  # [1, 4, 6, 8]
        freqs = torch.arange(6).float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        rotated = q * emb.cos() + rotate_half(q) * emb.sin()
        p = h[..., 8:16]  # [1, 6, 8]: no heads dimension
        flat = p * emb.cos() + rotate_half(p) * emb.sin()
        return mean, norm, silu, gated, rotated, flat


@pytest.mark.parametrize("pipeline", ["baseline", "default"])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_written_out_forms_against_eager(scale, pipeline):
    torch.manual_seed(7)
    model = WrittenOut(scale).eval()
    x = torch.randn(1, 6, 16)
    compiled = gpt.compile_module(model, (x,), options(pipeline))
    with torch.no_grad():
        got, want = compiled(x), model(x)
    for actual, expected in zip(got, want, strict=True):
        check_close(actual, expected)
    canonical = compiled.ir("transformer")
    assert op_count(canonical, "mean") == 1  # the plain mean; the RMSNorm's is folded
    assert op_count(canonical, "rms_norm") == 1
    assert op_count(canonical, "silu") == 2 and op_count(canonical, "swiglu") == 0
    assert op_count(canonical, "rope") == (2 if scale == 1.0 else 0)
    assert op_count(canonical, "concat") == (0 if scale == 1.0 else 2)


def test_llama3_scaled_rope_stays_written_out():
    """Llama 3's frequency scaling: tables that no unscaled transformer.rope computes, so the rotary
    embedding runs as written (cos/sin constants, concat, mul), still equal to transformers'."""
    scaling = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=16)
    model = hf_model(
        "llama",
        hidden_size=128,
        num_key_value_heads=1,
        rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, **scaling),
    )
    ids = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(8))
    compiled = gpt.compile_module(model, (ids,), options())
    with torch.no_grad():
        check_close(compiled(ids).logits, model(ids).logits)
    canonical = compiled.ir("transformer")
    assert op_count(canonical, "rope") == 0 and op_count(canonical, "concat") == 4  # q and k, 2 layers
    assert op_count(canonical, "rms_norm") == 5 and op_count(canonical, "swiglu") == 2


def test_mean_over_other_dimensions_is_refused_by_name():
    class MeanOverTokens(nn.Module):
        def forward(self, x):
            return x.mean(1)

    with pytest.raises(gpt.CompilerError, match=r"aten\.mean\.dim .*only over the last"):
        gpt.compile_module(MeanOverTokens().eval(), (torch.randn(1, 6, 16),))
