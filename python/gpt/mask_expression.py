"""Attention masks written as expressions of the query position i and the key position j.

Two spellings of one language, both checked here, before anything is compiled:
- Python operators on `i` and `j` (gpt.masks.i, gpt.masks.j): `(j <= i) & ((i - j) % 64 == 0)`;
- the s-expression text the C++ builder parses (cc/builder/MaskExpression.h):
  `(and (le j i) (eq (mod (sub i j) 64) 0))`.
Either becomes a tree of Nodes, which prints as that text and evaluates densely with numpy.
"""

import dataclasses
import functools

import numpy as np

# Operators: name -> (arity, None for any count >= 2; whether they take booleans; whether they give one).
ARITHMETIC = ("add", "sub", "mul", "div", "mod", "min", "max")
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
OPERATORS = {
    **{name: (2, False, False) for name in ARITHMETIC},
    **{name: (2, False, True) for name in COMPARISONS},
    "not": (1, True, True),
    "and": (None, True, True),
    "or": (None, True, True),
}
MAX_DEPTH = 64  # the C++ parser's nesting limit
MAX_LITERAL = 2**31 - 1  # positions are far smaller; products of two such stay within int64
# Compiled code computes a mask in 64-bit `index` arithmetic and numpy (the reference) in int64:
# both wrap around silently, so an expression is only taken where no sub-expression can leave
# this range for any positions (check_range); there, both agree with exact integers.
INT64_RANGE = (-(2**63), 2**63 - 1)


@dataclasses.dataclass(frozen=True)
class Node:
    """`i`, `j`, an integer literal, or an operator of OPERATORS applied to its arguments."""

    name: str
    arguments: tuple["Node", ...] = ()
    literal: int | None = None

    @property
    def boolean(self) -> bool:
        return self.name in OPERATORS and OPERATORS[self.name][2]

    def text(self) -> str:
        if self.literal is not None:
            return str(self.literal)
        if not self.arguments:
            return self.name
        return f"({self.name} {' '.join(argument.text() for argument in self.arguments)})"

    def evaluate(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """The expression over broadcast int64 arrays of positions (Python's floor division and
        modulo, as the compiled code computes them)."""
        if self.literal is not None:
            return np.int64(self.literal)
        if self.name == "i":
            return i
        if self.name == "j":
            return j
        values = [argument.evaluate(i, j) for argument in self.arguments]
        if self.name == "and":
            return functools.reduce(np.logical_and, values)
        if self.name == "or":
            return functools.reduce(np.logical_or, values)
        if self.name == "not":
            return np.logical_not(values[0])
        a, b = values
        return {
            "add": np.add,
            "sub": np.subtract,
            "mul": np.multiply,
            "div": np.floor_divide,
            "mod": np.mod,
            "min": np.minimum,
            "max": np.maximum,
            "eq": np.equal,
            "ne": np.not_equal,
            "lt": np.less,
            "le": np.less_equal,
            "gt": np.greater,
            "ge": np.greater_equal,
        }[self.name](a, b)


def check(node: Node, source: str, depth: int = 1) -> None:
    """Raises ValueError unless every operator of `node` is known and gets the number and
    kind (integer or boolean) of arguments it takes."""

    def fail(what: str):
        raise ValueError(f"mask expression {source!r}: {what}")

    if depth > MAX_DEPTH:
        fail(f"nested deeper than {MAX_DEPTH}")
    if node.literal is not None or (node.name in ("i", "j") and not node.arguments):
        return
    if node.name not in OPERATORS:
        fail(f"unknown operator {node.name!r} (known: {', '.join(OPERATORS)})")
    arity, takes_booleans, _ = OPERATORS[node.name]
    count = len(node.arguments)
    if arity is not None and count != arity:
        fail(f"({node.name} ...) takes {arity} argument{'s' * (arity > 1)}, got {count}")
    if arity is None and count < 2:
        fail(f"({node.name} ...) takes at least 2 arguments, got {count}")
    for argument in node.arguments:
        check(argument, source, depth + 1)
        if argument.boolean != takes_booleans:
            kind = "booleans" if takes_booleans else "integers"
            fail(f"({node.name} ...) takes {kind}, got {argument.text()}")
    if node.name in ("div", "mod"):
        divisor = node.arguments[1]
        if divisor.literal is None or divisor.literal < 1:
            fail(f"({node.name} a n) needs a positive integer literal n, got {divisor.text()}")


def check_range(node: Node, source: str, positions: int) -> None:
    """Raises ValueError naming the first sub-expression of `node` (innermost first) whose value
    may leave INT64_RANGE for some query and key positions i, j in [0, positions). Each integer
    sub-expression's bounds are found by interval arithmetic, with Python's exact integers: sound
    (an overflow is never missed), and at worst it refuses an expression whose extreme values are
    never reached together, such as (mul (sub i i) (mul i j)), always 0, below 2^31 positions."""

    def bounds(node: Node) -> tuple[int, int] | None:  # None for a boolean
        if node.literal is not None:
            return node.literal, node.literal
        if node.name in ("i", "j") and not node.arguments:
            return 0, positions - 1
        arguments = [bounds(argument) for argument in node.arguments]
        if node.boolean:
            return None
        (a_low, a_high), (b_low, b_high) = arguments
        if node.name == "add":
            low, high = a_low + b_low, a_high + b_high
        elif node.name == "sub":
            low, high = a_low - b_high, a_high - b_low
        elif node.name == "mul":
            products = (a_low * b_low, a_low * b_high, a_high * b_low, a_high * b_high)
            low, high = min(products), max(products)
        elif node.name == "div":  # by a positive literal (check()): floor division is monotone
            low, high = a_low // b_low, a_high // b_low
        elif node.name == "mod":  # a positive literal n: Python's modulo lies in [0, n)
            low, high = (a_low, a_high) if 0 <= a_low and a_high < b_low else (0, b_low - 1)
        elif node.name == "min":
            low, high = min(a_low, b_low), min(a_high, b_high)
        else:  # max
            low, high = max(a_low, b_low), max(a_high, b_high)
        for value in (low, high):
            if not INT64_RANGE[0] <= value <= INT64_RANGE[1]:
                raise ValueError(
                    f"mask expression {source!r}: {node.text()} reaches {value} for positions i, j in "
                    f"[0, {positions}), beyond the 64-bit integers the mask is computed in (it would wrap around)"
                )
        return low, high

    bounds(node)


def parse(text: str) -> Node:
    """The s-expression `text` as a tree, checked; raises ValueError naming the problem."""
    if not isinstance(text, str):
        raise ValueError(f"a mask expression must be a str or built from gpt.masks.i and j, got {text!r}")
    tokens = text.replace("(", " ( ").replace(")", " ) ").split()
    at = depth = 0

    def fail(what: str):
        raise ValueError(f"mask expression {text!r}: {what}")

    def node() -> Node:
        nonlocal at, depth
        depth += 1
        if depth > MAX_DEPTH:
            fail(f"nested deeper than {MAX_DEPTH}")
        if at >= len(tokens):
            fail("expected an expression, got the end of the text")
        token = tokens[at]
        at += 1
        if token == ")":
            fail("unexpected ')'")
        if token != "(":
            if token in ("i", "j"):
                return Node(token)
            if not token.lstrip("-").isdigit() or not token.isascii():
                fail(f"unknown name {token!r}: the only variables are i (query position) and j (key position)")
            return literal_node(int(token), fail)
        if at >= len(tokens) or tokens[at] in "()":
            fail("expected an operator after '('")
        name = tokens[at]
        at += 1
        arguments = []
        while at < len(tokens) and tokens[at] != ")":
            arguments.append(node())
        if at >= len(tokens):
            fail("missing ')'")
        at += 1
        depth -= 1
        return Node(name, tuple(arguments))

    if not tokens:
        fail("empty")
    root = node()
    if at != len(tokens):
        fail(f"unexpected text after the expression: {' '.join(tokens[at:])!r}")
    check(root, text)
    return root


class Term:
    """A piece of a mask expression built with Python operators from gpt.masks.i and gpt.masks.j;
    integers mix in as literals. `a // n` and `a % n` take a positive int n; booleans combine
    with &, | and ~ (not `and`/`or`/`not`, which Python does not let a class change)."""

    __slots__ = ("node",)
    __hash__ = None  # == builds a comparison, so a Term is not a dict key

    def __init__(self, node: Node):
        self.node = node

    def __repr__(self) -> str:
        return f"Term({self.node.text()!r})"

    def __bool__(self):
        raise ValueError(
            f"{self.node.text()} has no truth value while the mask is built: combine conditions with &, | and ~, "
            "not `and`, `or`, `not` or chained comparisons"
        )

    def _apply(self, name: str, *others) -> "Term":
        arguments = (self.node, *(as_node(other) for other in others))
        built = Node(name, arguments)
        check(built, built.text())
        return Term(built)

    def _swapped(self, name: str, other) -> "Term":
        return Term(as_node(other))._apply(name, self)

    # Builds the operator methods below (a plain function in the class body, deleted after).
    def _operator(name: str, swapped: bool = False):
        def apply(self, other):
            return self._swapped(name, other) if swapped else self._apply(name, other)

        return apply

    __add__, __sub__, __mul__ = _operator("add"), _operator("sub"), _operator("mul")
    __radd__, __rsub__, __rmul__ = _operator("add", True), _operator("sub", True), _operator("mul", True)
    __floordiv__, __mod__ = _operator("div"), _operator("mod")
    __eq__, __ne__ = _operator("eq"), _operator("ne")
    __lt__, __le__, __gt__, __ge__ = _operator("lt"), _operator("le"), _operator("gt"), _operator("ge")
    __and__, __or__ = _operator("and"), _operator("or")
    __rand__, __ror__ = _operator("and", True), _operator("or", True)
    del _operator

    def __invert__(self) -> "Term":
        return self._apply("not")

    def __truediv__(self, other):
        raise ValueError(f"{self.node.text()} / ...: positions are integers, use // (floor division)")


def literal_node(value: int, fail) -> Node:
    """An integer literal; `fail(message)` raises for one beyond MAX_LITERAL."""
    if abs(value) > MAX_LITERAL:
        fail(f"the literal {value} is beyond +-{MAX_LITERAL}")
    return Node(str(value), literal=value)


def as_node(value) -> Node:
    """A Term's node, or an int as a literal."""
    if isinstance(value, Term):
        return value.node
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):

        def fail(what):
            raise ValueError(f"mask expression: {what}")

        return literal_node(int(value), fail)
    raise ValueError(f"a mask expression takes ints, gpt.masks.i and gpt.masks.j, got {value!r}")


def minimum(a, b) -> Term:
    """The smaller of two integer terms (`min` in the text)."""
    return Term(as_node(a))._apply("min", b)


def maximum(a, b) -> Term:
    """The larger of two integer terms (`max` in the text)."""
    return Term(as_node(a))._apply("max", b)
