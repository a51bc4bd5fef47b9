"""Attention: scaled_dot_product_attention as transformer.causal_attention, its mask known at compile time."""

import math

import numpy as np
import torch

from gpt.frontend.emitter import Emitter, Unsupported, Value, additive_mask, distinct_mask, handles, mlir_float

aten = torch.ops.aten


@handles(
    {
        aten.scaled_dot_product_attention.default: (
            "transformer.causal_attention (is_causal, or a constant attn_mask as its mask operand)"
        ),
    }
)
def emit_sdpa(imp: Emitter, node):
    """scaled_dot_product_attention -> transformer.causal_attention: is_causal or a causal mask as
    the causal rule, any other mask known at compile time (bool, or additive 0 / -inf) as its `mask`
    operand, and no mask at all as an all-visible one. With `enable_gqa` the Hkv < H key/value
    heads pass as they are: causal_attention serves H / Hkv query heads from each (HF's repeat_kv
    copies are folded away by canonicalization, cc/dialect/RecoverWrittenOutOps.h)."""
    q, k, v = (imp.operand(n) for n in node.args[:3])
    mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
    dropout = node.args[4] if len(node.args) > 4 else node.kwargs.get("dropout_p", 0.0)
    causal = node.args[5] if len(node.args) > 5 else node.kwargs.get("is_causal", False)
    scale = node.kwargs.get("scale")
    if dropout:
        raise Unsupported("attention dropout (call module.eval() first)")
    batch = _check_heads(q, k, v, grouped=node.kwargs.get("enable_gqa", False))
    if batch:  # the batch and the heads collapsed into one: attention runs over [B * H, T, d]
        q, k, v = (imp.emit("transformer.reshape", [x], (x.shape[0] * x.shape[1], *x.shape[2:])) for x in (q, k, v))
    keep, causal = _visible_keys(imp, mask, causal, queries=q.shape[1], keys=k.shape[1])
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    result = _emit_attention(imp, q, k, v, keep, f"scale = {mlir_float(scale)} : f32")
    if batch:
        result = imp.emit("transformer.reshape", [result], (*batch, q.shape[0] // batch[0], *result.shape[1:]))
    return imp.shaped(result, node)


def _check_heads(q: Value, k: Value, v: Value, grouped: bool) -> tuple[int, ...]:
    """The batch dimensions of q, k, v ([H, T, d], or [B, H, T, d]: (B,)) once their shapes are
    checked: the same batch, one head size for q and k, and as many key as value heads, which
    divide the query heads under `enable_gqa` and equal them otherwise."""
    batch = q.shape[:-3] if len(q.shape) == 4 else ()
    if (
        any(x.layout != "plain" or len(x.shape) not in (3, 4) or x.shape[:-3] != batch for x in (q, k, v))
        or q.shape[-1] != k.shape[-1]
        or k.shape[-3] != v.shape[-3]
    ):
        raise Unsupported("attention needs q, k, v of shape [B, H, T, d]")
    if q.shape[-3] != k.shape[-3] and not (grouped and q.shape[-3] % k.shape[-3] == 0):
        raise Unsupported(
            f"attention of {q.shape[-3]} query heads over {k.shape[-3]} key/value heads "
            "(grouped-query attention needs enable_gqa and a head count that divides the query's)"
        )
    return batch


def _constant_mask(imp: Emitter, mask) -> np.ndarray:
    """An attn_mask known at compile time as the [Tq, Tk] (or broadcasting) keys each query sees:
    a bool mask as it is, an additive one (0 where kept, -inf where masked) as where it is 0."""
    value = imp.constant_value(mask)
    if not isinstance(value, torch.Tensor):
        raise Unsupported(
            f"attn_mask {mask.name} depends on the module's inputs: only masks known at compile time "
            "(buffers, arange and comparisons) are supported"
        )
    if value.dtype == torch.bool:
        keep = distinct_mask(value.detach().numpy())
    else:
        additive = additive_mask(value)
        if additive is None:
            raise Unsupported("a float attn_mask other than 0 where kept and -inf where masked (an additive bias)")
        keep = additive[0]
    if keep.ndim > 2:
        raise Unsupported(f"an attn_mask of shape {tuple(value.shape)} that differs between heads")
    return keep


def _visible_keys(imp: Emitter, mask, causal: bool, queries: int, keys: int) -> tuple[np.ndarray | None, bool]:
    """(keep, causal): the [queries, keys] bool mask of the keys each query sees, or None with causal
    True where that is the causal rule (is_causal, or a mask equal to it); no mask and no is_causal
    is bidirectional, every key visible."""
    keep = None
    if mask is not None:
        keep = np.broadcast_to(_constant_mask(imp, mask), (queries, keys))
    elif not causal:
        keep = np.ones((queries, keys), bool)
    if keep is not None and queries == keys and np.array_equal(keep, np.tril(np.ones((queries, keys), bool))):
        keep, causal = None, True
    if keep is not None and not keep.any(axis=1).all():
        raise Unsupported("an attn_mask with a query row that sees no key (its softmax has no value)")
    if causal and queries != keys:
        raise Unsupported(f"is_causal attention of {queries} queries over {keys} keys")
    return keep, causal


def _emit_attention(imp: Emitter, q: Value, k: Value, v: Value, keep: np.ndarray | None, attributes: str) -> Value:
    """transformer.causal_attention of q, k, v [H, T, d]: causal without `keep`, else with `keep`
    as its i1 mask operand."""
    if keep is None:
        return imp.emit("transformer.causal_attention", [q, k, v], q.shape[:2] + v.shape[2:], attributes)
    bits = imp.mask_constant(keep)
    result = Value(imp.fresh(), (*q.shape[:2], v.shape[2]), "f32")
    types = ", ".join(x.type for x in (q, k, v, bits))
    imp.lines.append(
        f"    {result.name} = transformer.causal_attention {q.name}, {k.name}, {v.name} mask {bits.name} "
        f"{{{attributes}}} : ({types}) -> {result.type}"
    )
    return result
