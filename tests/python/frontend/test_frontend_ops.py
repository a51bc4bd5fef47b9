"""The PyTorch importer's shape: one op-handler registry filled by one module per ATen op family
(gpt/frontend/ops), docs/FRONTEND.md's coverage table equal to it, and every module of
gpt.frontend under the size limits of issue 41."""

import ast
import os
import re

import pytest
import torch
from torch import nn

import gpt
import gpt.frontend
from gpt.frontend import SUPPORTED_OPS
from gpt.frontend.emitter import handles

aten = torch.ops.aten
FRONTEND = os.path.dirname(gpt.frontend.__file__)
DOCS = os.path.join("docs", "FRONTEND.md")  # from the repository root, or the runfiles root under Bazel


def _frontend_sources() -> dict[str, str]:
    """Path relative to gpt/frontend -> source, for every module of the package."""
    sources = {}
    for directory, _, files in os.walk(FRONTEND):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    sources[os.path.relpath(path, FRONTEND)] = f.read()
    return sources


def test_every_handler_lives_in_its_family_module():
    modules = {support.emit.__module__ for support in SUPPORTED_OPS.values()}
    assert modules == {
        f"gpt.frontend.ops.{family}"
        for family in ("attention", "elementwise", "embedding", "linear", "normalization", "shape")
    }
    assert SUPPORTED_OPS[aten.scaled_dot_product_attention.default].emit.__module__ == "gpt.frontend.ops.attention"
    assert SUPPORTED_OPS[aten.layer_norm.default].emit.__module__ == "gpt.frontend.ops.normalization"


def test_frontend_modules_stay_small_and_say_what_they_hold():
    for path, source in _frontend_sources().items():
        assert source.count("\n") <= 600, f"gpt/frontend/{path} has {source.count(chr(10))} lines (at most 600)"
        docstring = ast.get_docstring(ast.parse(source))
        assert docstring, f"gpt/frontend/{path} opens without a docstring of what it holds"


def test_the_coverage_table_is_the_registry():
    with open(DOCS, encoding="utf-8") as f:
        rows = dict(re.findall(r"^\| `(aten\.[\w.]+)` \| (.+) \|$", f.read(), re.MULTILINE))
    assert rows == {str(op): support.dialect for op, support in SUPPORTED_OPS.items()}


def test_a_second_handler_for_an_op_is_refused_by_name():
    with pytest.raises(ValueError, match=r"aten\.linear\.default has two handlers: emit_linear and"):

        @handles({aten.linear.default: "transformer.matmul"})
        def emit_linear_again(imp, node):
            raise AssertionError("never called")

    assert SUPPORTED_OPS[aten.linear.default].emit.__name__ == "emit_linear"


class Sine(nn.Module):
    def forward(self, x):
        return torch.sin(x)


def test_an_op_is_one_registered_function():
    """A handler registered with @handles is what the graph walk calls for its op: `aten.sin`,
    refused today, imports once one function says what it becomes."""
    program = torch.export.export(Sine().eval(), (torch.randn(1, 4, 8),))
    tiles = {"panel_width": 16, "vocab_multiple": 64}
    with pytest.raises(gpt.CompilerError, match=r"aten\.sin\.default \(sin\): not supported by the importer"):
        gpt.frontend.Importer(program, pack_weights=False, tiles=tiles).run()
    assert aten.sin.default not in SUPPORTED_OPS

    @handles({aten.sin.default: "transformer.sin (this test's)"})
    def emit_sin(imp, node):
        x = imp.operand(node.args[0])
        return imp.shaped(imp.emit("transformer.sin", [x], x.shape), node)

    try:
        imported = gpt.frontend.Importer(program, pack_weights=False, tiles=tiles).run()
    finally:
        del SUPPORTED_OPS[aten.sin.default]
    assert "= transformer.sin %arg0 : tensor<4x8xf32> -> tensor<4x8xf32>" in imported.ir
