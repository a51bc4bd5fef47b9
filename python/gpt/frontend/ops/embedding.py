"""Embedding lookups, and the check of their ids against the table's rows."""

import torch

from gpt.frontend.emitter import Emitter, Unsupported, Value, handles

aten = torch.ops.aten


@handles(
    {
        aten.embedding.default: "transformer.embedding (+ reshape for a batch above one)",
    }
)
def emit_embedding(imp: Emitter, node):
    """embedding(table, ids) with ids [T] or [1, T] -> transformer.embedding; ids [B, T] (held as
    [B * T]) -> transformer.embedding and a reshape to [B, T, D]."""
    table, ids = imp.operand(node.args[0]), imp.operand(node.args[1])
    if ids.layout == "flat" and len(table.shape) == 2:
        _check_embedding_ids(imp, ids, table.shape[0])
        rows = imp.emit("transformer.embedding", [table, ids], (ids.shape[0], table.shape[1]))
        return imp.shaped(imp.emit("transformer.reshape", [rows], (*ids.torch_shape, table.shape[1])), node)
    if len(table.shape) != 2 or len(ids.shape) != 1 or ids.dtype != "i64":
        raise Unsupported("embedding needs a [V, D] table and int64 ids of shape [T] or [1, T]")
    _check_embedding_ids(imp, ids, table.shape[0])
    return imp.shaped(imp.emit("transformer.embedding", [table, ids], (ids.shape[0], table.shape[1])), node)


def _check_embedding_ids(imp: Emitter, ids: Value, rows: int) -> None:
    """Constant ids are checked against the table's `rows` now; an input's ids on every call
    (Argument.embedding_rows). Ids the module computes could not be checked: none reach here, as
    the importer has no int64 arithmetic, but such ids are refused rather than clamped."""
    argument = imp.arguments[int(ids.name[4:])] if ids.name.startswith("%arg") else None
    if argument is None or argument.kind not in ("input", "constant"):
        raise Unsupported("embedding ids computed by the module: only inputs and constants can be checked")
    if argument.kind == "input":
        argument.embedding_rows = min(argument.embedding_rows or rows, rows)
        return
    bad = argument.data[(argument.data < 0) | (argument.data >= rows)]
    if bad.size:
        raise Unsupported(f"constant index {int(bad[0])} is out of range for an embedding table of {rows} rows")
