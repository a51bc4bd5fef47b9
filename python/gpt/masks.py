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
"""

import dataclasses

import numpy as np


def _positive_int(owner: str, name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}.{name} must be an int >= 1, got {value!r}")


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

    def check_prefill(self, start: int, count: int) -> None:
        """Raises ValueError when a KV cache filled up to `start` cannot take `count` new tokens
        and still compute what forward() over the whole history computes."""


def _causal(tokens: int) -> np.ndarray:
    return np.tri(tokens, dtype=bool)


@dataclasses.dataclass(frozen=True)
class Causal(AttentionMask):
    """Key j visible from query i iff j <= i (the default)."""

    def dense(self, tokens: int) -> np.ndarray:
        return _causal(tokens)

    def looks_ahead(self, block_size: int) -> bool:
        return False


@dataclasses.dataclass(frozen=True)
class SlidingWindow(AttentionMask):
    """Key j visible from query i iff i - window < j <= i: the same as attention_window=window."""

    window: int

    def __post_init__(self):
        _positive_int("SlidingWindow", "window", self.window)

    def dense(self, tokens: int) -> np.ndarray:
        return np.tri(tokens, dtype=bool) & ~np.tri(tokens, k=-self.window, dtype=bool)


@dataclasses.dataclass(frozen=True)
class Strided(AttentionMask):
    """Sparse Transformers' strided pattern (arXiv 1904.10509): key j <= i visible from query i
    iff i - j < stride (the previous `stride` positions) or stride divides i - j."""

    stride: int

    def __post_init__(self):
        _positive_int("Strided", "stride", self.stride)

    def dense(self, tokens: int) -> np.ndarray:
        distance = np.arange(tokens)[:, None] - np.arange(tokens)[None, :]
        return (distance >= 0) & ((distance < self.stride) | (distance % self.stride == 0))

    def looks_ahead(self, block_size: int) -> bool:
        return False

    def expression(self) -> str:
        s = self.stride
        return f"(and (le j i) (or (lt (sub i j) {s}) (eq (mod (sub i j) {s}) 0)))"


@dataclasses.dataclass(frozen=True)
class Fixed(AttentionMask):
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

    def looks_ahead(self, block_size: int) -> bool:
        return False

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
class Document(AttentionMask):
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

    def looks_ahead(self, block_size: int) -> bool:
        return False

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
