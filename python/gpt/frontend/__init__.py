"""The PyTorch front end: gpt.compile_module(module, example_inputs) captures a module's ATen
graph with torch.export (Dynamo), imports it into the transformer dialect (gpt/frontend/importer.py)
and compiles it with the same pipelines, JIT and disk cache as gpt.GPT.

    compiled = gpt.compile_module(model.eval(), (idx,))
    logits = compiled(idx)                 # torch tensors in, torch tensors out (numpy: numpy)
    print(compiled.ir("transformer"))      # the imported function after any stage
    torch.compile(model, backend="gpt")    # registered on import (gpt/frontend/backend.py)
"""

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

    def __init__(self, program: torch.export.ExportedProgram, options: CompileOptions):
        self._options = options
        self._program = program
        pack = options.pipeline in ("vectorized", "default")
        self._imported: ImportedFunction = Importer(program, pack_weights=pack).run()
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
        self._out_spec = program.call_spec.out_spec
        start = time.perf_counter()
        self._function.compile()
        self._compile_seconds = time.perf_counter() - start

    @property
    def options(self) -> CompileOptions:
        return self._options

    @property
    def compile_seconds(self) -> float:
        return self._compile_seconds

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
        arguments = []
        for index, argument in enumerate(self._imported.arguments):
            if argument.kind == "input":
                arguments.append(arrays[argument.input_index].reshape(argument.value.shape))
            else:
                arguments.append(self._fixed[index])
        results = [np.empty(v.shape, np.float32 if v.dtype == "f32" else np.int64) for v in self._imported.results]
        self._function.call(arguments, results)
        outputs = [r.reshape(shape) for r, shape in zip(results, self._imported.result_shapes, strict=True)]
        if not as_numpy:
            outputs = [torch.from_numpy(o) for o in outputs]
        return pytree.tree_unflatten(outputs, self._out_spec)


def compile_module(
    module: torch.nn.Module, example_inputs: Sequence[Any], options: CompileOptions | None = None
) -> CompiledModule:
    """Exports `module` with torch.export at the example inputs' shapes (put it in eval() mode
    first: dropout must be off), imports its graph and compiles it. Raises gpt.CompilerError
    listing every unsupported op (with the file:line that produced it), dtype and shape."""
    options = options if options is not None else CompileOptions()
    if not isinstance(options, CompileOptions):
        raise TypeError(f"options must be a gpt.CompileOptions, got {type(options).__name__}")
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if isinstance(example_inputs, (torch.Tensor, np.ndarray)):
        example_inputs = (example_inputs,)
    inputs = tuple(_as_tensor(x, f"example input {i}") for i, x in enumerate(example_inputs))
    try:
        program = torch.export.export(module, inputs)
    except Exception as error:  # Dynamo's own message says what it could not capture
        raise CompilerError(f"torch.export could not capture the module: {error}") from error
    return CompiledModule(program, options)


register_backend()
