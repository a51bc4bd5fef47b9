"""Matrix products: linear / addmm / mm against a weight (laid out at compile time) and matmul / bmm."""

import torch

from gpt.frontend.emitter import Emitter, Unsupported, Value, broadcast_shape, handles

aten = torch.ops.aten


def _matmul_with_weight(imp: Emitter, x: Value, weight, transposed: bool, n: int) -> Value:
    """x @ W for a [K, N] weight (`transposed`: W^T of an [N, K] one). A module parameter is laid
    out once, at compile time: packed in column panels (zero-padded to a multiple of their width)
    for transformer.packed_matmul where the pipeline packs weights (the layout vectorized matmuls
    read), else as [K, N] for transformer.matmul."""
    shape = imp.torch_shape(weight)
    rows = x.shape[:-1]
    if imp.is_parameter(weight) and len(shape) == 2:
        target = imp.parameter_of[weight.name]
        if imp.pack_weights:
            multiple = imp.panel_width if n % imp.panel_width == 0 else imp.padded_multiple
            padded = -(-n // multiple) * multiple
            w = imp.parameter(
                target, "panels", transpose=transposed, padded_columns=padded, panel_width=imp.panel_width
            )
            # The op's first word is the weight's format: these panels hold the parameter's floats.
            y = imp.emit("transformer.packed_matmul f32", [x, w], (*rows, padded))
            if padded != n:
                padded_value = y
                y = imp.emit("transformer.slice", [y], (*rows, n), f"offset = 0 : i64, size = {n} : i64")
                imp.padded[y.name] = padded_value
            return y
        w = imp.parameter(target, "transposed" if transposed else "as_given")
        return imp.emit("transformer.matmul", [x, w], (*rows, n))
    w = imp.operand(weight)
    if transposed:
        w = imp.emit("transformer.transpose", [w], (*w.shape[:-2], w.shape[-1], w.shape[-2]))
    return imp.emit("transformer.matmul", [x, w], (*rows, n))


@handles(
    {
        aten.linear.default: "transformer.packed_matmul (weight packed at compile time) or matmul, + add",
        aten.addmm.default: "transformer.packed_matmul or matmul, + add",
        aten.mm.default: "transformer.packed_matmul or matmul",
    }
)
def emit_linear(imp: Emitter, node):
    """linear(x, W, b) = x @ W^T + b, addmm(b, x, W) = b + x @ W (HF Conv1D), mm -> (packed) matmul."""
    if node.target == aten.linear.default:
        x_node, w_node = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else None
        transposed = True
    elif node.target == aten.addmm.default:
        bias, x_node, w_node = node.args[:3]
        if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
            raise Unsupported("addmm with alpha or beta other than 1")
        transposed = False
    else:  # mm
        x_node, w_node, bias, transposed = node.args[0], node.args[1], None, False
    x = imp.operand(x_node)
    if x.layout != "plain" or len(x.shape) < 2:
        raise Unsupported("the input of a linear layer must be [..., K] with rank >= 2 after the batch of 1")
    n = imp.torch_shape(node)[-1]
    y = _matmul_with_weight(imp, x, w_node, transposed, n)
    if bias is not None:
        b = imp.operand(bias)
        y = imp.emit("transformer.add", [y, b], broadcast_shape(y.shape, b.shape))
    return imp.shaped(y, node)


@handles(
    {
        aten.matmul.default: "transformer.matmul (packed_matmul against a parameter)",
        aten.bmm.default: "transformer.matmul",
    }
)
def emit_matmul(imp: Emitter, node):
    """matmul / bmm of two activations (batched on leading dims) -> transformer.matmul."""
    a, b = node.args
    if imp.is_parameter(b) and len(imp.torch_shape(b)) == 2:
        x = imp.operand(a)
        return imp.shaped(_matmul_with_weight(imp, x, b, False, imp.torch_shape(node)[-1]), node)
    x, y = imp.operand(a), imp.operand(b)
    if x.layout != "plain" or y.layout != "plain" or len(x.shape) < 2 or len(y.shape) < 2:
        raise Unsupported("matmul operands must be of rank >= 2 after the batch of 1")
    if len(y.shape) != 2 and x.shape[:-2] != y.shape[:-2]:
        raise Unsupported(f"matmul with broadcast batch dimensions {x.shape} x {y.shape}")
    return imp.shaped(imp.emit("transformer.matmul", [x, y], (*x.shape[:-1], y.shape[-1])), node)
