"""torch.compile(module, backend="gpt"): each graph Dynamo captures is compiled by
gpt.compile_module; a graph the importer cannot take runs in eager PyTorch, with one warning that
names what it does not support (options={"strict": True} raises the CompilerError instead).

    compiled = torch.compile(model, backend="gpt", options={"pipeline": "default", "threads": 2})
"""

import dataclasses
import warnings

import torch

from gpt.compiler import CompilerError
from gpt.config import CompileOptions

BACKEND_NAME = "gpt"


def _module_tensor_kinds(graph: torch.fx.GraphModule, inputs) -> list[str]:
    """ "parameter", "buffer" or "input" for each graph input: Dynamo passes a module's parameters
    and buffers as inputs, and names their placeholders after them (L_self_modules_..._buffers_bias_)."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    kinds = []
    for node, x in zip(placeholders, inputs, strict=True):
        if isinstance(x, torch.nn.Parameter):
            kinds.append("parameter")
        elif "_buffers_" in node.name and isinstance(x, torch.Tensor):
            kinds.append("buffer")
        else:
            kinds.append("input")
    return kinds


class _LiftedGraph(torch.nn.Module):
    """A Dynamo graph whose parameters and buffers arrive as inputs, with those held as module
    tensors again, so that the importer sees weights (packed once, read in place) and constant
    buffers (a causal mask it can analyse) instead of activations."""

    def __init__(self, graph: torch.fx.GraphModule, inputs, kinds: list[str]):
        super().__init__()
        self.graph = graph
        self.kinds = kinds
        self.weights = torch.nn.ParameterList([x for x, k in zip(inputs, kinds, strict=True) if k == "parameter"])
        for i, (x, k) in enumerate(zip(inputs, kinds, strict=True)):
            if k == "buffer":
                self.register_buffer(f"buffer{i}", x)

    def forward(self, *activations):
        weights, others = iter(self.weights), iter(activations)
        arguments = []
        for i, kind in enumerate(self.kinds):
            if kind == "parameter":
                arguments.append(next(weights))
            elif kind == "buffer":
                arguments.append(getattr(self, f"buffer{i}"))
            else:
                arguments.append(next(others))
        return self.graph(*arguments)


def gpt_backend(graph: torch.fx.GraphModule, example_inputs, options: dict | None = None, *, compile_module):
    """Dynamo backend: returns the graph compiled by `compile_module` (gpt.compile_module), or the
    graph itself (eager) when it uses an op, dtype or shape the importer does not support."""
    options = dict(options or {})
    strict = options.pop("strict", False)
    known = {f.name for f in dataclasses.fields(CompileOptions)}
    if set(options) - known:
        raise TypeError(f"unknown gpt backend options {sorted(set(options) - known)}; known: strict, {sorted(known)}")
    compile_options = CompileOptions(**options)
    kinds = _module_tensor_kinds(graph, example_inputs)
    lifted = _LiftedGraph(graph, example_inputs, kinds).eval()
    activations = [x for x, k in zip(example_inputs, kinds, strict=True) if k == "input"]
    # Where each op came from in the user's code, for the error: the export of the Dynamo graph
    # sees only the graph's generated code.
    from gpt.frontend.importer import _location_of_trace

    origins = {n.name: loc for n in graph.graph.nodes if (loc := _location_of_trace(n.meta.get("stack_trace")))}
    try:
        compiled = compile_module(lifted, tuple(activations), compile_options, _origins=origins)
    except CompilerError as error:
        if strict:
            raise
        warnings.warn(f"gpt backend: this graph runs in eager PyTorch. {error}", stacklevel=2)
        return graph.forward

    def run(*inputs):
        return compiled(*[x for x, k in zip(inputs, kinds, strict=True) if k == "input"])

    return run


def register_backend(compile_module) -> None:
    """Registers "gpt" in Dynamo's backend registry (once), compiling with `compile_module`: passed
    in by gpt/frontend/__init__.py, which defines it and imports this module."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    def gpt(graph: torch.fx.GraphModule, example_inputs, options: dict | None = None):
        return gpt_backend(graph, example_inputs, options, compile_module=compile_module)

    if BACKEND_NAME not in _COMPILER_FNS:
        register_backend(compiler_fn=gpt, name=BACKEND_NAME)
