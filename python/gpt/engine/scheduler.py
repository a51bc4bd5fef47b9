"""Continuous batching: which sequences run in the next step, and with how many tokens.

Every step has a token budget. Running sequences that decode (one new token each) come first, then
prompts, cut into chunks that fit what is left of the budget (chunked prefill), then waiting
requests are admitted in arrival order. When a sequence needs a block and the pool has none, the
youngest running sequence is preempted by recompute: its blocks go back to the pool (full ones
stay in the prefix cache) and it waits again with its generated tokens as part of its prompt. The
oldest running sequence is never preempted for a younger one, and every admitted request fits the
pool on its own, so the oldest always progresses: no deadlock.

A sliding-window model (`attention_window=W`) needs only the last W positions of a sequence: after
every step the blocks wholly before the next token's window go back to the pool (window.py), so a
windowed sequence holds O(W) blocks however long it runs. What "fits the pool on its own" means
changes with it: the blocks of one token's window, and a prompt chunk is cut so that its window and
its new positions fit the pool.

Between `begin()` and `commit()` the scheduler can `rollback()` to where it was: the engine runs
its steps as transactions (see Engine._begin).
"""

import collections
import dataclasses

from gpt.engine.blocks import BlockManager, block_hashes
from gpt.engine.requests import RequestHandle
from gpt.engine.window import first_visible_block, largest_fitting_chunk


class Sequence:
    """A request's tokens and where their keys and values live in the pool."""

    def __init__(self, handle: RequestHandle, block_size: int):
        self.handle = handle
        self.tokens = list(handle.prompt)  # prompt, then every generated token
        self.block_size = block_size
        self.computed = 0  # leading positions whose keys and values are in the pool
        self.table: list[int] = []  # block of positions [i * block_size, (i + 1) * block_size)
        # Leading table entries this sequence no longer holds: wholly before its window (a windowed
        # model only; see Scheduler._release_out_of_window). Always 0 without a window.
        self.dropped = 0
        self.hashes = block_hashes(self.tokens, block_size)  # of every full block of tokens
        self.registered = 0  # leading full blocks that the prefix cache knows
        self.admitted_at = -1
        # The JSON grammar's state (gpt.structured_output.JsonConstraint) when its tokens follow one.
        self.constraint = None
        # The other choices of its request (n > 1), waiting for this one's prompt: forked from it
        # (Scheduler.fork) when its prompt has run, sharing its blocks; empty once they are.
        self.forks: list[Sequence] = []
        # Speculative decoding (Engine(speculative=...)): the drafter and its adaptive length, made
        # when the sequence first decodes, and the tokens drafted for the next step, which run
        # after its pending token, each its own row of logits (Engine._step), and are proposed
        # anew before every step.
        self.drafter = None
        self.draft_length = None
        self.draft: list[int] = []

    @property
    def pending(self) -> int:
        """Tokens to run before the next token can be sampled."""
        return len(self.tokens) - self.computed

    @property
    def generated(self) -> int:
        """Tokens sampled so far (the engine's own count; the handle's follows as events arrive)."""
        return len(self.tokens) - len(self.handle.prompt)

    def save(self) -> tuple:
        """A state to `restore` (tokens and hashes only grow, so their lengths suffice)."""
        return (
            len(self.tokens),
            len(self.hashes),
            self.computed,
            list(self.table),
            self.dropped,
            self.registered,
            self.admitted_at,
            list(self.forks),
        )

    def restore(self, state: tuple) -> None:
        tokens, hashes, self.computed, self.table, self.dropped, self.registered, self.admitted_at, self.forks = state
        del self.tokens[tokens:], self.hashes[hashes:]

    def append(self, token: int) -> None:
        self.tokens.append(token)
        if len(self.tokens) % self.block_size == 0:
            previous = self.hashes[-1] if self.hashes else b""
            self.hashes += block_hashes(self.tokens, self.block_size, len(self.hashes), previous)


@dataclasses.dataclass
class Plan:
    """One step: sequences with the number of new tokens each runs, in batch order."""

    work: list[tuple[Sequence, int]]
    preempted: list[Sequence]
    prefix_hit_tokens: int = 0  # positions of admitted sequences found in the prefix cache
    admitted_tokens: int = 0  # tokens of the sequences admitted (prompts, with any recomputed tokens)


class Scheduler:
    """`window`: the model's attention_window (None: every position stays visible, and a sequence
    keeps all its blocks until it ends)."""

    def __init__(
        self,
        blocks: BlockManager,
        pool,
        block_size: int,
        max_batch_tokens: int,
        max_running: int,
        window: int | None = None,
    ):
        self.blocks = blocks
        self.pool = pool
        self.block_size = block_size
        self.window = window
        self.max_batch_tokens = max_batch_tokens
        self.max_running = max_running
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.running: list[Sequence] = []  # in admission order, oldest first
        self._admissions = 0
        self.preemptions = 0
        self.blocks_copied = 0  # copy-on-write copies of shared blocks
        self._saved: tuple | None = None  # what begin() saw
        self._touched: list[tuple[Sequence, tuple]] = []  # waiting sequences _admit changed, as they were
        self._copied_into: list[int] = []  # blocks pool.copy_block wrote since begin()

    # -- transactions ---------------------------------------------------------------------------

    def begin(self) -> None:
        """Saves the queues and the running sequences (a waiting one is saved when admission first
        touches it), and starts the block manager's journal."""
        self._saved = (
            list(self.waiting),
            list(self.running),
            [(seq, seq.save()) for seq in self.running],
            self._admissions,
            self.preemptions,
            self.blocks_copied,
        )
        self._touched = []
        self._copied_into = []
        self.blocks.begin()

    def commit(self) -> None:
        self._saved = None
        self._touched = []
        self.blocks.commit()

    def rollback(self) -> None:
        """Back to the state begin() saw. One thing cannot be undone: a copy-on-write copy may have
        written into a block that a sequence had given back and now holds again. Such a sequence
        is preempted (it recomputes its positions), as if the pool had needed its blocks."""
        waiting, running, states, self._admissions, self.preemptions, self.blocks_copied = self._saved
        self._saved = None
        self.blocks.rollback()
        for seq, state in reversed(states + self._touched):  # the earliest state of a sequence wins
            seq.restore(state)
        self._touched = []
        self.waiting.clear()
        self.waiting.extend(waiting)
        self.running[:] = running
        written = set(self._copied_into)
        for seq in [s for s in running if written.intersection(s.table[s.dropped :])]:
            self.running.remove(seq)
            self.release(seq)
            self.waiting.appendleft(seq)
            self.preemptions += 1

    def schedule(self) -> Plan:
        plan = Plan([], [])
        decoding = [s for s in self.running if s.pending == 1]
        prefilling = [s for s in self.running if s.pending > 1]
        for seq in decoding + prefilling:
            # Recounted each time: a preemption takes its victim's tokens out of the plan.
            budget = self.max_batch_tokens - sum(count for _, count in plan.work)
            if budget == 0:
                break
            if seq not in self.running:  # preempted for an older sequence meanwhile
                continue
            count = self._chunk(seq, min(seq.pending + len(seq.draft), budget))
            if count > seq.pending:
                # A draft only uses blocks that are free: it is cut shorter, never the cause of a
                # preemption (the pending token alone is reserved as without speculation).
                while count > seq.pending and self._blocks_needed(seq, count) > self.blocks.available:
                    count -= 1
            del seq.draft[max(count - seq.pending, 0) :]
            if self._reserve_or_preempt(seq, count, plan):
                plan.work.append((seq, count))
        self._admit(plan, self.max_batch_tokens - sum(count for _, count in plan.work))
        return plan

    def release(self, seq: Sequence) -> None:
        """Gives back every block that `seq` still holds (finished, cancelled or preempted)."""
        for block in seq.table[seq.dropped :]:
            self.blocks.release(block)
        seq.table = []
        seq.dropped = 0
        seq.computed = 0
        seq.registered = 0

    def fork(self, parent: Sequence, children: list[Sequence]) -> None:
        """Starts `children` (new sequences of the same prompt) where `parent` is, its prompt run and
        nothing sampled yet: each holds the parent's blocks too, and the first token that one of
        them writes into a shared block copies it first (_reserve's copy-on-write). So n choices
        of a request cost one prefill and the prompt's blocks once."""
        for child in children:
            if self._saved is not None:  # a rollback forgets the fork
                self._touched.append((child, child.save()))
            child.table = list(parent.table)
            child.dropped, child.computed, child.registered = parent.dropped, parent.computed, parent.registered
            for block in child.table[child.dropped :]:
                self.blocks.acquire(block)
            self._admissions += 1
            child.admitted_at = self._admissions
            self.running.append(child)
        parent.forks = []

    def finish(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.release(seq)

    def after_step(self, seq: Sequence, count: int) -> None:
        """Records that `count` more positions of `seq` are in the pool; their full blocks join the
        prefix cache. With a window, the blocks that no later token can see are given back. A
        speculative step ran more positions than `count` (the pending token, then its draft):
        those of the rejected draft tokens are forgotten here, their blocks given back."""
        seq.computed += count
        full = min(seq.computed // self.block_size, len(seq.hashes))
        size = self.block_size
        for index in range(seq.registered, full):
            parent = seq.hashes[index - 1] if index else b""
            tokens = tuple(seq.tokens[index * size : (index + 1) * size])
            self.blocks.register(seq.table[index], seq.hashes[index], parent, tokens)
        seq.registered = max(seq.registered, full)
        # The blocks past the last computed position held only a rejected draft's keys and values
        # (speculative decoding): they go back. Rows past `computed` in the block kept are written
        # over by the next step, and attention never reads past a token's own position.
        kept = max(-(-seq.computed // self.block_size), seq.dropped)
        for block in seq.table[kept:]:
            self.blocks.release(block)
        del seq.table[kept:]
        # After registering: a full block leaving the window still names its prefix, so it waits
        # in the prefix cache's LRU list (when no other sequence holds it) instead of being wiped.
        self._release_out_of_window(seq)

    # -- helpers --------------------------------------------------------------------------------

    def _release_out_of_window(self, seq: Sequence) -> None:
        """Gives back the blocks of `seq` wholly before the window of its next token (position
        `computed`): neither that token nor any later one reads them.

        Their table entries keep the ids they had, though the block may now hold another sequence's
        keys: step_batch checks that every entry up to a sequence's last position names a block of
        the pool, and the paged-attention lowering (PagedAttentionLowering.cpp, tokenHeads) reads a
        token's entries only from its first visible block, max(p + 1 - W, 0) // S, on, and writes
        only the entries of new positions, which are held. A step's tokens are at positions >=
        `computed`, so no stale entry is ever read or written."""
        dead = min(first_visible_block(seq.computed, self.window, self.block_size), len(seq.table))
        for block in seq.table[seq.dropped : dead]:
            self.blocks.release(block)
        seq.dropped = max(seq.dropped, dead)

    def _chunk(self, seq: Sequence, count: int) -> int:
        """`count` new tokens of `seq`, cut for a windowed model so that the step's blocks (its
        first token's window up to its last token's block) fit the whole pool: the oldest sequence,
        alone, can then always run its chunk."""
        return largest_fitting_chunk(seq.computed, count, self.window, self.block_size, self.blocks.num_blocks)

    def _blocks_needed(self, seq: Sequence, count: int) -> int:
        """New blocks for running `count` more tokens of `seq`: the table's growth, plus a copy of
        the block the first new token lands in when another sequence shares it (copy-on-write)."""
        end = seq.computed + count
        needed = max(0, -(-end // self.block_size) - len(seq.table))
        first = seq.computed // self.block_size
        if first < len(seq.table) and self.blocks.refcount(seq.table[first]) > 1:
            needed += 1
        return needed

    def _reserve(self, seq: Sequence, count: int) -> bool:
        if self._blocks_needed(seq, count) > self.blocks.available:
            return False
        first = seq.computed // self.block_size
        if first < len(seq.table) and self.blocks.refcount(seq.table[first]) > 1:
            shared = seq.table[first]
            copy = self.blocks.allocate()
            self._copied_into.append(copy)
            self.pool.copy_block(shared, copy)
            self.blocks_copied += 1
            self.blocks.release(shared)
            seq.table[first] = copy
            seq.registered = min(seq.registered, first)
        while len(seq.table) * self.block_size < seq.computed + count:
            seq.table.append(self.blocks.allocate())
        return True

    def _reserve_or_preempt(self, seq: Sequence, count: int, plan: Plan) -> bool:
        while not self._reserve(seq, count):
            younger = [s for s in self.running if s.admitted_at > seq.admitted_at]
            victim = younger[-1] if younger else seq
            self._preempt(victim, plan)
            if victim is seq:
                return False
        return True

    def _preempt(self, victim: Sequence, plan: Plan) -> None:
        plan.work = [(s, c) for s, c in plan.work if s is not victim]
        self.running.remove(victim)
        self.release(victim)
        self.waiting.appendleft(victim)
        plan.preempted.append(victim)
        self.preemptions += 1

    def _admit(self, plan: Plan, budget: int) -> None:
        """Admits waiting sequences in order while the budget, the running limit and the pool allow.
        A request whose next prompt block another sequence is computing right now waits a step,
        so that it reuses that block instead of computing the same prefix again."""
        being_computed = {
            s.hashes[i] for s, _ in plan.work for i in range(s.computed // self.block_size, len(s.hashes))
        }
        for seq in list(self.waiting):
            if budget == 0 or len(self.running) >= self.max_running:
                return
            if self._saved is not None:
                self._touched.append((seq, seq.save()))
            hits = self._match_prefix(seq)
            matched = len(hits)
            if matched < len(seq.hashes) and seq.hashes[matched] in being_computed:
                continue
            seq.table = list(hits)
            seq.registered = matched
            # The last token always runs: its logits are what the next token is sampled from.
            seq.computed = min(matched * self.block_size, len(seq.tokens) - 1)
            # Where the prompt diverges inside the next block, a cached block that agrees up to
            # there is copied (copy-on-write at the first divergent block), and only the rest runs.
            source, shared = self._partial_match(seq, matched)
            seq.computed += shared
            # A windowed sequence takes only the hits its window reads; those before it stay in the
            # table unheld, like blocks it has given back (see _release_out_of_window).
            seq.dropped = min(first_visible_block(seq.computed, self.window, self.block_size), matched)
            for block in hits[seq.dropped :]:
                self.blocks.acquire(block)
            if source is not None:
                self.blocks.acquire(source)  # not evicted by the allocations below
            count = self._chunk(seq, min(seq.pending, budget))
            # Headroom of one block per running sequence, so that admitting does not at once
            # force the running ones into preemption.
            headroom = len(self.running)
            if self._blocks_needed(seq, count) + headroom > self.blocks.available or not self._reserve(seq, count):
                if source is not None:
                    self.blocks.release(source)
                self.release(seq)
                return
            if source is not None:
                self._copied_into.append(seq.table[matched])
                self.pool.copy_block(source, seq.table[matched])
                self.blocks_copied += 1
                self.blocks.release(source)
            self.waiting.remove(seq)
            self._admissions += 1
            seq.admitted_at = self._admissions
            self.running.append(seq)
            plan.work.append((seq, count))
            plan.prefix_hit_tokens += seq.computed
            plan.admitted_tokens += len(seq.tokens)
            being_computed.update(seq.hashes[seq.computed // self.block_size :])
            budget -= count

    def _partial_match(self, seq: Sequence, matched: int) -> tuple[int | None, int]:
        """A cached full block to copy the start of block `matched` of `seq` from, and how many of
        its positions it gives (never the last token, which must run)."""
        first = matched * self.block_size
        end = min(first + self.block_size, len(seq.tokens) - 1)
        if end <= first:
            return None, 0
        parent = seq.hashes[matched - 1] if matched else b""
        return self.blocks.longest_partial_match(parent, seq.tokens[first:end])

    def _match_prefix(self, seq: Sequence) -> list[int]:
        hits = []
        for block_hash in seq.hashes:
            block = self.blocks.lookup(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits
