"""Importing a torch.export ATen graph into a transformer-dialect func.func (text).

One function per ATen op family emits IR; `SUPPORTED_OPS` maps each ATen op to them and to the
dialect ops they produce (docs/FRONTEND.md's coverage table and CompilerError read it). The graph is
emitted as written: attention written out by hand becomes transformer.matmul / mul / where /
softmax, and canonicalization recovers transformer.causal_attention from it (an analysis of the
mask's construction, cc/dialect/RecoverAttention.cpp), as it folds the written-out tanh GELU
into transformer.gelu (cc/dialect/RecoverGelu.cpp), RMSNorm into transformer.rms_norm
(cc/dialect/RecoverRmsNorm.cpp), silu(gate) * up into transformer.swiglu, and repeat_kv's copies
of the key/value heads into grouped-query attention. One pattern is recognized here instead, as
only the importer sees the constants' data: HF's rotary embedding `x * cos + rotate_half(x) * sin`
with cos/sin tables of positions 0 .. T-1 becomes transformer.rope, its base fitted to the tables
(`recognize_patterns`). Masks built from buffers, arange and
comparisons are evaluated here with torch and emitted as i1 `arith.constant`s; an additive mask
(0 where kept, -inf or finfo.min where not: HF's) is emitted as the where it stands for.

Layout convention: a batch dimension of size 1 is dropped. Token ids [1, T] become a rank-1
`tensor<Txi64>` and activations [1, T, C] a `tensor<TxCxf32>`, as the builder's entry points
take them; `Value.batched` records that the torch shape has that extra leading 1. Heads follow
the builder's layout: view [1, T, H, d] + transpose(1, 2) is `transformer.split_heads` and its
inverse `transformer.merge_heads`.
"""

import dataclasses
import math
import operator
import re
from collections.abc import Callable

import numpy as np
import torch

from gpt.compiler import CompilerError

aten = torch.ops.aten


@dataclasses.dataclass
class Value:
    """An imported tensor: its SSA name and IR type, and how the torch tensor relates to it."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # "f32" | "i64"
    batched: bool = False  # the torch tensor has an extra leading dimension of size 1
    # "plain"; "split_pending": torch [1, T, H, d] viewing the IR [T, H*d] (awaiting the
    # transpose that makes it split_heads); "merge_pending": torch [1, T, H, d] holding IR [H, T, d]
    # (awaiting the view that makes it merge_heads); "flat": token ids of a batch above one, torch
    # [B, T] held as the IR [B * T] (the embedding's ids are rank 1), `torch_shape` saying which.
    layout: str = "plain"
    heads: int = 0
    torch_shape: tuple[int, ...] = ()

    @property
    def type(self) -> str:
        return f"tensor<{'x'.join(str(d) for d in self.shape)}{'x' if self.shape else ''}{self.dtype}>"


@dataclasses.dataclass(frozen=True)
class Parameter:
    """A function argument holding a module tensor, laid out once at compile_module time.

    layout: "as_given" (read in place), "transposed" ([N, K] linear weight given as [K, N]), or
    "panels" (a [K, N] matrix, possibly the transpose of a linear weight, zero-padded to N'
    columns and packed into [N' / P, K, P] column panels for transformer.packed_matmul).
    """

    target: str  # the state_dict / constants key
    layout: str
    transpose: bool = False  # panels: the tensor is [N, K] (a linear weight)
    padded_columns: int = 0  # panels: N'
    panel_width: int = 0  # panels: P, the target's (_gpt.tile_parameters)

    def materialize(self, tensor: torch.Tensor) -> np.ndarray:
        array = tensor.detach().numpy()
        if self.layout == "as_given":
            return np.ascontiguousarray(array)
        matrix = array.T if self.transpose or self.layout == "transposed" else array
        if self.layout == "transposed":
            return np.ascontiguousarray(matrix)
        from gpt import _gpt

        k, n = matrix.shape
        if self.padded_columns > n:
            padded = np.zeros((k, self.padded_columns), np.float32)
            padded[:, :n] = matrix
            matrix = padded
        return _gpt.pack_panels(np.ascontiguousarray(matrix), self.panel_width)


@dataclasses.dataclass
class Argument:
    """One argument of the imported function: a user input (by position), a module tensor, or a
    constant the importer evaluated (an arange, a mask) as data."""

    kind: str  # "input" | "parameter" | "constant"
    value: Value
    input_index: int = -1
    parameter: Parameter | None = None
    data: np.ndarray | None = None
    # An input of embedding ids: the rows of the smallest table it indexes (0: none). The compiled
    # gather clamps an id into its table (memory safety only), so the caller checks each call's
    # ids against this, as eager PyTorch raises IndexError.
    embedding_rows: int = 0


@dataclasses.dataclass
class ImportedFunction:
    ir: str
    name: str
    arguments: list[Argument]
    results: list[Value]  # a result may have padded columns past its torch shape's last dim
    result_shapes: list[tuple[int, ...]]  # the torch shapes of the outputs


@dataclasses.dataclass(frozen=True)
class OpSupport:
    emit: Callable
    dialect: str  # what it becomes, for docs/FRONTEND.md's table


class Unsupported(Exception):
    """One problem with one node; collected, then reported together as a CompilerError."""


class DependsOnUnsupported(Exception):
    """A node whose input was not imported: its problem is already reported."""


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


def _fmt(x: float) -> str:
    """An MLIR float literal (it needs a decimal point); -inf, inf and NaN as their f32 bits."""
    if not math.isfinite(x):
        return f"0x{int(np.array(x, np.float32).view(np.uint32)):08X}"
    return f"{float(x):.9e}"


def _strip_leading_ones(array: np.ndarray) -> np.ndarray:
    """Broadcasting aligns trailing dimensions: leading 1s can go."""
    while array.ndim > 1 and array.shape[0] == 1:
        array = array[0]
    return array


def _distinct_mask(array: np.ndarray) -> np.ndarray:
    """A mask with its leading dimensions dropped while they only repeat one [.., Tq, Tk] (a batch's
    masks, HF's [B, 1, T, T]): where it is used, broadcasting gives the same selection."""
    array = _strip_leading_ones(array)
    while array.ndim > 2 and all(np.array_equal(array[0], a) for a in array[1:]):
        array = array[0]
    return array


def additive_mask(bias) -> tuple[np.ndarray, float] | None:
    """(kept positions, fill) of an additive attention mask known at compile time: 0 where kept
    and one value <= -1e30 (-inf, or HF's finfo(float32).min) where masked; else None."""
    if not isinstance(bias, torch.Tensor) or bias.dtype != torch.float32 or bias.ndim < 2:
        return None
    array = _distinct_mask(bias.detach().numpy())
    kept = array == 0
    masked = array[~kept]
    if masked.size == 0 or not np.all(masked <= -1e30) or not np.all(masked == masked.flat[0]):
        return None
    return kept, float(masked.flat[0])


IDENTITY_OPS = {
    aten.contiguous.default,
    aten.clone.default,
    aten.alias.default,
    aten.detach.default,
    aten.dropout.default,  # eval mode (export of a module in eval() gives train=False)
    aten.lift_fresh_copy.default,
}


CONVERSION_OPS = {aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, aten.to.device}


def _is_identity(node) -> bool:
    """An op that is the identity on a float32 CPU tensor (dropout: in eval mode)."""
    if node.target in CONVERSION_OPS:
        return node.meta["val"].dtype == node.args[0].meta["val"].dtype
    return node.target in IDENTITY_OPS and not (node.target == aten.dropout.default and node.args[2])


ADD = (aten.add.Tensor, aten.add.Scalar)


class Importer:
    def __init__(self, program: torch.export.ExportedProgram, pack_weights: bool, tiles: dict[str, int], origins=None):
        self.program = program
        self.origins = origins
        self.graph = program.graph_module.graph
        self.pack_weights = pack_weights
        # The target's packed_matmul column panels, and the multiple a weight whose columns need
        # padding anyway (an LM head's vocabulary) is padded to, as the builder pads the vocabulary:
        # whole panels for every thread chunk (_gpt.tile_parameters(target_cpu)).
        self.panel_width = tiles["panel_width"]
        self.padded_multiple = tiles["vocab_multiple"]
        signature = program.graph_signature
        self.parameter_of = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
        self.parameter_of.update(getattr(signature, "inputs_to_lifted_tensor_constants", {}))
        self.tensors = {**program.state_dict, **program.constants}
        self.user_inputs = list(signature.user_inputs)
        self.lines: list[str] = []
        self.values: dict = {}
        self.arguments: list[Argument] = []
        self.parameter_arguments: dict[Parameter, Value] = {}
        self.problems: list[str] = []
        self.failed: set = set()  # nodes whose import failed
        # A slice that drops a padded weight's extra columns, by name -> the padded result: when
        # it is returned, the caller takes a view of the padded result instead (no copy).
        self.padded: dict[str, Value] = {}
        self.counter = 0
        self.positions: dict[int, Value] = {}  # rotary positions 0 .. T-1, one constant per T
        self.recognized: dict = {}  # node -> Recognized (recognize_patterns)

    # -- bookkeeping ------------------------------------------------------------------------------

    def fresh(self) -> str:
        self.counter += 1
        return f"%v{self.counter}"

    def emit(self, op: str, operands: list[Value], shape, attributes: str = "", dtype: str = "f32", **kw) -> Value:
        result = Value(self.fresh(), tuple(shape), dtype, **kw)
        names = ", ".join(v.name for v in operands)
        attrs = f" {{{attributes}}}" if attributes else ""
        if len(operands) == 1 and op not in ("transformer.embedding",):
            self.lines.append(f"    {result.name} = {op} {names}{attrs} : {operands[0].type} -> {result.type}")
        else:
            types = ", ".join(v.type for v in operands)
            self.lines.append(f"    {result.name} = {op} {names}{attrs} : ({types}) -> {result.type}")
        return result

    def constant(self, values: np.ndarray) -> Value:
        """A small f32 literal (scalars, default LayerNorm weights) as transformer.constant."""
        values = np.asarray(values, np.float32)
        result = Value(self.fresh(), values.shape, "f32")
        flat = values.reshape(-1)
        body = _fmt(flat[0]) if np.all(flat == flat[0]) else "[" + ", ".join(_fmt(v) for v in flat) + "]"
        self.lines.append(f"    {result.name} = transformer.constant dense<{body}> : {result.type}")
        return result

    def scalar(self, x: float) -> Value:
        return self.constant(np.array([x], np.float32))

    def mask_constant(self, bits: np.ndarray) -> Value:
        """An i1 tensor known at compile time (an attention mask) as an `arith.constant`, its bits
        packed as MLIR's hex form of i1 data takes them (little-endian within each byte)."""
        result = Value(self.fresh(), bits.shape, "i1")
        packed = np.packbits(np.asarray(bits, bool).reshape(-1), bitorder="little")
        self.lines.append(
            f'    {result.name} = arith.constant dense<"0x{packed.tobytes().hex().upper()}"> : {result.type}'
        )
        return result

    def argument(self, kind: str, shape, dtype: str, **fields) -> Value:
        value = Value(f"%arg{len(self.arguments)}", tuple(shape), dtype)
        self.arguments.append(Argument(kind, value, **fields))
        return value

    def parameter(self, target: str, layout: str = "as_given", **fields) -> Value:
        spec = Parameter(target, layout, **fields)
        if spec not in self.parameter_arguments:
            tensor = self.tensors[target]
            shape = tuple(tensor.shape)
            if layout == "transposed":
                shape = shape[::-1]
            elif layout == "panels":
                k, n = shape[::-1] if spec.transpose else shape
                shape = (spec.padded_columns // spec.panel_width, k, spec.panel_width)
            self.parameter_arguments[spec] = self.argument("parameter", shape, "f32", parameter=spec)
        return self.parameter_arguments[spec]

    def torch_shape(self, node) -> tuple[int, ...]:
        return tuple(int(d) for d in node.meta["val"].shape)

    def shaped(self, value: Value, node) -> Value:
        """`value` labelled with whether `node`'s torch shape has the dropped batch dimension."""
        torch_shape = self.torch_shape(node)
        if torch_shape == value.shape:
            value.batched = False
        elif len(torch_shape) == len(value.shape) + 1 and torch_shape[0] == 1 and torch_shape[1:] == value.shape:
            value.batched = True
        else:
            raise Unsupported(f"internal: IR shape {value.shape} does not match the torch shape {torch_shape}")
        return value

    # -- operands ---------------------------------------------------------------------------------

    def is_parameter(self, node) -> bool:
        return isinstance(node, torch.fx.Node) and node.op == "placeholder" and node.name in self.parameter_of

    def constant_value(self, node):
        """`node` evaluated with torch when it depends only on buffers and constants (not on the
        inputs or the parameters): arange, tril and comparisons building masks; else None."""
        if not isinstance(node, torch.fx.Node):
            return node
        if node in self._constants:
            return self._constants[node]
        result = None
        if node.op == "placeholder":
            target = self.parameter_of.get(node.name)
            if target is not None and node.name not in self.program.graph_signature.inputs_to_parameters:
                result = self.tensors[target]
        elif node.op == "call_function" and node.target is not operator.getitem:
            missing = []

            def substitute(a):
                if isinstance(a, torch.fx.Node):
                    value = self._constants.get(a)
                    if value is None:
                        missing.append(a)
                    return value
                if isinstance(a, (list, tuple)):
                    return type(a)(substitute(x) for x in a)
                return a

            args, kwargs = substitute(node.args), {k: substitute(v) for k, v in node.kwargs.items()}
            if not missing:
                result = node.target(*args, **kwargs)
        self._constants[node] = result
        return result

    def operand(self, node) -> Value:
        if node in self.values:
            value = self.values[node]
            if not isinstance(value, Value):
                raise Unsupported(f"{node.name} is not a tensor")
            return value
        # A bool buffer (a mask) is data the compiler analyses: a constant, never an argument.
        if self.is_parameter(node) and self.tensors[self.parameter_of[node.name]].dtype != torch.bool:
            tensor = self.tensors[self.parameter_of[node.name]]
            value = self.parameter(self.parameter_of[node.name])
            if tensor.dtype != torch.float32:
                raise Unsupported(f"parameter {node.name} has dtype {tensor.dtype}: only float32 is supported")
            return self.shaped(Value(value.name, value.shape, "f32"), node)
        data = self.constant_value(node)
        if isinstance(data, torch.Tensor) and data.dtype == torch.bool:
            value = self.mask_constant(_distinct_mask(data.detach().numpy()))
            value.batched = len(self.torch_shape(node)) == len(value.shape) + 1
            self.values[node] = value
            return value
        if isinstance(data, torch.Tensor):
            array = data.detach().numpy()
            dtype = {np.dtype(np.float32): "f32", np.dtype(np.int64): "i64"}.get(array.dtype)
            if dtype is None:
                raise Unsupported(f"constant {node.name} has dtype {array.dtype}: only float32 and int64 are supported")
            array = _strip_leading_ones(array)  # broadcasting aligns trailing dimensions
            value = self.argument("constant", array.shape, dtype, data=np.ascontiguousarray(array))
            value = Value(value.name, value.shape, dtype)
            value.batched = len(self.torch_shape(node)) == len(value.shape) + 1
            self.values[node] = value
            return value
        if node in self.failed or (isinstance(node, torch.fx.Node) and node.args and node.args[0] in self.failed):
            raise DependsOnUnsupported()
        raise Unsupported(f"{node.name} ({node.target}) was not imported")

    # -- the walk ---------------------------------------------------------------------------------

    def run(self) -> ImportedFunction:
        self._constants: dict = {}
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


# -- emitters, one per ATen op family ---------------------------------------------------------------


def _broadcast(a, b):
    return tuple(np.broadcast_shapes(a, b))


def emit_binary(imp: Importer, node):
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
                shape = _broadcast(x.shape, keep.shape)
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
    return imp.shaped(imp.emit(op, [x, y], _broadcast(x.shape, y.shape)), node)


def _value_or_scalar(imp: Importer, operand) -> Value:
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


def emit_where(imp: Importer, node):
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
    shape = _broadcast(_broadcast(x.shape, y.shape), c.shape)
    return imp.shaped(imp.emit("transformer.where", [c, x, y], shape), node)


def emit_unary(imp: Importer, node):
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


def emit_mean(imp: Importer, node):
    """mean over the last dimension -> transformer.mean (the dimension kept as size 1), and a
    transformer.reshape dropping it without keepdim."""
    x = _materialize(imp, imp.operand(node.args[0]))
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


def emit_power(imp: Importer, node):
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


def emit_identity(imp: Importer, node):
    """dropout (eval), contiguous, clone, alias, detach, a float32 -> float32 copy: no IR."""
    if node.target == aten.dropout.default and node.args[2]:
        raise Unsupported("dropout in training mode (call module.eval() first)")
    if node.target in CONVERSION_OPS and node.meta["val"].dtype != node.args[0].meta["val"].dtype:
        raise Unsupported(f"a conversion to {node.meta['val'].dtype}")
    value = imp.operand(node.args[0])
    return dataclasses.replace(value)


def _matmul_with_weight(imp: Importer, x: Value, weight, transposed: bool, n: int) -> Value:
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
            y = imp.emit("transformer.packed_matmul", [x, w], (*rows, padded))
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


def emit_linear(imp: Importer, node):
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
        y = imp.emit("transformer.add", [y, b], _broadcast(y.shape, b.shape))
    return imp.shaped(y, node)


def emit_matmul(imp: Importer, node):
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


def emit_layer_norm(imp: Importer, node):
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
    return imp.shaped(imp.emit("transformer.layer_norm", [x, w, b], x.shape, f"epsilon = {_fmt(eps)} : f32"), node)


def emit_embedding(imp: Importer, node):
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


def _check_embedding_ids(imp: Importer, ids: Value, rows: int) -> None:
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


def emit_split(imp: Importer, node):
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


def emit_slice(imp: Importer, node):
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


def emit_view(imp: Importer, node):
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
    x = _materialize(imp, x)
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


def _materialize(imp: Importer, x: Value) -> Value:
    """A pending attention-head view used by something other than the head ops, as the plain
    [T, H, d] (batch dropped) its torch shape [1, T, H, d] says. The token ids of a batch (held
    flat) have no plain form: an embedding is all that may read them."""
    if x.layout == "flat":
        raise Unsupported(f"the token ids of a batch {x.torch_shape} are supported only as an embedding's ids")
    if x.layout == "split_pending":
        t, c = x.shape
        return Value(
            imp.emit("transformer.reshape", [x], (t, x.heads, c // x.heads)).name,
            (t, x.heads, c // x.heads),
            "f32",
            batched=True,
        )
    if x.layout == "merge_pending":
        y = imp.emit(
            "transformer.permute", [x], (x.shape[1], x.shape[0], x.shape[2]), "permutation = array<i64: 1, 0, 2>"
        )
        return dataclasses.replace(y, batched=True)
    return x


def _permute(imp: Importer, x: Value, permutation) -> Value:
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


def emit_transpose(imp: Importer, node):
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
            x = _materialize(imp, x)
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
    x = _materialize(imp, x)
    swap = list(range(rank))
    swap[dims[0]], swap[dims[1]] = dims[1], dims[0]
    return imp.shaped(_permute(imp, x, _ir_permutation(x, swap)), node)


def emit_select(imp: Importer, node):
    """select(x, dim, i): the dim moved last (transformer.permute), transformer.slice of element i,
    and transformer.reshape dropping it."""
    x = _materialize(imp, imp.operand(node.args[0]))
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


def emit_cat(imp: Importer, node):
    """cat(tensors, dim) -> transformer.concat. Empty tensors are left out (torch.cat takes a
    legacy empty [0] of any rank: HF's DynamicCache starts from one)."""
    values = [_materialize(imp, imp.operand(t)) for t in node.args[0] if math.prod(imp.torch_shape(t)) != 0]
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


def emit_expand(imp: Importer, node):
    """expand(x, sizes) -> transformer.broadcast (none when nothing grows)."""
    x = _materialize(imp, imp.operand(node.args[0]))
    target = _ir_shape(imp.torch_shape(node), x)
    if target == x.shape:
        return imp.shaped(dataclasses.replace(x), node)
    return imp.shaped(imp.emit("transformer.broadcast", [x], target), node)


def emit_sdpa(imp: Importer, node):
    """scaled_dot_product_attention -> transformer.causal_attention: is_causal or a causal mask as
    the causal rule, any other mask known at compile time (bool, or additive 0 / -inf) as its `mask`
    operand, and no mask at all as an all-visible one. With `enable_gqa` the Hkv < H key/value
    heads pass as they are: causal_attention serves H / Hkv query heads from each (HF's repeat_kv
    copies are folded away by canonicalization, cc/dialect/RecoverAttention.h)."""
    q, k, v = (imp.operand(n) for n in node.args[:3])
    mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
    dropout = node.args[4] if len(node.args) > 4 else node.kwargs.get("dropout_p", 0.0)
    causal = node.args[5] if len(node.args) > 5 else node.kwargs.get("is_causal", False)
    scale = node.kwargs.get("scale")
    grouped = node.kwargs.get("enable_gqa", False)
    if dropout:
        raise Unsupported("attention dropout (call module.eval() first)")
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
    if batch:  # the batch and the heads collapsed into one: attention runs over [B * H, T, d]
        q, k, v = (imp.emit("transformer.reshape", [x], (x.shape[0] * x.shape[1], *x.shape[2:])) for x in (q, k, v))
    queries, keys = q.shape[1], k.shape[1]
    keep = None
    if mask is not None:
        value = imp.constant_value(mask)
        if not isinstance(value, torch.Tensor):
            raise Unsupported(
                f"attn_mask {mask.name} depends on the module's inputs: only masks known at compile time "
                "(buffers, arange and comparisons) are supported"
            )
        if value.dtype == torch.bool:
            keep = _distinct_mask(value.detach().numpy())
        else:
            additive = additive_mask(value)
            if additive is None:
                raise Unsupported("a float attn_mask other than 0 where kept and -inf where masked (an additive bias)")
            keep = additive[0]
        if keep.ndim > 2:
            raise Unsupported(f"an attn_mask of shape {tuple(value.shape)} that differs between heads")
        keep = np.broadcast_to(keep, (queries, keys))
    elif not causal:
        keep = np.ones((queries, keys), bool)  # bidirectional: every key visible
    if keep is not None and queries == keys and np.array_equal(keep, np.tril(np.ones((queries, keys), bool))):
        keep, causal = None, True
    if keep is not None and not keep.any(axis=1).all():
        raise Unsupported("an attn_mask with a query row that sees no key (its softmax has no value)")
    if causal and queries != keys:
        raise Unsupported(f"is_causal attention of {queries} queries over {keys} keys")
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    attributes = f"scale = {_fmt(scale)} : f32"
    if keep is None:
        result = imp.emit("transformer.causal_attention", [q, k, v], q.shape[:2] + v.shape[2:], attributes)
    else:
        bits = imp.mask_constant(keep)
        result = Value(imp.fresh(), (*q.shape[:2], v.shape[2]), "f32")
        types = ", ".join(x.type for x in (q, k, v, bits))
        imp.lines.append(
            f"    {result.name} = transformer.causal_attention {q.name}, {k.name}, {v.name} mask {bits.name} "
            f"{{{attributes}}} : ({types}) -> {result.type}"
        )
    if batch:
        result = imp.emit("transformer.reshape", [result], (*batch, q.shape[0] // batch[0], *result.shape[1:]))
    return imp.shaped(result, node)


# -- patterns recognized before import: several ATen ops read as one dialect op -------------------


@dataclasses.dataclass(frozen=True)
class Recognized:
    """A node imported from other nodes than its own arguments: the last op of a pattern emitted
    as one dialect op (HF's rotary embedding as transformer.rope). Nodes that only the pattern
    used are then never imported."""

    inputs: tuple  # the FX nodes the emitted op reads
    emit: Callable  # (importer, node) -> Value


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


def _constant_table(imp: Importer, node, x) -> np.ndarray | None:
    """`node` as a [T, d] float table known at compile time that broadcasts against x's [.., T, d]
    by its last two dimensions; else None."""
    value = imp.constant_value(node)
    if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or value.ndim < 2:
        return None
    shape = _shape_of(x)
    if tuple(value.shape[-2:]) != shape[-2:] or value.ndim > len(shape) or any(d != 1 for d in value.shape[:-2]):
        return None
    return value.detach().numpy().reshape(shape[-2:]).astype(np.float64)


def _recognize_rope(imp: Importer, node) -> Recognized | None:
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


def emit_rope(imp: Importer, node, x_node, base: float) -> Value:
    """transformer.rope of x [H, T, d] at the positions 0 .. T-1 (a constant argument); the
    leading dims of another rank ([B, H, T, d], or [T, d]) reshaped into H and back."""
    x = _materialize(imp, imp.operand(x_node))
    if x.layout != "plain" or len(x.shape) < 2:
        raise Unsupported(f"rotary embedding of a tensor of shape {x.shape} (needs [.., T, d])")
    t, d = x.shape[-2:]
    heads = x if len(x.shape) == 3 else imp.emit("transformer.reshape", [x], (math.prod(x.shape[:-2]), t, d))
    if t not in imp.positions:
        imp.positions[t] = imp.argument("constant", (t,), "i64", data=np.arange(t, dtype=np.int64))
    result = imp.emit("transformer.rope", [heads, imp.positions[t]], heads.shape, f"base = {_fmt(base)} : f32")
    if heads.shape != x.shape:
        result = imp.emit("transformer.reshape", [result], x.shape)
    return imp.shaped(result, node)


def recognize_patterns(imp: Importer, nodes) -> dict:
    """{node: Recognized} for the patterns in the graph that only the importer can see (it knows
    the constants' data): HF's rotary embedding. Patterns of ops alone are recovered after import
    by canonicalization (RMSNorm, SwiGLU, attention, repeat_kv's copies of the key/value heads)."""
    found = {}
    for node in nodes:
        if node.op != "call_function" or imp.constant_value(node) is not None:
            continue
        if (rope := _recognize_rope(imp, node)) is not None:
            found[node] = rope
    return found


def _op(emit, dialect):
    return OpSupport(emit, dialect)


SUPPORTED_OPS: dict = {
    aten.linear.default: _op(emit_linear, "transformer.packed_matmul (weight packed at compile time) or matmul, + add"),
    aten.addmm.default: _op(emit_linear, "transformer.packed_matmul or matmul, + add"),
    aten.mm.default: _op(emit_linear, "transformer.packed_matmul or matmul"),
    aten.matmul.default: _op(emit_matmul, "transformer.matmul (packed_matmul against a parameter)"),
    aten.bmm.default: _op(emit_matmul, "transformer.matmul"),
    aten.add.Tensor: _op(emit_binary, "transformer.add (an additive attention mask: transformer.where)"),
    aten.add.Scalar: _op(emit_binary, "transformer.add"),
    aten.sub.Tensor: _op(emit_binary, "transformer.add + transformer.neg"),
    aten.sub.Scalar: _op(emit_binary, "transformer.add"),
    aten.mul.Tensor: _op(emit_binary, "transformer.mul"),
    aten.mul.Scalar: _op(emit_binary, "transformer.mul"),
    aten.div.Tensor: _op(emit_binary, "transformer.mul (by a scalar's reciprocal)"),
    aten.div.Scalar: _op(emit_binary, "transformer.mul (by a scalar's reciprocal)"),
    aten.neg.default: _op(emit_unary, "transformer.neg"),
    aten.relu.default: _op(emit_unary, "transformer.relu"),
    aten.tanh.default: _op(emit_unary, "transformer.tanh (a written-out tanh GELU folds into transformer.gelu)"),
    aten.pow.Tensor_Scalar: _op(emit_power, "transformer.mul (exponent 2 or 3), else transformer.pow"),
    aten.exp.default: _op(emit_unary, "transformer.exp"),
    aten.rsqrt.default: _op(emit_unary, "transformer.rsqrt"),
    aten.silu.default: _op(emit_unary, "transformer.silu (silu(g) * u folds into transformer.swiglu)"),
    aten.mean.dim: _op(emit_mean, "transformer.mean (last dim; x * rsqrt(mean(x * x) + eps) folds into rms_norm)"),
    aten.gelu.default: _op(emit_unary, "transformer.gelu (approximate='tanh'), transformer.gelu_erf (exact)"),
    aten.softmax.int: _op(emit_unary, "transformer.softmax (last dim)"),
    aten._softmax.default: _op(emit_unary, "transformer.softmax (last dim)"),
    aten.layer_norm.default: _op(emit_layer_norm, "transformer.layer_norm"),
    aten.embedding.default: _op(emit_embedding, "transformer.embedding (+ reshape for a batch above one)"),
    aten.view.default: _op(emit_view, "none (batch of 1), transformer.merge_heads, or transformer.reshape"),
    aten.reshape.default: _op(emit_view, "none (batch of 1), transformer.merge_heads, or transformer.reshape"),
    aten._unsafe_view.default: _op(emit_view, "none (batch of 1), transformer.merge_heads, or transformer.reshape"),
    aten.unsqueeze.default: _op(emit_view, "none (leading 1)"),
    aten.squeeze.dim: _op(emit_view, "none (leading 1)"),
    aten.transpose.int: _op(emit_transpose, "transformer.split_heads / transpose / permute, or none"),
    aten.permute.default: _op(emit_transpose, "transformer.split_heads / transpose / permute"),
    aten.select.int: _op(emit_select, "transformer.permute + slice + reshape"),
    aten.cat.default: _op(emit_cat, "transformer.concat"),
    aten.expand.default: _op(emit_expand, "transformer.broadcast, none when nothing grows"),
    aten.t.default: _op(emit_transpose, "transformer.transpose"),
    aten.split.Tensor: _op(emit_split, "transformer.slice (last dim)"),
    aten.split_with_sizes.default: _op(emit_split, "transformer.slice (last dim)"),
    aten.slice.Tensor: _op(emit_slice, "transformer.slice (last dim), none for a full slice"),
    aten.scaled_dot_product_attention.default: _op(
        emit_sdpa, "transformer.causal_attention (is_causal, or a constant attn_mask as its mask operand)"
    ),
    aten.where.self: _op(emit_where, "transformer.where (a condition known at compile time)"),
    aten.masked_fill.Scalar: _op(emit_where, "transformer.where (a mask known at compile time)"),
    aten.masked_fill.Tensor: _op(emit_where, "transformer.where (a mask known at compile time)"),
    aten.where.ScalarOther: _op(emit_where, "transformer.where (a condition known at compile time)"),
    aten.where.ScalarSelf: _op(emit_where, "transformer.where (a condition known at compile time)"),
    aten.where.Scalar: _op(emit_where, "transformer.where (a condition known at compile time)"),
    aten.dropout.default: _op(emit_identity, "none (eval mode)"),
    aten.contiguous.default: _op(emit_identity, "none"),
    aten.clone.default: _op(emit_identity, "none"),
    aten.alias.default: _op(emit_identity, "none"),
    aten.detach.default: _op(emit_identity, "none"),
    aten._to_copy.default: _op(emit_identity, "none (float32 to float32)"),
    aten.to.dtype: _op(emit_identity, "none (float32 to float32)"),
    aten.to.dtype_layout: _op(emit_identity, "none (float32 to float32)"),
    aten.to.device: _op(emit_identity, "none (CPU)"),
}
