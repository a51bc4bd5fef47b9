"""The importer's core: imported values, the op-handler registry, and the Emitter that writes IR.

The Emitter writes the IR lines and turns FX nodes into operands. Each family module of
gpt/frontend/ops registers its handlers here with `@handles`, so that adding an ATen op is one
function in one family file; the graph walk (gpt/frontend/importer.py) looks each node up in
`SUPPORTED_OPS`.
"""

import dataclasses
import math
import operator
from collections.abc import Callable

import numpy as np
import torch

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


# -- the registry: ATen op -> handler, filled by the family modules of gpt/frontend/ops -----------

SUPPORTED_OPS: dict = {}


def handles(ops: dict) -> Callable:
    """Registers the decorated emitter `(imp, node) -> Value` for each ATen op of `ops`, a dict of
    op -> what it becomes (docs/FRONTEND.md's coverage table)."""

    def register(emit: Callable) -> Callable:
        for op, dialect in ops.items():
            if op in SUPPORTED_OPS:
                raise ValueError(
                    f"{op} has two handlers: {SUPPORTED_OPS[op].emit.__qualname__} and {emit.__qualname__}"
                )
            SUPPORTED_OPS[op] = OpSupport(emit, dialect)
        return emit

    return register


@dataclasses.dataclass(frozen=True)
class Recognized:
    """A node imported from other nodes than its own arguments: the last op of a pattern emitted
    as one dialect op (HF's rotary embedding as transformer.rope). Nodes that only the pattern
    used are then never imported."""

    inputs: tuple  # the FX nodes the emitted op reads
    emit: Callable  # (importer, node) -> Value


# Recognizers `(imp, node) -> Recognized | None` of the patterns only the importer can see (it knows
# the constants' data), filled by the family modules with `@recognizes`.
PATTERNS: list[Callable] = []


def recognizes(recognize: Callable) -> Callable:
    PATTERNS.append(recognize)
    return recognize


# -- shared helpers -------------------------------------------------------------------------------


def mlir_float(x: float) -> str:
    """An MLIR float literal (it needs a decimal point); -inf, inf and NaN as their f32 bits."""
    if not math.isfinite(x):
        return f"0x{int(np.array(x, np.float32).view(np.uint32)):08X}"
    return f"{float(x):.9e}"


def strip_leading_ones(array: np.ndarray) -> np.ndarray:
    """Broadcasting aligns trailing dimensions: leading 1s can go."""
    while array.ndim > 1 and array.shape[0] == 1:
        array = array[0]
    return array


def distinct_mask(array: np.ndarray) -> np.ndarray:
    """A mask with its leading dimensions dropped while they only repeat one [.., Tq, Tk] (a batch's
    masks, HF's [B, 1, T, T]): where it is used, broadcasting gives the same selection."""
    array = strip_leading_ones(array)
    while array.ndim > 2 and all(np.array_equal(array[0], a) for a in array[1:]):
        array = array[0]
    return array


def additive_mask(bias) -> tuple[np.ndarray, float] | None:
    """(kept positions, fill) of an additive attention mask known at compile time: 0 where kept
    and one value <= -1e30 (-inf, or HF's finfo(float32).min) where masked; else None."""
    if not isinstance(bias, torch.Tensor) or bias.dtype != torch.float32 or bias.ndim < 2:
        return None
    array = distinct_mask(bias.detach().numpy())
    kept = array == 0
    masked = array[~kept]
    if masked.size == 0 or not np.all(masked <= -1e30) or not np.all(masked == masked.flat[0]):
        return None
    return kept, float(masked.flat[0])


def broadcast_shape(a, b):
    return tuple(np.broadcast_shapes(a, b))


class Emitter:
    """The state of one import: the IR lines written so far, the arguments, and the value of each
    imported node. The graph walk (gpt.frontend.importer.Importer) drives it."""

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
        self._constants: dict = {}  # node -> its value when known at compile time (constant_value)

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
        body = mlir_float(flat[0]) if np.all(flat == flat[0]) else "[" + ", ".join(mlir_float(v) for v in flat) + "]"
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
            value = self.mask_constant(distinct_mask(data.detach().numpy()))
            value.batched = len(self.torch_shape(node)) == len(value.shape) + 1
            self.values[node] = value
            return value
        if isinstance(data, torch.Tensor):
            array = data.detach().numpy()
            dtype = {np.dtype(np.float32): "f32", np.dtype(np.int64): "i64"}.get(array.dtype)
            if dtype is None:
                raise Unsupported(f"constant {node.name} has dtype {array.dtype}: only float32 and int64 are supported")
            array = strip_leading_ones(array)  # broadcasting aligns trailing dimensions
            value = self.argument("constant", array.shape, dtype, data=np.ascontiguousarray(array))
            value = Value(value.name, value.shape, dtype)
            value.batched = len(self.torch_shape(node)) == len(value.shape) + 1
            self.values[node] = value
            return value
        if node in self.failed or (isinstance(node, torch.fx.Node) and node.args and node.args[0] in self.failed):
            raise DependsOnUnsupported()
        raise Unsupported(f"{node.name} ({node.target}) was not imported")


def materialize(imp: Emitter, x: Value) -> Value:
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
