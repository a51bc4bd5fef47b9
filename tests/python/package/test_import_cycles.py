"""The modules of the gpt package import one another without cycles: architectures.py imports
nothing of gpt's, the GGUF readers and writer never import the model, and gpt.frontend and its
backend depend one way. Read from the package's sources (gpt.__file__), as ast sees them."""

import ast
import os

import gpt

ROOT = os.path.dirname(gpt.__file__)


def _modules() -> dict[str, str]:
    """Module name (gpt.x.y) -> path, for every .py file of the package."""
    modules = {}
    for directory, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                module = "gpt." + os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".")
                modules[module.removesuffix(".__init__")] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """Module -> the gpt modules it imports anywhere in its source (at module level, in a function
    or under TYPE_CHECKING alike). `from gpt import x` of a submodule depends on gpt.x, not on
    gpt/__init__.py; `from gpt.m import name` depends on gpt.m."""
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gpt":
                submodules = {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
                imported |= submodules or {node.module}
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names if a.name.startswith("gpt.")}
        graph[module] = {m for m in imported if m in modules and m not in (module, "gpt")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[module] = min(low[module], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def reachable(graph: dict[str, set[str]], module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for successor in graph[todo.pop()] - seen:
            seen.add(successor)
            todo.append(successor)
    return seen


def test_the_graph_is_read():
    # The walk finds the package and its imports: an empty graph would have no cycles either.
    graph = import_graph()
    assert {"gpt.model", "gpt.gguf_file", "gpt.gguf.container", "gpt.frontend.backend"} <= graph.keys()
    assert "gpt.config" in graph["gpt.model"]


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_architectures_is_a_leaf():
    assert import_graph()["gpt.architectures"] == set()


def test_architecture_weights_imports_only_architectures():
    # The weight conversion moved out of architectures.py; it reads the tables and nothing else of gpt's.
    assert import_graph()["gpt.architecture_weights"] == {"gpt.architectures"}


def test_the_gguf_layer_never_imports_the_model():
    graph = import_graph()
    for module in ["gpt.gguf.container", "gpt.gguf_file", "gpt.gguf_llama", "gpt.gguf_tokenizer"]:
        assert "gpt.model" not in reachable(graph, module), module
