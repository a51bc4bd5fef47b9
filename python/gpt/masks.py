"""Attention masks beyond the causal one, as GPTConfig(attention_mask=...) takes them.

Each mask says which keys j each query i sees, by absolute position, for every position below
block_size; `mask.dense(tokens)` is that [tokens, tokens] bool matrix. Every query must see itself.
The compiler classifies attention tile by tile (empty, full, partial), skips the empty tiles and
evaluates the mask only in the partial ones. It gets a mask in one of three forms:
- Causal() and SlidingWindow(W) are the causal rule and attention_window=W, in closed form;
- masks that are functions of the positions (Strided, Fixed, PrefixLM) give `expression()`, an
  s-expression over i and j (cc/builder/MaskExpression.h) that attention carries as IR: no
  [T, T] data exists, and prefill, decode and generate with a KV cache work as with causal;
- the others (Document, BlockPattern) are data: a [T, T] constant, forward() only.

A mask of one's own that is a function of the positions is an Expression, written with Python
operators on `i` (the query position) and `j` (the key position), or as the s-expression text:

    from gpt import masks
    from gpt.masks import i, j
    # The 16 previous positions, and every position that is a multiple of 64 (global tokens):
    local_and_global = masks.Expression((j <= i) & ((i - j < 16) | (j % 64 == 0)))
    same = masks.Expression("(and (le j i) (or (lt (sub i j) 16) (eq (mod j 64) 0)))")
    model = gpt.GPT.random(gpt.GPTConfig(..., attention_mask=local_and_global))

Integers: i, j, int literals, + - *, // and % by a positive int literal (Python's floor division
and modulo), masks.minimum(a, b), masks.maximum(a, b); comparisons < <= > >= == != give
booleans, combined with & | ~. Every query must see its own position. An expression that sees no
later key (j <= i wherever it is true) runs forward, prefill, decode and cached generate; one
that looks ahead runs forward() and generate(use_cache=False) only. A bad expression (unknown
operator or name, wrong number or kind of arguments, not a boolean, a query that does not see
itself) raises a ValueError naming the problem, before anything compiles.
"""

import dataclasses
import functools

import numpy as np

from gpt.mask_expression import MAX_LITERAL, Node, Term, check_range, maximum, minimum, parse

i = Term(Node("i"))  # the query's position, for Expression
j = Term(Node("j"))  # the key's position, for Expression

__all__ = [
    "AttentionMask",
    "BlockPattern",
    "Causal",
    "Document",
    "Expression",
    "Fixed",
    "PrefixLM",
    "SlidingWindow",
    "Strided",
    "i",
    "j",
    "maximum",
    "minimum",
]


def _positive_int(owner: str, name: str, value) -> None:
    # At most MAX_LITERAL: positions are below it (GPTConfig's dimensions are), and these numbers
    # become literals of the mask's expression, which the compiler takes up to there.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}.{name} must be an int >= 1, got {value!r}")
    if value > MAX_LITERAL:
        raise ValueError(f"{owner}.{name} must be at most {MAX_LITERAL}, got {value}")


class AttentionMask:
    """Which keys each query sees; subclasses define dense()."""

    def dense(self, tokens: int) -> np.ndarray:
        """[tokens, tokens] bool: [i, j] is whether query i sees key j."""
        raise NotImplementedError

    def expression(self) -> str | None:
        """The mask as an s-expression of the query position i and key position j, or None for a
        mask that is data."""
        return None

    def looks_ahead(self, block_size: int) -> bool:
        """Whether some query sees a later key. Programs then run on the exact number of tokens,
        unpadded: a padding row past the sequence would be one of those keys. (Read off dense()
        here; the masks below that know it say so without building the matrix.)"""
        return bool(np.triu(self.dense(block_size), k=1).any())

    def check(self, block_size: int) -> None:
        """Raises ValueError when this mask cannot serve a model of `block_size` positions."""

    def check_cache(self, block_size: int) -> None:
        """Raises ValueError when a model of `block_size` positions under this mask cannot keep a
        KV cache (new_cache() asks)."""

    def check_prefill(self, start: int, count: int) -> None:
        """Raises ValueError when a KV cache filled up to `start` cannot take `count` new tokens
        and still compute what forward() over the whole history computes."""


def _causal(tokens: int) -> np.ndarray:
    return np.tri(tokens, dtype=bool)


class _WithinCausal(AttentionMask):
    """A mask whose keys are all at or before their query (j <= i): no query sees a later key."""

    def looks_ahead(self, block_size: int) -> bool:
        return False


@dataclasses.dataclass(frozen=True)
class Causal(_WithinCausal):
    """Key j visible from query i iff j <= i (the default)."""

    def dense(self, tokens: int) -> np.ndarray:
        return _causal(tokens)


@dataclasses.dataclass(frozen=True)
class SlidingWindow(AttentionMask):
    """Key j visible from query i iff i - window < j <= i: the same as attention_window=window."""

    window: int

    def __post_init__(self):
        _positive_int("SlidingWindow", "window", self.window)

    def dense(self, tokens: int) -> np.ndarray:
        return np.tri(tokens, dtype=bool) & ~np.tri(tokens, k=-self.window, dtype=bool)


@dataclasses.dataclass(frozen=True)
class Strided(_WithinCausal):
    """Sparse Transformers' strided pattern (arXiv 1904.10509): key j <= i visible from query i
    iff i - j < stride (the previous `stride` positions) or stride divides i - j."""

    stride: int

    def __post_init__(self):
        _positive_int("Strided", "stride", self.stride)

    def dense(self, tokens: int) -> np.ndarray:
        distance = np.arange(tokens)[:, None] - np.arange(tokens)[None, :]
        return (distance >= 0) & ((distance < self.stride) | (distance % self.stride == 0))

    def expression(self) -> str:
        s = self.stride
        return f"(and (le j i) (or (lt (sub i j) {s}) (eq (mod (sub i j) {s}) 0)))"


@dataclasses.dataclass(frozen=True)
class Fixed(_WithinCausal):
    """Sparse Transformers' fixed pattern: key j <= i visible from query i iff j is in i's block of
    `block` positions, or j is one of the last `summary` positions of its own block (the summary
    cells every later query reads)."""

    block: int
    summary: int

    def __post_init__(self):
        _positive_int("Fixed", "block", self.block)
        _positive_int("Fixed", "summary", self.summary)
        if self.summary > self.block:
            raise ValueError(f"Fixed.summary ({self.summary}) must be at most Fixed.block ({self.block})")

    def dense(self, tokens: int) -> np.ndarray:
        positions = np.arange(tokens)
        same_block = positions[:, None] // self.block == positions[None, :] // self.block
        summary = (positions % self.block >= self.block - self.summary)[None, :]
        return _causal(tokens) & (same_block | summary)

    def expression(self) -> str:
        b = self.block
        return f"(and (le j i) (or (eq (div i {b}) (div j {b})) (ge (mod j {b}) {b - self.summary})))"


@dataclasses.dataclass(frozen=True)
class PrefixLM(AttentionMask):
    """A bidirectional prefix of `prefix` positions, causal after it: key j visible from query i
    iff j < prefix or j <= i."""

    prefix: int

    def __post_init__(self):
        _positive_int("PrefixLM", "prefix", self.prefix)

    def dense(self, tokens: int) -> np.ndarray:
        bidirectional = (np.arange(tokens) < self.prefix)[None, :]
        return _causal(tokens) | bidirectional

    def expression(self) -> str:
        return f"(or (lt j {self.prefix}) (le j i))"

    def looks_ahead(self, block_size: int) -> bool:
        return self.prefix > 1

    def check(self, block_size: int) -> None:
        if self.prefix > block_size:
            raise ValueError(f"PrefixLM.prefix ({self.prefix}) is longer than block_size ({block_size})")

    def check_prefill(self, start: int, count: int) -> None:
        # The prefix's positions see one another both ways, and the cache keeps each position's
        # keys and values as first computed: all of the prefix must come in the first prefill.
        if start < self.prefix and (start > 0 or count < self.prefix):
            raise ValueError(
                f"PrefixLM({self.prefix}) with a KV cache: the first prefill must hold the whole prefix "
                f"({self.prefix} tokens), got {count} tokens at position {start} "
                "(or run without the cache: generate(use_cache=False))"
            )


@dataclasses.dataclass(frozen=True)
class Document(_WithinCausal):
    """Packed documents: segment_ids[p] is the document of position p (one id per position below
    block_size); key j visible from query i iff j <= i and both are in the same document (a causal
    block-diagonal mask)."""

    segment_ids: tuple[int, ...]

    def __init__(self, segment_ids):
        ids = np.asarray(segment_ids)
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"Document.segment_ids must be a 1-D sequence of ints, got shape {ids.shape} {ids.dtype}")
        object.__setattr__(self, "segment_ids", tuple(int(i) for i in ids))

    def dense(self, tokens: int) -> np.ndarray:
        ids = np.asarray(self.segment_ids[:tokens])
        return _causal(tokens) & (ids[:, None] == ids[None, :])

    def check(self, block_size: int) -> None:
        if len(self.segment_ids) != block_size:
            raise ValueError(
                f"Document.segment_ids must hold one id per position, block_size = {block_size}, "
                f"got {len(self.segment_ids)}"
            )


@dataclasses.dataclass(frozen=True)
class BlockPattern(AttentionMask):
    """Any pattern of whole blocks: pattern[a][b] says whether the queries of block a (positions
    a * block .. a * block + block - 1) see the keys of block b. [block_size / block] squared,
    with every diagonal block set (each query sees itself)."""

    pattern: tuple[tuple[bool, ...], ...]
    block: int

    def __init__(self, pattern, block: int):
        _positive_int("BlockPattern", "block", block)
        bits = np.asarray(pattern)
        if bits.dtype != np.bool_ or bits.ndim != 2 or bits.shape[0] != bits.shape[1]:
            raise ValueError(
                f"BlockPattern.pattern must be a square 2-D bool array, got shape {bits.shape} {bits.dtype}"
            )
        if not bits.diagonal().all():
            raise ValueError("BlockPattern.pattern must set every diagonal block (each query sees itself)")
        object.__setattr__(self, "pattern", tuple(tuple(bool(b) for b in row) for row in bits))
        object.__setattr__(self, "block", block)

    def dense(self, tokens: int) -> np.ndarray:
        blocks = np.arange(tokens) // self.block
        return np.asarray(self.pattern, dtype=bool)[blocks[:, None], blocks[None, :]]

    def looks_ahead(self, block_size: int) -> bool:
        # A diagonal block is set: with more than one position per block, i sees i + 1.
        return self.block > 1 or bool(np.triu(np.asarray(self.pattern, dtype=bool), k=1).any())

    def check(self, block_size: int) -> None:
        if len(self.pattern) * self.block != block_size:
            raise ValueError(
                f"BlockPattern.pattern is {len(self.pattern)} x {len(self.pattern)} blocks of {self.block}; "
                f"block_size = {block_size} needs {block_size / self.block:g} x {block_size / self.block:g}"
            )


@dataclasses.dataclass(frozen=True)
class Expression(AttentionMask):
    """A mask of one's own: key j visible from query i iff `source` is true, an expression built
    from gpt.masks.i and gpt.masks.j with Python operators, or its s-expression text (see the
    module's docstring). Checked here; `text` is the canonical s-expression the compiler gets."""

    text: str

    def __init__(self, source):
        if isinstance(source, Term):
            node = parse(source.node.text())
        elif isinstance(source, str):
            node = parse(source)
        else:
            raise ValueError(
                f"Expression takes a str or a condition built from gpt.masks.i and j, got {type(source).__name__}"
            )
        if not node.boolean:
            raise ValueError(
                f"mask expression {node.text()!r} is an integer, not a condition: compare it "
                "(e.g. j <= i) and combine conditions with &, | and ~"
            )
        if node.name in ("i", "j") or node.literal is not None:
            raise ValueError(f"mask expression {node.text()!r} is an integer, not a condition")
        object.__setattr__(self, "text", node.text())
        # The first query at once (a strict j < i leaves it no key); check() covers every position
        # below the model's block_size, when a GPTConfig takes the mask.
        self._check_sees_itself(1)

    @functools.cached_property
    def _node(self) -> Node:
        return parse(self.text)

    def dense(self, tokens: int) -> np.ndarray:
        return _dense(self._node, self.text, tokens)

    def expression(self) -> str:
        return self.text

    def looks_ahead(self, block_size: int) -> bool:
        return _looks_ahead(self.text, block_size)

    def check(self, block_size: int) -> None:
        self._check_sees_itself(block_size)  # which refuses an overflow below block_size first

    def check_cache(self, block_size: int) -> None:
        # The cache keeps each position's keys and values as first computed; a query that sees a
        # later key would need them recomputed once that key exists.
        if self.looks_ahead(block_size):
            raise ValueError(
                f"a model with attention_mask=Expression({self.text!r}) has no KV cache: the mask lets a query "
                "see later keys; run forward() or generate(use_cache=False)"
            )

    def _check_sees_itself(self, tokens: int) -> None:
        check_range(self._node, self.text, tokens)
        positions = np.arange(tokens, dtype=np.int64)
        diagonal = np.broadcast_to(self._node.evaluate(positions, positions), (tokens,))
        if not diagonal.all():
            first = int(np.argmin(diagonal))
            raise ValueError(
                f"mask expression {self.text!r}: query {first} does not see its own position (key {first}); every "
                "query must, or a first query sees no key and its softmax has no value"
            )


def _dense(node: Node, text: str, tokens: int) -> np.ndarray:
    """[tokens, tokens] bool: whether key j is visible from query i under the expression `text`
    (parsed: `node`); refused (ValueError) where int64 would wrap around for positions below `tokens`."""
    check_range(node, text, tokens)
    positions = np.arange(tokens, dtype=np.int64)
    return np.broadcast_to(node.evaluate(positions[:, None], positions[None, :]), (tokens, tokens))


@functools.lru_cache(maxsize=64)
def _looks_ahead(text: str, tokens: int) -> bool:
    """Whether some query below `tokens` sees a later key under the expression `text`."""
    return bool(np.triu(_dense(parse(text), text, tokens), k=1).any())
