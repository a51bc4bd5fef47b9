"""Importing a torch.export ATen graph into a transformer-dialect func.func (text).

This module is the graph walk. The functions that emit IR live in gpt/frontend/ops, one module per
ATen op family (elementwise, linear, normalization, embedding, shape, attention, rope), each
registering its handlers in `SUPPORTED_OPS` (gpt/frontend/emitter.py) with the dialect ops they
produce (docs/FRONTEND.md's coverage table and CompilerError read it). The graph is
emitted as written: attention written out by hand becomes transformer.matmul / mul / where /
softmax, and canonicalization recovers transformer.causal_attention from it (an analysis of the
mask's construction, cc/dialect/RecoverAttention.cpp), as it folds the written-out tanh GELU
into transformer.gelu (cc/dialect/RecoverGelu.cpp), RMSNorm into transformer.rms_norm
(cc/dialect/RecoverRmsNorm.cpp), silu(gate) * up into transformer.swiglu, and repeat_kv's copies
of the key/value heads into grouped-query attention. One pattern is recognized here instead, as
only the importer sees the constants' data: HF's rotary embedding `x * cos + rotate_half(x) * sin`
with cos/sin tables of positions 0 .. T-1 becomes transformer.rope, its base fitted to the tables
(`recognize_patterns`, gpt/frontend/ops/rope.py). Masks built from buffers, arange and
comparisons are evaluated here with torch and emitted as i1 `arith.constant`s; an additive mask
(0 where kept, -inf or finfo.min where not: HF's) is emitted as the where it stands for.

Layout convention: a batch dimension of size 1 is dropped. Token ids [1, T] become a rank-1
`tensor<Txi64>` and activations [1, T, C] a `tensor<TxCxf32>`, as the builder's entry points
take them; `Value.batched` records that the torch shape has that extra leading 1. Heads follow
the builder's layout: view [1, T, H, d] + transpose(1, 2) is `transformer.split_heads` and its
inverse `transformer.merge_heads`.
"""

import dataclasses
import operator
import re

import torch

import gpt.frontend.ops  # noqa: F401  (each family module registers its handlers in SUPPORTED_OPS)
from gpt.compiler import CompilerError
from gpt.frontend.emitter import (
    PATTERNS,
    SUPPORTED_OPS,
    DependsOnUnsupported,
    Emitter,
    ImportedFunction,
    Unsupported,
    Value,
)

__all__ = ["SUPPORTED_OPS", "ImportedFunction", "Importer", "source_location"]


def _location_of_trace(trace: str) -> str | None:
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace or "")
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else None


def _generated_code_name(trace: str) -> str | None:
    """The node a frame of an FX GraphModule's generated code computes: its source line there
    is `name = op(...)`."""
    lines = (trace or "").splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if '"<eval_with_key>' in lines[i] and i + 1 < len(lines):
            match = re.match(r"\s*(\w+) = ", lines[i + 1])
            return match.group(1) if match else None
    return None


def source_location(node: torch.fx.Node, origins: dict[str, str] | None = None) -> str:
    """file:line of the user's Python that produced `node` (the innermost frame of its trace).
    A graph that Dynamo captured first (torch.compile) was exported from generated code: its
    nodes' own traces end there, and `origins` (Dynamo's node name -> location) is used instead."""
    location = _location_of_trace(node.meta.get("stack_trace"))
    if origins and (location is None or location.startswith("<eval_with_key>")):
        name = _generated_code_name(node.meta.get("stack_trace"))
        if name in origins:
            return origins[name]
    return location or "<unknown location>"


def recognize_patterns(imp: Emitter, nodes) -> dict:
    """{node: Recognized} for the patterns in the graph that only the importer can see (it knows
    the constants' data): HF's rotary embedding. Patterns of ops alone are recovered after import
    by canonicalization (RMSNorm, SwiGLU, attention, repeat_kv's copies of the key/value heads)."""
    found = {}
    for node in nodes:
        if node.op != "call_function" or imp.constant_value(node) is not None:
            continue
        for recognize in PATTERNS:
            if (recognized := recognize(imp, node)) is not None:
                found[node] = recognized
                break
    return found


class Importer(Emitter):
    """Imports an ExportedProgram's graph: each needed node, in order, by its op's handler."""

    def run(self) -> ImportedFunction:
        nodes = list(self.graph.nodes)
        for node in nodes:  # in order, so that evaluating one never recurses into its inputs
            self.constant_value(node)
        output = next(n for n in nodes if n.op == "output")
        self.recognized = recognize_patterns(self, nodes)
        needed = self.needed_nodes(output)
        for node in nodes:
            if node.op == "placeholder" and node.name in self.user_inputs:
                self.import_input(node)
        for node in nodes:
            if node.op != "call_function" or node not in needed or self._constants.get(node) is not None:
                continue  # constants become arguments where they are used
            try:
                self.import_node(node)
            except Unsupported as problem:
                self.problems.append(f"{source_location(node, self.origins)}: {node.target} ({node.name}): {problem}")
                self.failed.add(node)
            except DependsOnUnsupported:
                self.failed.add(node)
        results, shapes = [], []
        flat_outputs = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
        if not self.problems:
            for out in flat_outputs:
                try:
                    value = self.operand(out)
                    if value.layout == "flat":
                        raise Unsupported("token ids of a batch are returned: only an embedding may read them")
                    if value.layout != "plain":
                        raise Unsupported("a view of split heads is returned")
                    if value.name in self.padded:
                        value = dataclasses.replace(self.padded[value.name], batched=value.batched)
                    results.append(value)
                    shapes.append(self.torch_shape(out))
                except Unsupported as problem:
                    self.problems.append(f"output {out}: {problem}")
        if self.problems:
            raise CompilerError(
                "the module uses what the gpt importer does not support:\n  " + "\n  ".join(self.problems)
            )
        signature = ", ".join(f"{a.value.name}: {a.value.type}" for a in self.arguments)
        returns = ", ".join(v.type for v in results)
        text = "\n".join(
            [
                "module {",
                f"  func.func @imported({signature}) -> ({returns}) {{",
                *self.lines,
                f"    return {', '.join(v.name for v in results)} : {returns}",
                "  }",
                "}",
            ]
        )
        return ImportedFunction(text, "imported", self.arguments, results, shapes)

    def inputs_of(self, node):
        if node in self.recognized:
            return list(self.recognized[node].inputs)
        found = []
        for a in [*node.args, *node.kwargs.values()]:
            if isinstance(a, torch.fx.Node):
                found.append(a)
            elif isinstance(a, (list, tuple)):
                found.extend(x for x in a if isinstance(x, torch.fx.Node))
        return found

    def needed_nodes(self, output) -> set:
        needed, stack = set(), list(self.inputs_of(output))
        while stack:
            node = stack.pop()
            if node in needed:
                continue
            needed.add(node)
            # Constants are evaluated, not emitted: what they are built from is not needed.
            if node.op == "call_function" and self.constant_value(node) is None:
                stack.extend(self.inputs_of(node))
        return needed

    def import_input(self, node):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            self.problems.append(f"input {node.name}: only tensor inputs are supported, got {type(val).__name__}")
            return
        dims = []
        for d in val.shape:
            if not isinstance(d, int):
                self.problems.append(
                    f"input {node.name}: dimension {d} is dynamic; only static shapes are supported (export "
                    "without dynamic_shapes, or compile once per shape)"
                )
                return
            dims.append(d)
        dtype = {torch.float32: "f32", torch.int64: "i64"}.get(val.dtype)
        if dtype is None:
            self.problems.append(f"input {node.name}: dtype {val.dtype} is not supported (float32 or int64)")
            return
        shape = tuple(dims)
        # Token ids [1, T] and activations [1, T, C]: the batch of one is dropped.
        drop = len(shape) >= 2 and shape[0] == 1 and (dtype == "i64" or len(shape) >= 3)
        ir_shape = shape[1:] if drop else shape
        flat = dtype == "i64" and len(shape) == 2 and shape[0] > 1  # ids of a batch: [B * T] for the embedding
        if flat:
            ir_shape = (shape[0] * shape[1],)
        value = self.argument("input", ir_shape, dtype, input_index=self.user_inputs.index(node.name))
        value = Value(value.name, value.shape, dtype, batched=drop)
        if flat:
            value.layout, value.torch_shape = "flat", shape
        self.values[node] = value

    def import_node(self, node):
        if node.target is operator.getitem:
            if node.args[0] in self.failed:
                raise DependsOnUnsupported()
            container = self.values.get(node.args[0])
            if not isinstance(container, list):
                raise Unsupported("getitem of something other than a split")
            self.values[node] = container[node.args[1]]
            return
        if node in self.recognized:
            self.values[node] = self.recognized[node].emit(self, node)
            return
        support = SUPPORTED_OPS.get(node.target)
        if support is None:
            raise Unsupported("not supported by the importer")
        for val in _tensor_vals(node):
            if val.dtype not in (torch.float32, torch.int64, torch.bool):
                raise Unsupported(f"dtype {val.dtype} is not supported (float32)")
        self.values[node] = support.emit(self, node)


def _tensor_vals(node):
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return [v for v in vals if isinstance(v, torch.Tensor)]
