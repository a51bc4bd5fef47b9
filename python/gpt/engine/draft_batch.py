"""A draft model drafting for every speculating sequence of an engine at once.

A draft model's tokens cost one pass over its weights per drafted position. Drafting each sequence
alone (speculative.DraftModelDrafter, a KV cache per sequence) makes k passes per sequence and
step; here the draft model keeps every sequence's keys and values in one paged pool of its own
(KVBlockPool) and drafts all of them together: one batched step feeds each sequence's new tokens
and gives its first drafted token, and each further batched step gives one more token to every
sequence that wants it, so a step costs k passes however many sequences draft. A sequence's draft
cache follows its accepted text: what the target rejected is forgotten by shortening the cached
tokens (the rejected slots are written over), and its blocks go back when its drafter is dropped.
"""

import weakref
from collections.abc import Sequence

import numpy as np


class DraftModelBatch:
    """The draft model `draft` (checked by speculative.DraftModelDrafter, as the engine's
    Speculation does) over a pool of `num_blocks` blocks of `block_size` positions."""

    def __init__(self, draft, num_blocks: int, block_size: int):
        self._draft = draft
        self._pool = draft.new_block_pool(num_blocks, block_size)
        self._block_size = block_size
        self._free = list(range(num_blocks - 1, -1, -1))  # popped from the end: block 0 first

    def drafter(self, max_len: int) -> "PooledDrafter":
        """The drafter of one sequence of at most `max_len` positions."""
        return PooledDrafter(self, min(max_len, self._draft.config.block_size))

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def propose(self, requests: Sequence[tuple["PooledDrafter", Sequence[int], int]]) -> dict:
        """Greedy drafts for (drafter, the sequence's tokens, how many) requests, as
        {drafter: tokens}: at most that many, none for a sequence whose drafter has no room left
        (its context, or no free block in the pool; it decodes plainly this step)."""
        plans = [plan for plan in (self._plan(*request) for request in requests) if plan is not None]
        if not plans:
            return {}
        # Every sequence's new tokens (those its cache lacks, the last one at least): the logits
        # of each one's last are its first drafted token.
        feeds = [plan.tokens[len(plan.drafter.cached) :] for plan in plans]
        logits = self._step(plans, feeds)
        for plan, row in zip(plans, logits, strict=True):
            plan.drafter.cached = plan.tokens
            plan.proposed.append(int(np.argmax(row)))
        # Then one token more for every sequence that wants more, fed its last drafted token.
        while growing := [plan for plan in plans if len(plan.proposed) < plan.count]:
            logits = self._step(growing, [[plan.proposed[-1]] for plan in growing])
            for plan, row in zip(growing, logits, strict=True):
                plan.drafter.cached.append(plan.proposed[-1])  # its own list: plan.tokens, made by _plan
                plan.proposed.append(int(np.argmax(row)))
        return {plan.drafter: plan.proposed for plan in plans}

    def _plan(self, drafter: "PooledDrafter", tokens: Sequence[int], count: int) -> "_Plan | None":
        tokens = [int(t) for t in tokens]
        count = min(count, drafter.limit - len(tokens))
        # Positions written: every token but the last drafted one.
        if count <= 0 or not self._reserve(drafter, len(tokens) + count - 1):
            return None
        common = 0
        for mine, theirs in zip(drafter.cached, tokens, strict=False):
            if mine != theirs:
                break
            common += 1
        # At least the last token is fed, for its logits. What the cache surely holds if a step
        # raises: the next call rewinds no further.
        drafter.cached = tokens[: min(common, len(tokens) - 1)]
        return _Plan(drafter, tokens, count)

    def _reserve(self, drafter: "PooledDrafter", positions: int) -> bool:
        """Blocks for `positions` positions in `drafter`'s table, taken from the free ones; False,
        taking none, when too few are free."""
        needed = -(-positions // self._block_size) - len(drafter.table)
        if needed > len(self._free):
            return False
        for _ in range(max(needed, 0)):
            drafter.table.append(self._free.pop())
        return True

    def _release(self, table: list[int]) -> None:
        self._free.extend(reversed(table))
        table.clear()

    def _step(self, plans: list["_Plan"], feeds: list[list[int]]) -> np.ndarray:
        """One batched step of the draft model: each plan's `feeds` tokens after the ones its cache
        holds; the logits of each one's last."""
        starts = [len(plan.drafter.cached) for plan in plans]
        tables = np.zeros((len(plans), max(len(plan.drafter.table) for plan in plans)), np.int64)
        for row, plan in enumerate(plans):
            tables[row, : len(plan.drafter.table)] = plan.drafter.table
        ids = np.array([token for feed in feeds for token in feed], np.int64)
        counts = np.array([len(feed) for feed in feeds], np.int64)
        return self._draft.step_batch(self._pool, ids, counts, np.array(starts, np.int64), tables)


class PooledDrafter:
    """One sequence's drafter in a DraftModelBatch: its block table and the tokens whose keys and
    values the pool holds for it. Drafting it alone is a batch of one; the engine drafts all of
    them together (DraftModelBatch.propose). Its blocks go back to the batch when it is dropped."""

    def __init__(self, batch: DraftModelBatch, limit: int):
        self.batch = batch
        self.limit = limit  # positions at most: the sequence's request, the draft's context
        self.table: list[int] = []
        self.cached: list[int] = []
        weakref.finalize(self, batch._release, self.table)

    def propose(self, tokens: Sequence[int], count: int) -> list[int]:
        return self.batch.propose([(self, tokens, count)]).get(self, [])


class _Plan:
    """One sequence's drafting in a propose call: its tokens, how many to draft, what it has."""

    def __init__(self, drafter: PooledDrafter, tokens: list[int], count: int):
        self.drafter, self.tokens, self.count = drafter, tokens, count
        self.proposed: list[int] = []
