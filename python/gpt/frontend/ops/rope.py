"""HF's rotary embedding, x * cos + rotate_half(x) * sin with tables known at compile time, as transformer.rope."""

import math

import numpy as np
import torch

from gpt.frontend.emitter import Emitter, Recognized, Unsupported, Value, materialize, mlir_float, recognizes

aten = torch.ops.aten


def _is_call(node, *targets) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in targets


def _shape_of(node) -> tuple[int, ...]:
    return tuple(int(d) for d in node.meta["val"].shape)


def _slice_of_last_dim(node, x, start: int, stop: int) -> bool:
    """Whether `node` is x[..., start:stop] (a stop past the end: to the end)."""
    if not _is_call(node, aten.slice.Tensor) or node.args[0] is not x:
        return False
    rank = len(_shape_of(x))
    dim = node.args[1] if len(node.args) > 1 else 0
    begin = node.args[2] if len(node.args) > 2 and node.args[2] is not None else 0
    end = node.args[3] if len(node.args) > 3 and node.args[3] is not None else _shape_of(x)[-1]
    step = node.args[4] if len(node.args) > 4 else 1
    return dim % rank == rank - 1 and step == 1 and begin == start and min(end, _shape_of(x)[-1]) == stop


def _is_rotate_half_of(node, x) -> bool:
    """Whether `node` is HF's rotate_half(x): cat((-x[..., d/2:], x[..., :d/2]), dim=-1)."""
    if not _is_call(node, aten.cat.default) or len(node.args[0]) != 2:
        return False
    d = _shape_of(x)[-1]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    negated, first = node.args[0]
    return (
        dim % len(_shape_of(x)) == len(_shape_of(x)) - 1
        and _is_call(negated, aten.neg.default)
        and _slice_of_last_dim(negated.args[0], x, d // 2, d)
        and _slice_of_last_dim(first, x, 0, d // 2)
    )


def _rope_tables_base(cos: np.ndarray, sin: np.ndarray) -> float | None:
    """The base of the rotary embedding (rotate-half layout, unscaled) whose tables at positions
    0 .. T-1 are cos and sin [T, d]: cos[t, j] = cos(t * base^(-2 (j mod d/2) / d)), sin alike;
    None when they are not such tables (other positions, Llama 3 or linear scaling: those stay
    written out). The tables are HF's, computed in f32: the fit allows their rounding."""
    t, d = cos.shape
    half = d // 2
    if d % 2 or sin.shape != cos.shape:
        return None
    base = 10000.0  # one position (0) or one pair (theta_0 = 1): every base gives these tables
    if t > 1 and half > 1:
        # Position 1's angles are the frequencies themselves (all <= 1 radian, no wrap-around).
        theta = np.arctan2(sin[1, :half].astype(np.float64), cos[1, :half].astype(np.float64))
        if np.any(theta <= 0):
            return None
        exponents = 2.0 * np.arange(1, half) / d  # log theta_i = -exponent_i * log base
        log_base = -np.sum(np.log(theta[1:]) * exponents) / np.sum(exponents**2)
        base = float(np.exp(log_base))
        if abs(base - round(base)) <= 1e-3 * base:
            base = float(round(base))
        base = float(np.float32(base))  # as the op's f32 attribute holds it
    frequencies = base ** (-2.0 * np.arange(half) / d)  # RopeOp::getFrequencies, in f64
    angles = np.arange(t, dtype=np.float64)[:, None] * np.concatenate([frequencies, frequencies])[None, :]
    # f32 angles t * theta carry an error of a few units in the last place of t: ~3e-7 t.
    tolerance = 1e-6 + 4e-7 * t
    if np.abs(np.cos(angles) - cos).max() > tolerance or np.abs(np.sin(angles) - sin).max() > tolerance:
        return None
    return base


def _constant_table(imp: Emitter, node, x) -> np.ndarray | None:
    """`node` as a [T, d] float table known at compile time that broadcasts against x's [.., T, d]
    by its last two dimensions; else None."""
    value = imp.constant_value(node)
    if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or value.ndim < 2:
        return None
    shape = _shape_of(x)
    if tuple(value.shape[-2:]) != shape[-2:] or value.ndim > len(shape) or any(d != 1 for d in value.shape[:-2]):
        return None
    return value.detach().numpy().reshape(shape[-2:]).astype(np.float64)


@recognizes
def _recognize_rope(imp: Emitter, node) -> Recognized | None:
    """HF's apply_rotary_pos_emb, `x * cos + rotate_half(x) * sin`, with cos and sin known at compile
    time (positions 0 .. T-1, as a module called without position_ids has them) -> transformer.rope
    on x [.., H, T, d] (its rotate-half layout; the base fitted to the tables)."""
    if not _is_call(node, aten.add.Tensor) or node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2:
        return None
    for plain, rotated in (node.args, node.args[::-1]):
        if not _is_call(plain, aten.mul.Tensor) or not _is_call(rotated, aten.mul.Tensor):
            continue
        for x, cos_node in (plain.args, plain.args[::-1]):
            if not isinstance(x, torch.fx.Node) or imp.constant_value(x) is not None or len(_shape_of(x)) < 2:
                continue
            for half_turn, sin_node in (rotated.args, rotated.args[::-1]):
                if not _is_rotate_half_of(half_turn, x):
                    continue
                cos, sin = _constant_table(imp, cos_node, x), _constant_table(imp, sin_node, x)
                if cos is None or sin is None:
                    continue
                base = _rope_tables_base(cos, sin)
                if base is not None:
                    return Recognized((x,), lambda imp, node, x=x, base=base: emit_rope(imp, node, x, base))
    return None


def emit_rope(imp: Emitter, node, x_node, base: float) -> Value:
    """transformer.rope of x [H, T, d] at the positions 0 .. T-1 (a constant argument); the
    leading dims of another rank ([B, H, T, d], or [T, d]) reshaped into H and back."""
    x = materialize(imp, imp.operand(x_node))
    if x.layout != "plain" or len(x.shape) < 2:
        raise Unsupported(f"rotary embedding of a tensor of shape {x.shape} (needs [.., T, d])")
    t, d = x.shape[-2:]
    heads = x if len(x.shape) == 3 else imp.emit("transformer.reshape", [x], (math.prod(x.shape[:-2]), t, d))
    if t not in imp.positions:
        imp.positions[t] = imp.argument("constant", (t,), "i64", data=np.arange(t, dtype=np.int64))
    result = imp.emit("transformer.rope", [heads, imp.positions[t]], heads.shape, f"base = {mlir_float(base)} : f32")
    if heads.shape != x.shape:
        result = imp.emit("transformer.reshape", [result], x.shape)
    return imp.shaped(result, node)
