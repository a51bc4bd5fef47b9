"""The block manager: which KV-pool blocks are free, who holds each block (reference counts), and
which full blocks hold which token prefix (the prefix cache).

A full block is named by a chained hash of every token up to its end, so two sequences whose
prompts agree up to the end of block i name their blocks 0..i the same way and can share them.
A block whose last holder lets go while it still names a prefix is not wiped: it waits in an LRU
list, still findable, until the pool needs a fresh block and evicts it.

Between `begin()` and `commit()` every change is journaled, and `rollback()` undoes them: the
engine's steps are transactions (see Engine._begin).
"""

import collections
import hashlib

import numpy as np


def block_hashes(tokens, block_size: int, start: int = 0, previous: bytes = b"") -> list[bytes]:
    """The prefix hashes of the full blocks start, start + 1, ... of `tokens`; `previous` is the
    hash of block start - 1 (b"" for the first block)."""
    hashes = []
    for first in range(start * block_size, len(tokens) - block_size + 1, block_size):
        chunk = np.asarray(tokens[first : first + block_size], dtype=np.int64).tobytes()
        previous = hashlib.sha256(previous + chunk).digest()
        hashes.append(previous)
    return hashes


class BlockManager:
    """Reference-counted blocks of a pool of `num_blocks`, with a prefix cache over full blocks."""

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self._refcount = [0] * num_blocks
        self._free = collections.deque(range(num_blocks))  # hold no prefix
        self._cached = collections.OrderedDict()  # block -> None, unheld but naming a prefix, LRU first
        self._by_hash: dict[bytes, int] = {}
        self._hash_of: dict[int, bytes] = {}
        # Full blocks by the hash of the prefix before them (b"" for a first block), with their
        # tokens: where a prompt that diverges inside a block finds the block to copy its start from.
        self._children: dict[bytes, dict[int, tuple[int, ...]]] = {}
        self._parent_of: dict[int, bytes] = {}
        self._journal: list[tuple] | None = None  # undo records, newest last, while a transaction is open

    @property
    def available(self) -> int:
        """Blocks that allocate() can hand out (free, or cached and evictable)."""
        return len(self._free) + len(self._cached)

    @property
    def in_use(self) -> int:
        """Blocks held by at least one sequence."""
        return self.num_blocks - self.available

    @property
    def cached(self) -> int:
        """Blocks that no sequence holds but that still name a prefix."""
        return len(self._cached)

    def refcount(self, block: int) -> int:
        return self._refcount[block]

    def allocate(self) -> int:
        """A block held once by the caller; a free one first, else the least recently used cached
        one (forgetting its prefix). The caller checks `available` first."""
        evicted = not self._free
        if self._free:
            block = self._free.popleft()
        else:
            block, _ = self._cached.popitem(last=False)
            del self._by_hash[self._hash_of.pop(block)]
            siblings = self._children[self._parent_of.pop(block)]
            del siblings[block]
        self._refcount[block] = 1
        if self._journal is not None:
            self._journal.append(("allocate", block, evicted))
        return block

    def lookup(self, block_hash: bytes) -> int | None:
        """The block that holds the prefix named `block_hash`, if one does."""
        return self._by_hash.get(block_hash)

    def acquire(self, block: int) -> None:
        """One more holder of `block` (a prefix-cache hit)."""
        if self._refcount[block] == 0:
            del self._cached[block]
        self._refcount[block] += 1
        if self._journal is not None:
            self._journal.append(("acquire", block))

    def release(self, block: int) -> None:
        # No call into Python between a change and its journal record (here, _unheld inlined): an
        # exception cannot come between them, so the journal always matches the state.
        self._refcount[block] -= 1
        if self._refcount[block] == 0:
            if block in self._hash_of:
                self._cached[block] = None
            else:
                self._free.append(block)
        if self._journal is not None:
            self._journal.append(("release", block))

    def register(self, block: int, block_hash: bytes, parent_hash: bytes, tokens: tuple[int, ...]) -> None:
        """Records that `block` now holds the prefix `block_hash`, whose last block is `tokens` after
        the prefix `parent_hash` (its keys and values are written). A prefix another block already
        holds keeps that block; this one stays private."""
        if block_hash not in self._by_hash and block not in self._hash_of:
            self._by_hash[block_hash] = block
            self._hash_of[block] = block_hash
            self._children.setdefault(parent_hash, {})[block] = tokens
            self._parent_of[block] = parent_hash
            if self._journal is not None:
                self._journal.append(("register", block))

    def longest_partial_match(self, parent_hash: bytes, tokens) -> tuple[int | None, int]:
        """(block, k): a full block after the prefix `parent_hash` whose first k tokens are the
        first k of `tokens`, k as large as any such block gives (None, 0 when none matches)."""
        best, best_length = None, 0
        for block, held in self._children.get(parent_hash, {}).items():
            length = 0
            for mine, theirs in zip(tokens, held, strict=False):  # tokens may be shorter
                if mine != theirs:
                    break
                length += 1
            if length > best_length:
                best, best_length = block, length
        return best, best_length

    # -- transactions ---------------------------------------------------------------------------

    def begin(self) -> None:
        """Starts journaling changes (a new begin() drops an older journal)."""
        self._journal = []

    def commit(self) -> None:
        self._journal = None

    def rollback(self) -> None:
        """Undoes every change since begin(), newest first, back to the state begin() saw, with two
        exceptions that only cost cache hits: a cached block evicted meanwhile comes back free, its
        prefix forgotten (a copy may have written into it since), and a cached block taken and
        given back returns at the most recently used end of the LRU list."""
        journal, self._journal = self._journal, None
        for kind, block, *evicted in reversed(journal or ()):
            if kind == "allocate":
                self._refcount[block] = 0
                if evicted[0]:
                    self._free.append(block)
                else:
                    self._free.appendleft(block)  # where popleft() took it from
            elif kind == "acquire":
                self._refcount[block] -= 1
                if self._refcount[block] == 0:
                    self._unheld(block)
            elif kind == "release":
                if self._refcount[block] == 0:
                    self._take_unheld(block)
                self._refcount[block] += 1
            else:  # register
                del self._by_hash[self._hash_of.pop(block)]
                del self._children[self._parent_of.pop(block)][block]
                if block in self._cached:  # unheld and nameless now: free
                    del self._cached[block]
                    self._free.append(block)

    def _unheld(self, block: int) -> None:
        """A block whose last holder let go: cached while it names a prefix, else free."""
        if block in self._hash_of:
            self._cached[block] = None
        else:
            self._free.append(block)

    def _take_unheld(self, block: int) -> None:
        if block in self._cached:
            del self._cached[block]
        elif self._free and self._free[-1] == block:  # the usual case: release() appended it
            self._free.pop()
        else:  # it was cached, then evicted and forgotten by the rollback
            self._free.remove(block)
