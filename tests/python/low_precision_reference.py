"""What a low-precision GPT-2 computes, in float64 numpy apart from the compiler: the model of
reference.py on weights rounded to bf16 or quantized and dequantized by quant_reference.py, with
every matmul's input rounded as the dot-product instructions see it (bf16, or int8 per block of
32)."""

import quant_reference as ref
from reference import gpt2_logits

MATMUL_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def bf16_reference(weights, ids, cfg, activations=True):
    """What a bf16 model computes: every matmul weight and the LM head rounded to bf16, and (with
    `activations`) every matmul's input rows too, as vdpbf16ps multiplies bf16 by bf16; the
    embedding lookup, biases and LayerNorm in f32."""
    rounded = dict(weights)
    for name in weights:
        if name.endswith(MATMUL_WEIGHTS):
            rounded[name] = ref.bf16_rounded(weights[name])
    head = ref.bf16_rounded(weights["transformer.wte.weight"])
    into = ref.bf16_activations if activations else None
    return gpt2_logits(rounded, ids, cfg.n_layer, cfg.n_head, cfg.pos_embedding, lm_head=head, matmul_input=into)


def block_quantized_reference(fmt, weights, ids, cfg, activations=True):
    """What a q8_0 / q4_0 / q4_1 model computes: every matmul weight dequantized; the tied embedding
    stored once, as the LM head's [D, V] weight with blocks along D, in q8_0 for both formats,
    and dequantized for the token lookup and the head alike; (with `activations`) every matmul's
    input quantized to int8 in blocks of 32 along K, as vpdpbusd multiplies bytes by bytes;
    position embeddings, biases and LayerNorm in f32."""
    rounded = dict(weights)
    for name in weights:
        if name.endswith(MATMUL_WEIGHTS):
            rounded[name] = ref.dequantized(fmt, weights[name])
    table = ref.dequantized("q8_0", weights["transformer.wte.weight"].T).T
    rounded["transformer.wte.weight"] = table
    into = ref.int8_activations if activations else None
    return gpt2_logits(rounded, ids, cfg.n_layer, cfg.n_head, cfg.pos_embedding, lm_head=table, matmul_input=into)
