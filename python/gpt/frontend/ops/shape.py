"""Shape and view ops: view / reshape / squeeze, transpose / permute / t, select, cat, expand, split, slice."""

import dataclasses
import math

import torch

from gpt.frontend.emitter import Emitter, Unsupported, Value, handles, materialize

aten = torch.ops.aten


@handles(
    {
        aten.split.Tensor: "transformer.slice (last dim)",
        aten.split_with_sizes.default: "transformer.slice (last dim)",
    }
)
def emit_split(imp: Emitter, node):
    """split / split_with_sizes along the last dimension -> transformer.slice per part."""
    x = imp.operand(node.args[0])
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    rank = len(imp.torch_shape(node.args[0]))
    if dim % rank != rank - 1 or x.layout != "plain":
        raise Unsupported("split along a dimension other than the last")
    total = x.shape[-1]
    if node.target == aten.split.Tensor:
        size = node.args[1]
        sizes = [min(size, total - o) for o in range(0, total, size)]
    else:
        sizes = list(node.args[1])
    parts, offset = [], 0
    for size in sizes:
        part = imp.emit(
            "transformer.slice", [x], (*x.shape[:-1], size), f"offset = {offset} : i64, size = {size} : i64"
        )
        part.batched = x.batched
        parts.append(part)
        offset += size
    return parts


@handles(
    {
        aten.slice.Tensor: "transformer.slice (last dim), none for a full slice",
    }
)
def emit_slice(imp: Emitter, node):
    """slice along the last dimension -> transformer.slice; a slice that keeps everything -> no IR."""
    x = imp.operand(node.args[0])
    in_shape, out_shape = imp.torch_shape(node.args[0]), imp.torch_shape(node)
    if in_shape == out_shape:
        return dataclasses.replace(x)
    dim = node.args[1] if len(node.args) > 1 else 0
    start = node.args[2] if len(node.args) > 2 and node.args[2] is not None else 0
    step = node.args[4] if len(node.args) > 4 else 1
    if dim % len(in_shape) != len(in_shape) - 1 or step != 1 or x.layout != "plain":
        raise Unsupported("slice other than a contiguous range of the last dimension")
    start = start % in_shape[-1] if start < 0 else start
    size = out_shape[-1]
    return imp.shaped(
        imp.emit("transformer.slice", [x], (*x.shape[:-1], size), f"offset = {start} : i64, size = {size} : i64"), node
    )


@handles(
    {
        aten.view.default: "none (batch of 1), transformer.merge_heads, or transformer.reshape",
        aten.reshape.default: "none (batch of 1), transformer.merge_heads, or transformer.reshape",
        aten._unsafe_view.default: "none (batch of 1), transformer.merge_heads, or transformer.reshape",
        aten.unsqueeze.default: "none (leading 1)",
        aten.squeeze.dim: "none (leading 1)",
    }
)
def emit_view(imp: Emitter, node):
    """view / reshape / unsqueeze / squeeze: adding or removing leading 1s (no IR), [1,T,C] ->
    [1,T,H,d] (split heads, pending the transpose) and [1,T,H,d] -> [1,T,C] (merge_heads)."""
    x = imp.operand(node.args[0])
    out = imp.torch_shape(node)
    in_shape = imp.torch_shape(node.args[0])
    if x.layout == "flat":
        if tuple(out) != x.torch_shape:
            raise Unsupported(f"view {in_shape} -> {out} of the token ids of a batch")
        return dataclasses.replace(x)

    def strip(shape):
        return tuple(shape[next((i for i, d in enumerate(shape) if d != 1), len(shape)) :])

    # Leading 1s added or removed: the same IR value where the result's IR shape (its torch shape
    # less the batch of one) is x's; else a reshape (one head's [1, T, d] as [1, 1, T, d]).
    if x.layout == "plain" and strip(out) == strip(x.shape) and _ir_shape(out, x) == x.shape:
        return imp.shaped(Value(x.name, x.shape, x.dtype), node)
    if (
        x.layout == "plain"
        and x.batched
        and len(in_shape) == 3
        and len(out) == 4
        and out[:2] == in_shape[:2]
        and out[2] * out[3] == in_shape[2]
    ):
        return Value(x.name, x.shape, x.dtype, batched=True, layout="split_pending", heads=out[2])
    if x.layout == "merge_pending" and len(out) == 3 and out[0] == 1 and out[2] == x.shape[0] * x.shape[2]:
        return imp.shaped(imp.emit("transformer.merge_heads", [x], (x.shape[1], out[2])), node)
    x = materialize(imp, x)
    target = _ir_shape(out, x)
    if math.prod(target) != math.prod(x.shape):
        raise Unsupported(f"view {in_shape} -> {out} that also drops or adds the batch dimension")
    return imp.shaped(imp.emit("transformer.reshape", [x], target), node)


def _ir_shape(torch_shape, x: Value) -> tuple[int, ...]:
    """The IR shape of a result of torch shape `torch_shape` computed from `x`: a leading 1 is
    dropped (the batch of one) when the result has a dimension more than x's IR shape or x itself
    had its batch dropped."""
    shape = tuple(torch_shape)
    if len(shape) > 1 and shape[0] == 1 and (x.batched or len(shape) > len(x.shape)):
        return shape[1:]
    return shape


def _permute(imp: Emitter, x: Value, permutation) -> Value:
    """transformer.transpose for a swap of the last two dims, else transformer.permute."""
    permutation = list(permutation)
    rank = len(permutation)
    shape = tuple(x.shape[p] for p in permutation)
    if permutation == list(range(rank)):
        return dataclasses.replace(x)
    if rank >= 2 and permutation == [*range(rank - 2), rank - 1, rank - 2]:
        return imp.emit("transformer.transpose", [x], shape)
    return imp.emit("transformer.permute", [x], shape, f"permutation = array<i64: {', '.join(map(str, permutation))}>")


def _ir_permutation(x: Value, permutation) -> list[int]:
    """A torch permutation of x's dims as one of its IR dims (the dropped batch stays first)."""
    permutation = [p % len(permutation) for p in permutation]
    if not x.batched:
        return permutation
    if permutation[0] != 0:
        raise Unsupported(f"permute {permutation} moves the batch dimension")
    return [p - 1 for p in permutation[1:]]


@handles(
    {
        aten.transpose.int: "transformer.split_heads / transpose / permute, or none",
        aten.permute.default: "transformer.split_heads / transpose / permute",
        aten.t.default: "transformer.transpose",
    }
)
def emit_transpose(imp: Emitter, node):
    """transpose(1, 2) of [1,T,H,d] / [1,H,T,d] (heads), transpose of the last two dims, t()."""
    x = imp.operand(node.args[0])
    rank = len(imp.torch_shape(node.args[0]))
    if node.target == aten.t.default:
        dims = [0, 1] if rank == 2 else []
    elif node.target == aten.permute.default:
        perm = [d % rank for d in node.args[1]]
        moved = [i for i, d in enumerate(perm) if d != i]
        dims = moved if len(moved) == 2 and perm[moved[0]] == moved[1] else None
        if dims is None:
            x = materialize(imp, x)
            return imp.shaped(_permute(imp, x, _ir_permutation(x, perm)), node)
    else:
        dims = sorted(d % rank for d in node.args[1:3])
    if not dims:
        return dataclasses.replace(x)
    if rank == 4 and dims == [1, 2] and x.layout == "split_pending":
        t, c = x.shape
        return imp.shaped(
            imp.emit("transformer.split_heads", [x], (x.heads, t, c // x.heads), f"num_heads = {x.heads} : i64"), node
        )
    if rank == 4 and dims == [1, 2] and x.layout == "plain" and x.batched:
        return Value(x.name, x.shape, x.dtype, batched=True, layout="merge_pending")
    if x.layout == "plain" and dims == [rank - 2, rank - 1]:
        shape = (*x.shape[:-2], x.shape[-1], x.shape[-2])
        return imp.shaped(imp.emit("transformer.transpose", [x], shape), node)
    x = materialize(imp, x)
    swap = list(range(rank))
    swap[dims[0]], swap[dims[1]] = dims[1], dims[0]
    return imp.shaped(_permute(imp, x, _ir_permutation(x, swap)), node)


@handles(
    {
        aten.select.int: "transformer.permute + slice + reshape",
    }
)
def emit_select(imp: Emitter, node):
    """select(x, dim, i): the dim moved last (transformer.permute), transformer.slice of element i,
    and transformer.reshape dropping it."""
    x = materialize(imp, imp.operand(node.args[0]))
    in_shape = imp.torch_shape(node.args[0])
    dim = node.args[1] % len(in_shape)
    index = node.args[2] % in_shape[dim]
    ir_dim = dim - 1 if x.batched else dim
    if ir_dim < 0 or len(x.shape) < 2:
        raise Unsupported("select of the batch dimension or of a rank-1 tensor")
    rank = len(x.shape)
    y = _permute(imp, x, [d for d in range(rank) if d != ir_dim] + [ir_dim])
    y = imp.emit("transformer.slice", [y], (*y.shape[:-1], 1), f"offset = {index} : i64, size = 1 : i64")
    return imp.shaped(imp.emit("transformer.reshape", [y], y.shape[:-1]), node)


@handles(
    {
        aten.cat.default: "transformer.concat",
    }
)
def emit_cat(imp: Emitter, node):
    """cat(tensors, dim) -> transformer.concat. Empty tensors are left out (torch.cat takes a
    legacy empty [0] of any rank: HF's DynamicCache starts from one)."""
    values = [materialize(imp, imp.operand(t)) for t in node.args[0] if math.prod(imp.torch_shape(t)) != 0]
    if not values:
        raise Unsupported("cat of empty tensors only")
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    rank = len(imp.torch_shape(node))
    dim %= rank
    if len({(v.batched, len(v.shape)) for v in values}) != 1:
        raise Unsupported("cat of tensors of different ranks after the batch of 1")
    ir_dim = dim - 1 if values[0].batched else dim
    if ir_dim < 0:
        raise Unsupported("cat along the batch dimension")
    if len(values) == 1:
        return dataclasses.replace(values[0])
    shape = list(values[0].shape)
    shape[ir_dim] = sum(v.shape[ir_dim] for v in values)
    return imp.shaped(imp.emit("transformer.concat", values, shape, f"dim = {ir_dim} : i64"), node)


@handles(
    {
        aten.expand.default: "transformer.broadcast, none when nothing grows",
    }
)
def emit_expand(imp: Emitter, node):
    """expand(x, sizes) -> transformer.broadcast (none when nothing grows)."""
    x = materialize(imp, imp.operand(node.args[0]))
    target = _ir_shape(imp.torch_shape(node), x)
    if target == x.shape:
        return imp.shaped(dataclasses.replace(x), node)
    return imp.shaped(imp.emit("transformer.broadcast", [x], target), node)
