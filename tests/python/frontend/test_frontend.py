"""gpt.compile_module: PyTorch modules exported with torch.export, imported into the transformer
dialect and compiled, against eager PyTorch (max |error| <= 1e-4 * max |reference|)."""

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

import gpt
from shapes import RTOL

# -- models written here: an MLP and a nanoGPT-style GPT (Karpathy's model.py, abridged) -------


class NanoConfig:
    def __init__(self, n_layer=2, n_head=4, n_embd=64, vocab_size=96, block_size=32, sdpa=False):
        self.n_layer, self.n_head, self.n_embd = n_layer, n_head, n_embd
        self.vocab_size, self.block_size, self.sdpa = vocab_size, block_size, sdpa


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)
        self.attn_dropout = nn.Dropout(0.1)
        self.n_head, self.n_embd, self.sdpa = c.n_head, c.n_embd, c.sdpa
        mask = torch.tril(torch.ones(c.block_size, c.block_size)).view(1, 1, c.block_size, c.block_size)
        self.register_buffer("bias", mask)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(c.n_embd), CausalSelfAttention(c), nn.LayerNorm(c.n_embd)
        self.mlp = nn.Sequential(nn.Linear(c.n_embd, 4 * c.n_embd), NewGELU(), nn.Linear(4 * c.n_embd, c.n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(c.vocab_size, c.n_embd), nn.Embedding(c.block_size, c.n_embd)
        self.h = nn.ModuleList([Block(c) for _ in range(c.n_layer)])
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # tied, as in nanoGPT

    def forward(self, idx):
        _, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class Sine(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.sin(self.fc(x)) + torch.cumsum(x, dim=-1)  # two ops the importer lacks


def exercised(module, seed=0):
    """Random LayerNorm scales and biases too: the default ones and zeros would hide a bug."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "ln" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=generator))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=generator))
    return module.eval()


def check_close(actual, expected):
    actual, expected = np.asarray(actual), expected.detach().numpy()
    assert actual.shape == expected.shape
    error = np.abs(actual - expected).max() / np.abs(expected).max()
    assert error <= RTOL, f"relative error {error}"


def options(pipeline="default", **kw):
    return gpt.CompileOptions(pipeline=pipeline, disk_cache=False, **kw)


# -- tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", ["baseline", "fused", "vectorized"])
def test_mlp_every_level(pipeline):
    torch.manual_seed(0)
    mlp = exercised(
        nn.Sequential(nn.Linear(16, 100), nn.ReLU(), nn.Linear(100, 40), nn.GELU("tanh"), nn.Linear(40, 64), nn.GELU())
    )
    x = torch.randn(5, 16)
    compiled = gpt.compile_module(mlp, (x,), options(pipeline))
    check_close(compiled(x), mlp(x))
    # numpy in, numpy out; another input of the same shape
    y = np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)
    out = compiled(y)
    assert isinstance(out, np.ndarray)
    check_close(out, mlp(torch.from_numpy(y)))
    # 100 columns are not a multiple of the panel width: packed padded to 128, sliced back.
    imported = compiled.ir("imported")
    assert "transformer.gelu " in imported and "transformer.gelu_erf" in imported  # tanh and exact
    layouts = dict(compiled.parameter_layouts())
    assert layouts["0.weight"] == ("panels" if pipeline == "vectorized" else "transposed")


@pytest.mark.parametrize("pipeline", ["baseline", "default"])
@pytest.mark.parametrize("sdpa", [False, True])
def test_nanogpt(sdpa, pipeline):
    torch.manual_seed(1)
    model = exercised(NanoGPT(NanoConfig(sdpa=sdpa)))
    idx = torch.randint(0, 96, (1, 24))
    compiled = gpt.compile_module(model, (idx,), options(pipeline, threads=2))
    with torch.no_grad():
        check_close(compiled(idx), model(idx))
    imported = compiled.ir("imported")
    # The hand-written attention and GELU are imported as written; canonicalization recovers
    # transformer.causal_attention (the tril mask analysed as causal) and transformer.gelu.
    attentions = 0 if sdpa else 2
    assert imported.count("transformer.where") == attentions and imported.count("transformer.softmax") == attentions
    assert imported.count("transformer.tanh") == 2 and "transformer.gelu" not in imported
    canonical = compiled.ir("transformer")
    assert canonical.count("transformer.gelu") == 2 and "transformer.tanh" not in canonical
    matmul = "transformer.packed_matmul" if pipeline == "default" else "transformer.matmul"
    assert canonical.count(matmul) == 2 * 4 + 1  # the attention's two per layer are gone
    assert canonical.count("transformer.causal_attention") == 2 and " mask " not in canonical
    assert "transformer.softmax" not in canonical and "transformer.where" not in canonical


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_hf_gpt2_nano(attn_implementation):
    """use_cache stays at its default (True): the export leaves HF's DynamicCache out, and the
    compiled module returns the model's output with past_key_values None."""
    torch.manual_seed(2)
    config = GPT2Config(
        n_layer=2,
        n_head=4,
        n_embd=64,
        vocab_size=100,
        n_positions=64,
        attn_implementation=attn_implementation,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = exercised(GPT2LMHeadModel(config))
    idx = torch.randint(0, 100, (1, 16))
    compiled = gpt.compile_module(model, (idx,))
    with torch.no_grad():
        out, ref = compiled(idx), model(idx)
    assert type(out) is type(ref)  # the module's own output structure
    assert ref.past_key_values is not None and out.past_key_values is None
    check_close(out.logits, ref.logits)
    canonical = compiled.ir("transformer")
    assert canonical.count("transformer.causal_attention") == 2 and " mask " not in canonical
    assert "transformer.softmax" not in canonical and "transformer.packed_matmul" in canonical


def test_hf_gpt2_small_shape():
    """GPT2Config's defaults (GPT-2 small: 12 layers, 768 wide, 50257 tokens; use_cache=True) with
    HF's eager attention: the recovery holds at full size (one test: exporting, packing and
    compiling 124 M parameters takes a while)."""
    torch.manual_seed(3)
    config = GPT2Config(attn_implementation="eager")
    model = exercised(GPT2LMHeadModel(config))
    idx = torch.randint(0, config.vocab_size, (1, 16))
    compiled = gpt.compile_module(model, (idx,))
    with torch.no_grad():
        out, ref = compiled(idx), model(idx)
    check_close(out.logits, ref.logits)
    canonical = compiled.ir("transformer")
    assert canonical.count("transformer.causal_attention") == 12 and " mask " not in canonical
    assert canonical.count("transformer.packed_matmul") == 12 * 4 + 1


def test_unsupported_ops_are_listed_with_their_source_line():
    with pytest.raises(gpt.CompilerError) as error:
        gpt.compile_module(Sine().eval(), (torch.randn(3, 8),))
    message = str(error.value)
    assert "aten.sin.default" in message and "aten.cumsum.default" in message
    line = next(i for i, text in enumerate(open(__file__), 1) if "two ops the importer lacks" in text)
    assert f"test_frontend.py:{line}" in message


def test_unsupported_dtype_and_training_mode():
    with pytest.raises(gpt.CompilerError, match="float64"):
        gpt.compile_module(nn.Linear(4, 4).double().eval(), (torch.randn(2, 4, dtype=torch.float64),))
    model = NanoGPT(NanoConfig(n_layer=1)).train()
    with pytest.raises(gpt.CompilerError, match="training mode"):
        gpt.compile_module(model, (torch.randint(0, 96, (1, 8)),))


def test_bad_call_arguments():
    mlp = nn.Sequential(nn.Linear(4, 32)).eval()
    compiled = gpt.compile_module(mlp, (torch.randn(2, 4),), options("baseline"))
    with pytest.raises(ValueError, match="compiled for"):
        compiled(torch.randn(3, 4))
    with pytest.raises(ValueError, match="compiled for"):
        compiled(torch.randn(2, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="expected 1 input"):
        compiled(torch.randn(2, 4), torch.randn(2, 4))
    with pytest.raises(TypeError, match="options must be"):
        gpt.compile_module(mlp, (torch.randn(2, 4),), options="default")


def test_disk_cache_serves_the_second_compile(tmp_path):
    mlp = exercised(nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 32)))
    x = torch.randn(3, 8)
    cached = gpt.CompileOptions(cache_dir=str(tmp_path))
    first = gpt.compile_module(mlp, (x,), cached)
    second = gpt.compile_module(mlp, (x,), cached)
    assert not first.loaded_from_disk_cache() and second.loaded_from_disk_cache()
    check_close(second(x), mlp(x))


def test_torch_compile_backend():
    torch._dynamo.reset()
    torch.manual_seed(3)
    model = exercised(NanoGPT(NanoConfig(n_layer=1)))
    idx = torch.randint(0, 96, (1, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager: the whole graph compiles
        with torch.no_grad():
            got = torch.compile(model, backend="gpt")(idx)
    with torch.no_grad():
        check_close(got, model(idx))


def test_torch_compile_backend_falls_back_with_one_warning_or_raises_when_strict():
    torch._dynamo.reset()
    model, x = Sine().eval(), torch.randn(3, 8)
    with pytest.warns(UserWarning, match="runs in eager PyTorch") as record:
        with torch.no_grad():
            got = torch.compile(model, backend="gpt")(x)
    fallbacks = [w for w in record if "gpt backend" in str(w.message)]
    assert len(fallbacks) == 1 and "aten.sin.default" in str(fallbacks[0].message)
    line = next(i for i, text in enumerate(open(__file__), 1) if "two ops the importer lacks" in text)
    assert f"test_frontend.py:{line}" in str(fallbacks[0].message)  # the user's line, not Dynamo's code
    with torch.no_grad():
        np.testing.assert_array_equal(got.numpy(), model(x).numpy())  # eager: the same computation
    torch._dynamo.reset()
    with pytest.raises(Exception, match="aten.sin.default"):  # Dynamo wraps it in BackendCompilerFailed
        torch.compile(model, backend="gpt", options={"strict": True})(x)


def test_dynamic_sequence_length_is_bucketed():
    torch.manual_seed(4)
    model = exercised(NanoGPT(NanoConfig(n_layer=1, block_size=64, sdpa=True)))
    length = torch.export.Dim("T", max=48)
    compiled = gpt.compile_module(
        model, (torch.randint(0, 96, (1, 16)),), options("baseline"), dynamic_shapes={"idx": {1: length}}
    )
    for t in (5, 13, 16, 40):
        idx = torch.randint(0, 96, (1, t))
        with torch.no_grad():
            check_close(compiled(idx), model(idx))
    assert compiled.compiled_buckets() == [8, 16, 48]  # powers of two from 8, capped at the Dim's max
    with pytest.raises(ValueError, match="outside"):
        compiled(torch.randint(0, 96, (1, 49)))


def test_dynamic_dimensions_other_than_the_sequence_are_refused():
    batch = torch.export.Dim("B", max=4)
    with pytest.raises(gpt.CompilerError, match="only the sequence length"):
        gpt.compile_module(nn.Linear(4, 4).eval(), (torch.randn(2, 4),), dynamic_shapes=({0: batch},))


# -- attention masks other than causal (issue 13 items 1 and 3) -----------------------------------


class MaskedAttentions(nn.Module):
    """Four attentions over the same q, k, v, one per way of giving a non-causal mask."""

    def __init__(self, t=8, heads=2, d=8):
        super().__init__()
        self.qkv = nn.Linear(heads * d, 3 * heads * d)
        self.heads, self.d = heads, d
        i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        self.register_buffer("window", (j <= i) & (i - j < 3))  # sliding window of 3, bool
        self.register_buffer("prefix", torch.where((j <= i) | (j < 2), 0.0, float("-inf")))  # additive
        self.register_buffer("sink", ((j == 0) | (j == i)).float())  # 1 = kept, compared below

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = (y.view(B, T, self.heads, self.d).transpose(1, 2) for y in self.qkv(x).split(C, dim=2))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=self.window)
        b = F.scaled_dot_product_attention(q, k, v, attn_mask=self.prefix)
        c = F.scaled_dot_product_attention(q, k, v)  # bidirectional
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        d = F.softmax(scores.masked_fill(self.sink == 0, float("-inf")), dim=-1) @ v  # recovered in C++
        return (a + 2 * b + 3 * c + 4 * d).transpose(1, 2).contiguous().view(B, T, C)


def test_constant_masks_become_the_attention_mask_operand():
    torch.manual_seed(5)
    model = exercised(MaskedAttentions())
    x = torch.randn(1, 8, 16)
    compiled = gpt.compile_module(model, (x,), options(threads=2))
    with torch.no_grad():
        check_close(compiled(x), model(x))
    canonical = compiled.ir("transformer")
    assert canonical.count("transformer.causal_attention") == 4 and canonical.count(" mask %") == 4
    assert "transformer.softmax" not in canonical and "transformer.where" not in canonical


class InputMaskedAttention(nn.Module):
    def forward(self, q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep > 0)


class InputCondition(nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x, 0.5 * x)


def test_a_mask_computed_from_the_inputs_is_refused_by_name():
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(gpt.CompilerError, match="attn_mask gt depends on the module's inputs"):
        gpt.compile_module(InputMaskedAttention().eval(), (q, q, q, torch.randn(4, 4)))
    with pytest.raises(gpt.CompilerError, match="the condition gt depends on the module's inputs"):
        gpt.compile_module(InputCondition().eval(), (torch.randn(3, 8),))


# -- standalone ops (issue 13 item 2): one model using all of them, against eager ------------------


class StandaloneOps(nn.Module):
    """exp, rsqrt, pow, where and masked_fill on activations, a general reshape and permute,
    select, cat and expand, each of them once."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 24)
        self.register_buffer("keep", torch.arange(24) % 3 != 0)

    def forward(self, x):  # x: [1, 6, 8]
        h = self.fc(x)
        e = torch.exp(0.5 * h)
        r = torch.rsqrt(e + 1.0)
        p = torch.pow(e, 1.5)
        w = torch.where(self.keep, r, p).masked_fill(~self.keep, -0.75) + p
        g = w.reshape(1, 6, 4, 6).permute(0, 3, 1, 2)  # [1, 6, 6, 4]
        s = g.select(2, 1)  # [1, 6, 4]
        c = torch.cat([s, x[..., :4], s * 2.0], dim=1)  # [1, 18, 4]
        b = s.reshape(1, 24, 1).expand(1, 24, 3)
        return c, b


@pytest.mark.parametrize("pipeline", ["baseline", "default"])
def test_standalone_ops_against_eager(pipeline):
    torch.manual_seed(6)
    model = exercised(StandaloneOps())
    x = torch.randn(1, 6, 8)
    compiled = gpt.compile_module(model, (x,), options(pipeline, threads=2))
    with torch.no_grad():
        got, want = compiled(x), model(x)
    for actual, expected in zip(got, want, strict=True):
        check_close(actual, expected)
    imported = compiled.ir("imported")
    for op in ("exp", "rsqrt", "pow", "where", "reshape", "permute", "slice", "concat", "broadcast"):
        assert f"transformer.{op} " in imported, op


# -- a static batch above one (issue 13 item 4) ----------------------------------------------------


@pytest.mark.parametrize("model_kind", ["nanogpt", "hf_sdpa"])
def test_batch_of_two(model_kind):
    torch.manual_seed(7)
    if model_kind == "nanogpt":
        model = exercised(NanoGPT(NanoConfig(n_layer=1)))
    else:
        config = GPT2Config(
            n_layer=1, n_head=4, n_embd=64, vocab_size=100, n_positions=64, use_cache=False, attn_implementation="sdpa"
        )
        model = exercised(GPT2LMHeadModel(config))
    idx = torch.randint(0, 96, (2, 12))
    compiled = gpt.compile_module(model, (idx,), options(threads=2))
    with torch.no_grad():
        got, want = compiled(idx), model(idx)
    if model_kind == "hf_sdpa":
        got, want = got.logits, want.logits
    check_close(got, want)
    assert not np.allclose(np.asarray(got)[0], np.asarray(got)[1])  # two sequences, not one broadcast
    canonical = compiled.ir("transformer")
    # The batch and the heads attend as one [B * H, T, d] causal attention; nothing is left decomposed.
    assert canonical.count("transformer.causal_attention") == 1 and "tensor<8x12x16xf32>" in canonical
    assert "transformer.softmax" not in canonical and "transformer.packed_matmul" in canonical


# -- out-of-range embedding indices (issue 29) ------------------------------------------------------


class Lookup(nn.Module):
    """An embedding of 16 rows read by the ids, plus a position table read by an arange."""

    def __init__(self, offset=0):
        super().__init__()
        self.wte, self.wpe, self.offset = nn.Embedding(16, 8), nn.Embedding(16, 8), offset

    def forward(self, idx):
        return self.wte(idx) + self.wpe(torch.arange(idx.shape[-1]) + self.offset)


@pytest.mark.parametrize("shape", [(6,), (1, 6), (2, 6)])
@pytest.mark.parametrize("bad", [16, -1, 2**40, -(2**63)])
def test_out_of_range_embedding_ids_raise_as_in_eager(shape, bad):
    """The compiled gather clamps an id into its table; the call raises IndexError instead, naming
    the index and the table's size, as eager PyTorch raises. In-range ids at the edges (0, 15)
    give eager's rows."""
    torch.manual_seed(8)
    model = Lookup().eval()
    idx = torch.randint(0, 16, shape)
    idx.view(-1)[:2] = torch.tensor([0, 15])
    compiled = gpt.compile_module(model, (idx,), options())
    with torch.no_grad():
        np.testing.assert_allclose(compiled(idx).numpy(), model(idx).numpy(), rtol=1e-6)
    wrong = idx.clone()
    wrong.view(-1)[-1] = bad
    with pytest.raises(IndexError):
        model(wrong)  # eager PyTorch
    with pytest.raises(IndexError, match=f"index {bad} at position .* out of range for an embedding table of 16 rows"):
        compiled(wrong)
    with pytest.raises(IndexError, match=f"index {bad}"):
        compiled(wrong.numpy())


def test_constant_embedding_ids_out_of_range_are_refused_at_compile_time():
    """Ids known when compiling (an arange) are checked then: positions 11..16 of 16 rows."""
    idx = torch.zeros(1, 6, dtype=torch.long)
    gpt.compile_module(Lookup(offset=10).eval(), (idx,), options())  # 10..15: in range
    with pytest.raises(gpt.CompilerError, match="constant index 16 is out of range for an embedding table of 16 rows"):
        gpt.compile_module(Lookup(offset=11).eval(), (idx,), options())


def test_torch_compile_backend_raises_for_out_of_range_embedding_ids():
    torch._dynamo.reset()
    torch.manual_seed(9)
    model = Lookup().eval()
    compiled = torch.compile(model, backend="gpt", options={"strict": True, "disk_cache": False})
    idx = torch.randint(0, 16, (1, 6))
    with torch.no_grad():
        np.testing.assert_allclose(compiled(idx).numpy(), model(idx).numpy(), rtol=1e-6)
        for bad in (16, -1):
            wrong = idx.clone()
            wrong[0, 3] = bad
            with pytest.raises(IndexError, match=f"index {bad} at position \\(0, 3\\)"):
                compiled(wrong)


@pytest.mark.parametrize(
    "use",
    [lambda i: torch.cat([i, i], dim=1), lambda i: i.t(), lambda i: i.permute(1, 0), lambda i: i[:, 0]],
)
def test_batch_ids_used_other_than_by_an_embedding_are_refused_by_name(use):
    """Token ids of a batch are held flat for the embedding; any other use was an internal
    IndexError (cat, transpose) and is now a CompilerError saying what is supported."""

    class Use(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(16, 8)

        def forward(self, idx):
            return self.wte(use(idx))

    with pytest.raises(gpt.CompilerError, match="supported only as an embedding's ids"):
        gpt.compile_module(Use().eval(), (torch.zeros(2, 6, dtype=torch.long),), options())
