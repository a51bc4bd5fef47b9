"""The PyTorch front end: gpt.compile_module(module, example_inputs) captures a module's ATen
graph with torch.export (Dynamo), imports it into the transformer dialect (gpt/frontend/importer.py,
one module per ATen op family in gpt/frontend/ops) and compiles it with the same pipelines, JIT and
disk cache as gpt.GPT.

    compiled = gpt.compile_module(model.eval(), (idx,))
    logits = compiled(idx)                 # torch tensors in, torch tensors out (numpy: numpy)
    print(compiled.ir("transformer"))      # the imported function after any stage
    torch.compile(model, backend="gpt")    # registered on import (gpt/frontend/backend.py)
"""

import inspect
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

from gpt import _gpt
from gpt.compiler import CompilerError
from gpt.config import CompileOptions
from gpt.frontend.backend import register_backend
from gpt.frontend.importer import SUPPORTED_OPS, ImportedFunction, Importer
from gpt_runtime.read_only import ReadOnly

__all__ = ["SUPPORTED_OPS", "CompiledModule", "compile_module"]


def _as_tensor(x, what: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    raise TypeError(f"{what} must be a torch.Tensor or np.ndarray, got {type(x).__name__}")


class CompiledModule:
    """A module's forward, compiled for this CPU. Call it with tensors of the example inputs'
    shapes and dtypes (torch CPU tensors or numpy arrays); it returns what the module returns,
    with torch tensors (numpy arrays when called with numpy arrays)."""

    def __init__(self, program: torch.export.ExportedProgram, options: CompileOptions, origins=None):
        self._options = options
        self._program = program
        pack = options.pipeline in ("vectorized", "default")
        tiles = _gpt.tile_parameters(options.target_cpu)
        self._imported: ImportedFunction = Importer(program, pack_weights=pack, tiles=tiles, origins=origins).run()
        tensors = {**program.state_dict, **program.constants}
        # Module tensors are read in place where their layout is as given (zero-copy); packed or
        # transposed ones are laid out here, once. The arrays live as long as this object.
        self._fixed: dict[int, np.ndarray] = {}
        for index, argument in enumerate(self._imported.arguments):
            if argument.kind == "parameter":
                self._fixed[index] = argument.parameter.materialize(tensors[argument.parameter.target])
            elif argument.kind == "constant":
                self._fixed[index] = argument.data
        self._function = _gpt.CompiledFunction(
            self._imported.ir,
            self._imported.name,
            options.pipeline,
            options.resolved_threads(),
            options.resolved_cache_dir(),
            options.resolved_cache_max_bytes(),
            options.target_cpu,
        )
        user_inputs = [n for n in program.graph.nodes if n.op == "placeholder"]
        names = set(program.graph_signature.user_inputs)
        self._input_vals = [n.meta["val"] for n in user_inputs if n.name in names]
        # (input, table rows) of the inputs that are embedding ids: checked on every call, as the
        # compiled gather clamps an id into its table where eager PyTorch raises IndexError.
        self._embedding_ids = [
            (a.input_index, a.embedding_rows)
            for a in self._imported.arguments
            if a.kind == "input" and a.embedding_rows
        ]
        self._out_spec = program.call_spec.out_spec
        start = time.perf_counter()
        self._function.compile()
        self._compile_seconds = time.perf_counter() - start

    options = ReadOnly[CompileOptions]()
    compile_seconds = ReadOnly[float]()

    def loaded_from_disk_cache(self) -> bool:
        return self._function.loaded_from_disk_cache()

    def ir(self, stage: str = "transformer") -> str:
        """The imported function after a named stage (gpt.STAGES); "imported": as imported."""
        if stage == "imported":
            return self._imported.ir
        return self._function.ir(stage)

    def parameter_layouts(self) -> list[tuple[str, str]]:
        """(module tensor, layout) of every argument that holds a module tensor."""
        return [(a.parameter.target, a.parameter.layout) for a in self._imported.arguments if a.kind == "parameter"]

    def __call__(self, *inputs: Any) -> Any:
        flat = pytree.tree_leaves(inputs)
        if len(flat) != len(self._input_vals):
            raise TypeError(f"expected {len(self._input_vals)} input tensors, got {len(flat)}")
        as_numpy = all(isinstance(x, np.ndarray) for x in flat)
        arrays = []
        for i, (x, val) in enumerate(zip(flat, self._input_vals, strict=True)):
            tensor = _as_tensor(x, f"input {i}")
            if tensor.dtype != val.dtype or tuple(tensor.shape) != tuple(val.shape):
                raise ValueError(
                    f"input {i} has dtype {tensor.dtype} and shape {tuple(tensor.shape)}; the module was compiled "
                    f"for {val.dtype} {tuple(val.shape)}"
                )
            arrays.append(np.ascontiguousarray(tensor.detach().numpy()))
        for i, rows in self._embedding_ids:
            ids = arrays[i]
            if ids.size and (ids.min() < 0 or ids.max() >= rows):
                where = tuple(int(d) for d in np.argwhere((ids < 0) | (ids >= rows))[0])
                raise IndexError(
                    f"input {i}: index {int(ids[where])} at position {where} is out of range for an embedding "
                    f"table of {rows} rows (valid: 0 to {rows - 1})"
                )
        arguments = []
        for index, argument in enumerate(self._imported.arguments):
            if argument.kind == "input":
                arguments.append(arrays[argument.input_index].reshape(argument.value.shape))
            else:
                arguments.append(self._fixed[index])
        results = [np.empty(v.shape, np.float32 if v.dtype == "f32" else np.int64) for v in self._imported.results]
        self._function.call(arguments, results)
        outputs = []
        for result, shape in zip(results, self._imported.result_shapes, strict=True):
            # Padded columns (an LM head packed in whole panels) are dropped by a view.
            result = result[..., : shape[-1]] if shape and result.shape[-1] != shape[-1] else result
            outputs.append(result.reshape(shape))
        if not as_numpy:
            outputs = [torch.from_numpy(o) for o in outputs]
        return pytree.tree_unflatten(outputs, self._out_spec)


# The smallest sequence bucket, as gpt.GPT.forward pads: the same on every target.
SMALLEST_BUCKET = _gpt.tile_parameters("host")["smallest_bucket"]


class BucketedModule:
    """A module exported with a dynamic sequence length (torch.export.Dim): each call is padded
    at the end of the sequence to its bucket (the smallest power of two >= max(T, 8), at most the
    Dim's max), run by the CompiledModule of that bucket (compiled on first use) and sliced back
    to T, as gpt.GPT.forward buckets. Padding at the end is invisible to the real positions of a
    causal model (position t reads only positions <= t): only such models may be bucketed."""

    def __init__(self, module, program, input_vals, sequence_inputs, sequence_outputs, max_length, options):
        self._module, self._options, self._max = module, options, max_length
        self._program, self._input_vals = program, input_vals
        self._sequence_inputs = sequence_inputs  # {input index: dim}
        self._sequence_outputs = sequence_outputs  # {output index: dim}
        self._buckets: dict[int, CompiledModule] = {}

    options = ReadOnly[CompileOptions]()

    def bucket_for(self, length: int) -> int:
        bucket = SMALLEST_BUCKET
        while bucket < length:
            bucket *= 2
        return min(bucket, max(self._max, length))

    def compiled_buckets(self) -> list[int]:
        return sorted(self._buckets)

    def ir(self, stage: str = "transformer", length: int = SMALLEST_BUCKET) -> str:
        return self._compiled_for(self.bucket_for(length)).ir(stage)

    def _compiled_for(self, bucket: int) -> CompiledModule:
        if bucket not in self._buckets:
            examples = []
            for i, val in enumerate(self._input_vals):
                shape = [int(s) for s in val.shape] if i not in self._sequence_inputs else list(val.shape)
                if i in self._sequence_inputs:
                    shape = [bucket if d == self._sequence_inputs[i] else int(s) for d, s in enumerate(shape)]
                examples.append(torch.zeros(shape, dtype=val.dtype))
            self._buckets[bucket] = compile_module(self._module, tuple(examples), self._options)
        return self._buckets[bucket]

    def __call__(self, *inputs):
        flat = pytree.tree_leaves(inputs)
        lengths = {int(_as_tensor(flat[i], f"input {i}").shape[d]) for i, d in self._sequence_inputs.items()}
        if len(lengths) != 1:
            raise ValueError(f"the inputs disagree on the sequence length: {sorted(lengths)}")
        (length,) = lengths
        if not 1 <= length <= self._max:
            raise ValueError(f"sequence length {length} is outside [1, {self._max}] (the Dim's range)")
        bucket = self.bucket_for(length)
        as_numpy = all(isinstance(x, np.ndarray) for x in flat)
        padded = []
        for i, x in enumerate(flat):
            tensor = _as_tensor(x, f"input {i}")
            if i in self._sequence_inputs:
                d = self._sequence_inputs[i]
                pad = list(tensor.shape)
                pad[d] = bucket - length
                tensor = torch.cat([tensor, torch.zeros(pad, dtype=tensor.dtype)], dim=d)
            padded.append(tensor)
        outputs = pytree.tree_leaves(self._compiled_for(bucket)(*padded))
        sliced = []
        for i, out in enumerate(outputs):
            if i in self._sequence_outputs:
                out = torch.narrow(out, self._sequence_outputs[i], 0, length)
            sliced.append(out.numpy() if as_numpy else out)
        return pytree.tree_unflatten(sliced, self._program.call_spec.out_spec)


def _sequence_dims(program, what: str, vals) -> dict[int, int]:
    """{index: dim} of the tensors in `vals` with a dynamic dimension, which must be the single
    sequence length; anything else dynamic raises CompilerError."""
    found, symbols = {}, set()
    for i, val in enumerate(vals):
        if not isinstance(val, torch.Tensor):
            continue
        dynamic = [d for d, s in enumerate(val.shape) if not isinstance(s, int)]
        if not dynamic:
            continue
        if len(dynamic) != 1 or dynamic[0] != (1 if val.dim() >= 2 else 0):
            raise CompilerError(
                f"{what} {i} has the dynamic shape {tuple(val.shape)}: only the sequence length (dim 1 of "
                "[1, T] ids or [1, T, C] activations) may be dynamic"
            )
        symbols.add(str(val.shape[dynamic[0]]))
        found[i] = dynamic[0]
    if len(symbols) > 1:
        raise CompilerError(f"more than one dynamic dimension ({sorted(symbols)}): only the sequence length may be")
    return found


def _export_kwargs(module: torch.nn.Module) -> dict[str, Any]:
    """Keyword arguments for the export: use_cache=False for a HF model whose config says
    use_cache (the default of HF causal LMs), whose forward would otherwise also return a
    DynamicCache, which torch.export cannot return; its logits do not depend on it, and the
    compiled module returns the model's output with past_key_values None."""
    config = getattr(module, "config", None)
    if not getattr(config, "use_cache", False):
        return {}
    try:
        parameters = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return {}
    return {"use_cache": False} if "use_cache" in parameters else {}


def compile_module(
    module: torch.nn.Module,
    example_inputs: Sequence[Any],
    options: CompileOptions | None = None,
    *,
    dynamic_shapes: Any = None,
    _origins: dict[str, str] | None = None,
) -> "CompiledModule | BucketedModule":
    """Exports `module` with torch.export at the example inputs' shapes (put it in eval() mode
    first: dropout must be off), imports its graph and compiles it. Raises gpt.CompilerError
    listing every unsupported op (with the file:line that produced it), dtype and shape.

    `dynamic_shapes` (torch.export's argument) may make the sequence length dynamic, with a
    torch.export.Dim that has a max: calls are then bucketed as gpt.GPT.forward does (see
    BucketedModule), one compile per bucket used."""
    options = options if options is not None else CompileOptions()
    if not isinstance(options, CompileOptions):
        raise TypeError(f"options must be a gpt.CompileOptions, got {type(options).__name__}")
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if isinstance(example_inputs, (torch.Tensor, np.ndarray)):
        example_inputs = (example_inputs,)
    inputs = tuple(_as_tensor(x, f"example input {i}") for i, x in enumerate(example_inputs))
    kwargs = _export_kwargs(module)
    if kwargs and isinstance(dynamic_shapes, (tuple, list)):
        dynamic_shapes = (*dynamic_shapes, *(None for _ in kwargs))  # kwargs follow the inputs
    elif kwargs and isinstance(dynamic_shapes, dict):
        dynamic_shapes = {**dynamic_shapes, **{name: None for name in kwargs}}
    try:
        program = torch.export.export(module, inputs, kwargs=kwargs, dynamic_shapes=dynamic_shapes)
    except Exception as error:  # Dynamo's own message says what it could not capture
        raise CompilerError(f"torch.export could not capture the module: {error}") from error
    if dynamic_shapes is None:
        return CompiledModule(program, options, _origins)
    names = set(program.graph_signature.user_inputs)
    input_vals = [n.meta["val"] for n in program.graph.nodes if n.op == "placeholder" and n.name in names]
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    output_vals = [
        a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in pytree.tree_leaves(output_node.args[0])
    ]
    sequence_inputs = _sequence_dims(program, "input", input_vals)
    if not sequence_inputs:
        return CompiledModule(program, options)
    sequence_outputs = _sequence_dims(program, "output", output_vals)
    i, d = next(iter(sequence_inputs.items()))
    symbol = input_vals[i].shape[d]
    upper = program.range_constraints[symbol.node.expr].upper if hasattr(symbol, "node") else None
    if upper is None or not isinstance(upper, int) and not str(upper).isdigit():
        raise CompilerError("the dynamic sequence length needs a maximum: torch.export.Dim('T', max=...)")
    return BucketedModule(module, program, input_vals, sequence_inputs, sequence_outputs, int(upper), options)


register_backend(compile_module)
