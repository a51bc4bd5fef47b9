"""An independent numpy GPT-2, written from the math (not from the compiler's code), in float64.

Used as an oracle next to HF transformers: it also covers rotary embeddings, which HF's GPT-2
does not have.
"""

import numpy as np


def layer_norm(x, weight, bias, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def rotate_half_rope(x, positions, base=10000.0):
    """GPT-NeoX rotary embedding on x [heads, T, head_size] at the given absolute positions."""
    head_size = x.shape[-1]
    half = head_size // 2
    inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / head_size)
    angles = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]  # [T, half]
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1)
    sin = np.concatenate([np.sin(angles)] * 2, axis=-1)
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def causal_self_attention(q, k, v, window=None, mask=None):
    """q, k, v [heads, T, head_size] -> [heads, T, head_size]. With `window` W, query i sees only
    the keys j with i - W < j <= i (a dense mask, applied to the whole score matrix). `mask`, a
    bool [>= T, >= T] matrix, replaces the causal rule: query i sees key j iff mask[i, j]."""
    t = q.shape[1]
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    visible = j <= i if mask is None else np.asarray(mask, dtype=bool)[:t, :t]
    if window is not None:
        visible &= j > i - window
    scores = np.where(visible, scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (scores / scores.sum(axis=-1, keepdims=True)) @ v


def gpt2_logits(
    weights,
    ids,
    n_layer,
    n_head,
    pos_embedding="learned",
    eps=1e-5,
    lm_head=None,
    matmul_input=None,
    window=None,
    mask=None,
    head_input=None,
):
    """Logits [T, vocab] of GPT-2 with HF parameter names (Conv1D weights are [in, out]). The LM
    head is the tied embedding unless `lm_head` ([vocab, d]) is given. `matmul_input`, when given,
    maps the input of every product with a weight (qkv, attention projection, MLP fc and proj,
    LM head) to what the matmul multiplies, e.g. activations rounded to a low precision;
    attention's q k^T and p v products are not weight matmuls and take their inputs as they are.
    `window`: sliding-window attention (see causal_self_attention); with rope, ids may be longer
    than any block_size. `mask`: any attention mask, dense (see causal_self_attention). `head_input`:
    the LM head's own `matmul_input`, where its weight's format takes its input otherwise."""
    into = matmul_input if matmul_input is not None else (lambda v: v)
    w = {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}
    ids = np.asarray(ids)
    t = len(ids)
    positions = np.arange(t)
    x = w["transformer.wte.weight"][ids]
    if pos_embedding == "learned":
        x = x + w["transformer.wpe.weight"][positions]
    d = x.shape[-1]
    hs = d // n_head
    for i in range(n_layer):
        p = f"transformer.h.{i}."
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = into(h) @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (qkv[:, j * d : (j + 1) * d].reshape(t, n_head, hs).transpose(1, 0, 2) for j in range(3))
        if pos_embedding == "rope":
            q, k = rotate_half_rope(q, positions), rotate_half_rope(k, positions)
        a = causal_self_attention(q, k, v, window, mask).transpose(1, 0, 2).reshape(t, d)
        x = x + into(a) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = gelu_tanh(into(h) @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + into(h) @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    head = w["transformer.wte.weight"] if lm_head is None else np.asarray(lm_head, dtype=np.float64)
    return (into if head_input is None else head_input)(x) @ head.T
