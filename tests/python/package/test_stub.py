"""python/gpt/_gpt.pyi, the type stub that py.typed tells users to trust, names every function and
class of the extension and every keyword argument of its functions, as the binding declares them."""

import ast
import inspect
import os
import re

import pytest

from gpt import _gpt

STUB = os.path.join(os.path.dirname(_gpt.__file__), "_gpt.pyi")


def stub_functions() -> dict[str, list[str]]:
    """Top-level `def`s and classes of the stub: name -> its parameter names (classes: [])."""
    with open(STUB, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names[node.name] = [a.arg for a in node.args.args + node.args.kwonlyargs]
        elif isinstance(node, ast.ClassDef):
            names[node.name] = []
    return names


def binding_parameters(function) -> list[str]:
    """The parameter names in a pybind11 function's signature line: `name(a: int, b: str = 1) -> ...`."""
    first = (function.__doc__ or "").splitlines()[0]
    match = re.match(r"\w+\((.*)\) ->", first)
    if match is None:  # overloaded: pybind11 lists the overloads below
        return []
    return re.findall(r"(?:^|, )(\w+):", match.group(1))


def extension_names() -> dict[str, object]:
    return {
        name: value
        for name, value in vars(_gpt).items()
        if not name.startswith("_") and (inspect.isclass(value) or callable(value))
    }


def test_the_stub_names_every_function_and_class_of_the_extension():
    missing = sorted(set(extension_names()) - set(stub_functions()))
    assert not missing, f"in the extension but not in _gpt.pyi: {missing}"
    stale = sorted(name for name in stub_functions() if not hasattr(_gpt, name))
    assert not stale, f"in _gpt.pyi but not in the extension: {stale}"


@pytest.mark.parametrize(
    "name", sorted(n for n, v in extension_names().items() if not inspect.isclass(v) and binding_parameters(v))
)
def test_each_function_takes_the_arguments_the_stub_says(name):
    assert stub_functions()[name] == binding_parameters(getattr(_gpt, name))
