"""Element-wise ops and activations: arithmetic, where / masked_fill, unary functions, softmax, pow, identities."""

import dataclasses

import torch

from gpt.frontend.emitter import Emitter, Unsupported, Value, additive_mask, broadcast_shape, handles

aten = torch.ops.aten

# Copies to a dtype and device: the identity where the dtype stays float32 (emit_identity checks).
CONVERSION_OPS = {aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, aten.to.device}

ADD = (aten.add.Tensor, aten.add.Scalar)


@handles(
    {
        aten.add.Tensor: "transformer.add (an additive attention mask: transformer.where)",
        aten.add.Scalar: "transformer.add",
        aten.sub.Tensor: "transformer.add + transformer.neg",
        aten.sub.Scalar: "transformer.add",
        aten.mul.Tensor: "transformer.mul",
        aten.mul.Scalar: "transformer.mul",
        aten.div.Tensor: "transformer.mul (by a scalar's reciprocal)",
        aten.div.Scalar: "transformer.mul (by a scalar's reciprocal)",
    }
)
def emit_binary(imp: Emitter, node):
    """add / sub / mul / div (by a scalar) with numpy broadcasting -> transformer.add / mul (/ neg)."""
    target = node.target
    a, b = node.args[0], node.args[1]
    alpha = node.kwargs.get("alpha", 1)
    if target == aten.add.Tensor and alpha == 1:
        for activation, bias in ((a, b), (b, a)):
            mask = additive_mask(imp.constant_value(bias))
            if mask is not None and imp.constant_value(activation) is None:
                # x + M, M = 0 where kept and -inf (finfo.min) where masked, is where(kept, x, fill).
                x = imp.operand(activation)
                keep = imp.mask_constant(mask[0])
                shape = broadcast_shape(x.shape, keep.shape)
                return imp.shaped(imp.emit("transformer.where", [keep, x, imp.scalar(mask[1])], shape), node)
    x = imp.operand(a) if isinstance(a, torch.fx.Node) else None
    y = imp.operand(b) if isinstance(b, torch.fx.Node) else None
    if x is None and y is None:
        raise Unsupported("no tensor operand")
    if target in (aten.div.Tensor, aten.div.Scalar):
        if y is not None:
            raise Unsupported("division by a tensor (only by a scalar)")
        y, target = imp.scalar(1.0 / float(b)), aten.mul.Tensor
    elif target in (aten.sub.Tensor, aten.sub.Scalar):
        if y is None:
            y = imp.scalar(-float(b) * alpha)
        else:
            y = imp.emit("transformer.neg", [y], y.shape)
            if alpha != 1:
                y = imp.emit("transformer.mul", [y, imp.scalar(alpha)], y.shape)
        target = aten.add.Tensor
    else:
        if x is None:
            x, y, b = y, None, a
        if y is None:
            y = imp.scalar(float(b) * (alpha if target in ADD else 1))
        elif alpha != 1:
            y = imp.emit("transformer.mul", [y, imp.scalar(alpha)], y.shape)
    for value in (x, y):
        if value.layout != "plain":
            raise Unsupported("elementwise op on a pending head view")
    op = "transformer.add" if target in ADD else "transformer.mul"
    return imp.shaped(imp.emit(op, [x, y], broadcast_shape(x.shape, y.shape)), node)


def _value_or_scalar(imp: Emitter, operand) -> Value:
    """A where's value: an imported tensor, or a Python or one-element constant as a splat."""
    if isinstance(operand, (int, float, bool)):
        return imp.scalar(float(operand))
    data = imp.constant_value(operand)
    if isinstance(data, torch.Tensor) and data.numel() == 1:
        return imp.scalar(float(data.reshape(-1)[0]))
    value = imp.operand(operand)
    if value.dtype != "f32" or value.layout != "plain":
        raise Unsupported("where / masked_fill of a value that is not a float32 activation")
    return value


@handles(
    {
        aten.where.self: "transformer.where (a condition known at compile time)",
        aten.masked_fill.Scalar: "transformer.where (a mask known at compile time)",
        aten.masked_fill.Tensor: "transformer.where (a mask known at compile time)",
        aten.where.ScalarOther: "transformer.where (a condition known at compile time)",
        aten.where.ScalarSelf: "transformer.where (a condition known at compile time)",
        aten.where.Scalar: "transformer.where (a condition known at compile time)",
    }
)
def emit_where(imp: Emitter, node):
    """where(c, x, y) and masked_fill(x, c, v) = where(c, v, x) -> transformer.where, for a condition
    known at compile time (a mask built from buffers, arange and comparisons)."""
    if node.target in (aten.masked_fill.Scalar, aten.masked_fill.Tensor):
        x, condition, fill = node.args[:3]
        operands = (condition, fill, x)
    else:
        operands = node.args[:3]
    condition = imp.constant_value(operands[0])
    if not isinstance(condition, torch.Tensor) or condition.dtype != torch.bool:
        raise Unsupported(
            f"the condition {operands[0]} depends on the module's inputs: only conditions known at compile time "
            "(masks built from buffers, arange and comparisons) are supported"
        )
    c = imp.operand(operands[0])
    x, y = _value_or_scalar(imp, operands[1]), _value_or_scalar(imp, operands[2])
    shape = broadcast_shape(broadcast_shape(x.shape, y.shape), c.shape)
    return imp.shaped(imp.emit("transformer.where", [c, x, y], shape), node)


@handles(
    {
        aten.neg.default: "transformer.neg",
        aten.relu.default: "transformer.relu",
        aten.tanh.default: "transformer.tanh (a written-out tanh GELU folds into transformer.gelu)",
        aten.exp.default: "transformer.exp",
        aten.rsqrt.default: "transformer.rsqrt",
        aten.silu.default: "transformer.silu (silu(g) * u folds into transformer.swiglu)",
        aten.gelu.default: "transformer.gelu (approximate='tanh'), transformer.gelu_erf (exact)",
        aten.softmax.int: "transformer.softmax (last dim)",
        aten._softmax.default: "transformer.softmax (last dim)",
    }
)
def emit_unary(imp: Emitter, node):
    """neg / exp / rsqrt / silu / relu / tanh / gelu (tanh or exact) / softmax (last dim)."""
    x = imp.operand(node.args[0])
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    rank = len(imp.torch_shape(node))
    if node.target in (aten.softmax.int, aten._softmax.default) and node.args[1] % rank != rank - 1:
        raise Unsupported("softmax over a dimension other than the last")
    op = {
        aten.neg.default: "transformer.neg",
        aten.exp.default: "transformer.exp",
        aten.silu.default: "transformer.silu",
        aten.rsqrt.default: "transformer.rsqrt",
        aten.tanh.default: "transformer.tanh",
        aten.relu.default: "transformer.relu",
        aten.gelu.default: "transformer.gelu" if approximate == "tanh" else "transformer.gelu_erf",
        aten.softmax.int: "transformer.softmax",
        aten._softmax.default: "transformer.softmax",
    }[node.target]
    return imp.shaped(imp.emit(op, [x], x.shape), node)


@handles(
    {
        aten.pow.Tensor_Scalar: "transformer.mul (exponent 2 or 3), else transformer.pow",
    }
)
def emit_power(imp: Emitter, node):
    """pow(x, 2 or 3) -> transformer.mul of x by itself (the cube of a written-out tanh GELU,
    which canonicalization folds back into transformer.gelu with the rest of it); any other
    scalar exponent -> transformer.pow by a splat."""
    x, exponent = imp.operand(node.args[0]), node.args[1]
    if not isinstance(exponent, (int, float)):
        raise Unsupported("pow with a tensor exponent (only a scalar)")
    if exponent not in (2, 3):
        return imp.shaped(imp.emit("transformer.pow", [x, imp.scalar(exponent)], x.shape), node)
    y = imp.emit("transformer.mul", [x, x], x.shape)
    if exponent == 3:
        y = imp.emit("transformer.mul", [y, x], x.shape)
    return imp.shaped(y, node)


@handles(
    {
        aten.dropout.default: "none (eval mode)",
        aten.contiguous.default: "none",
        aten.clone.default: "none",
        aten.alias.default: "none",
        aten.detach.default: "none",
        aten._to_copy.default: "none (float32 to float32)",
        aten.to.dtype: "none (float32 to float32)",
        aten.to.dtype_layout: "none (float32 to float32)",
        aten.to.device: "none (CPU)",
    }
)
def emit_identity(imp: Emitter, node):
    """dropout (eval), contiguous, clone, alias, detach, a float32 -> float32 copy: no IR."""
    if node.target == aten.dropout.default and node.args[2]:
        raise Unsupported("dropout in training mode (call module.eval() first)")
    if node.target in CONVERSION_OPS and node.meta["val"].dtype != node.args[0].meta["val"].dtype:
        raise Unsupported(f"a conversion to {node.meta['val'].dtype}")
    value = imp.operand(node.args[0])
    return dataclasses.replace(value)
