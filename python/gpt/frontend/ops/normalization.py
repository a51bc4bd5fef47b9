"""Normalization and reductions: layer_norm and mean over the last dimension."""

import numpy as np
import torch

from gpt.frontend.emitter import Emitter, Unsupported, handles, materialize, mlir_float

aten = torch.ops.aten


@handles(
    {
        aten.layer_norm.default: "transformer.layer_norm",
    }
)
def emit_layer_norm(imp: Emitter, node):
    """layer_norm over the last dimension -> transformer.layer_norm (absent weight/bias: 1/0)."""
    x = imp.operand(node.args[0])
    normalized = list(node.args[1])
    weight = node.args[2] if len(node.args) > 2 else None
    bias = node.args[3] if len(node.args) > 3 else None
    eps = node.args[4] if len(node.args) > 4 else 1e-5
    if len(normalized) != 1 or normalized[0] != x.shape[-1]:
        raise Unsupported("layer_norm over more than the last dimension")
    c = x.shape[-1]
    w = imp.operand(weight) if weight is not None else imp.constant(np.ones(c, np.float32))
    b = imp.operand(bias) if bias is not None else imp.constant(np.zeros(c, np.float32))
    return imp.shaped(
        imp.emit("transformer.layer_norm", [x, w, b], x.shape, f"epsilon = {mlir_float(eps)} : f32"), node
    )


@handles(
    {
        aten.mean.dim: "transformer.mean (last dim; x * rsqrt(mean(x * x) + eps) folds into rms_norm)",
    }
)
def emit_mean(imp: Emitter, node):
    """mean over the last dimension -> transformer.mean (the dimension kept as size 1), and a
    transformer.reshape dropping it without keepdim."""
    x = materialize(imp, imp.operand(node.args[0]))
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    rank = len(imp.torch_shape(node.args[0]))
    if dims is None or [d % rank for d in dims] != [rank - 1]:
        raise Unsupported(f"mean over the dimensions {dims} (only over the last)")
    if node.kwargs.get("dtype") not in (None, torch.float32):
        raise Unsupported(f"mean computed in {node.kwargs['dtype']}")
    y = imp.emit("transformer.mean", [x], (*x.shape[:-1], 1))
    if not keepdim:
        if len(x.shape) < 2:
            raise Unsupported("mean of a vector to a scalar")
        y = imp.emit("transformer.reshape", [y], x.shape[:-1])
    return imp.shaped(y, node)
