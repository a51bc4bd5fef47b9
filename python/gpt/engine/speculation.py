"""The engine's speculative decoding: per-sequence drafters, the step's rows, their verification.

Before each step, every decoding sequence may get a draft of k tokens (k adapted per sequence by
AdaptiveDraftLength) from its own drafter: prompt lookup (gpt/speculative.py's NgramDrafter), or a
draft model with the target's tokenizer, which drafts for all of them at once (engine/draft_batch.py:
the draft's keys and values in a paged pool of its own, each sequence's blocks following its
accepted text and freed with it; a batched step of the draft model per drafted position). The
batched step then runs its pending token and the draft as k + 1 rows, each given to the compiled
step as a sequence of its own (count 1, the same block table, consecutive positions): the step
returns the logits of each sequence's last token, so this is how every drafted row's logits come
back from the existing batched entry, with no entry of its own. Such a step pads its rows to an
odd count (block_pool.step_batch_exact_rows), where every row's bits are a lone decode's, so
greedy tokens are those of plain decoding. The rows are accepted in order by the standard rule
(speculative.accepts); the rejected rows' keys and values stay in their slots, past the sequence's
length, to be written over, and blocks holding only them go back (Scheduler.after_step).
"""

from collections.abc import Callable, Iterable

import numpy as np

from gpt.engine.draft_batch import DraftModelBatch, PooledDrafter
from gpt.engine.scheduler import Sequence
from gpt.speculative import AdaptiveDraftLength, DraftModelDrafter, NgramDrafter, check_draft_tokens


class Speculation:
    """How an engine speculates. `speculative`: "ngram" (prompt lookup) or a gpt.GPT draft model
    with the same vocabulary as `model` (checked here, so a mismatch is refused when the engine is
    made); `draft_tokens`: the most tokens drafted per sequence and step (default 8, at most 64).
    A draft model keeps its keys and values in a pool of `num_blocks` blocks of `block_size`
    positions (the engine's: as many positions as the target's pool). With `max_batch`, no
    sequence drafts while more than that many decode."""

    def __init__(
        self, model, speculative, draft_tokens: int | None, num_blocks: int, block_size: int, max_batch: int | None
    ):
        if isinstance(speculative, str):
            if speculative != "ngram":
                raise ValueError(
                    f"speculative must be None, 'ngram' (prompt lookup) or a gpt.GPT draft model, got {speculative!r}"
                )
        elif hasattr(speculative, "generate"):  # a gpt.GPT, as generate() takes for a draft model
            DraftModelDrafter(speculative, model)  # refuses another vocabulary, a window, the model itself
        else:
            raise TypeError(
                f"speculative must be None, 'ngram' or a gpt.GPT draft model, got {type(speculative).__name__}"
            )
        self._model = model
        self._speculative = speculative
        self.draft_tokens = check_draft_tokens(draft_tokens)
        self.max_batch = max_batch
        self._batch = None if isinstance(speculative, str) else DraftModelBatch(speculative, num_blocks, block_size)

    def new_drafter(self, max_len: int):
        """A drafter for one sequence of at most `max_len` positions (the tests swap in their own)."""
        if self._batch is None:
            return NgramDrafter()
        return self._batch.drafter(max_len)

    def propose(self, running: Iterable[Sequence]) -> dict[Sequence, Exception]:
        """Drafts the next tokens of every decoding sequence: at most draft_tokens, as many as its
        AdaptiveDraftLength says, never past its max_tokens; none while more than max_batch
        sequences decode. A request with a grammar, or with choices still to fork from it, decodes
        plainly. The scheduler may cut a draft short
        (budget, free blocks). Returns the sequences whose drafter raised, with the error."""
        failed = {}
        pooled = []  # (seq, (drafter, tokens, count)): drafted together, after the loop
        for seq in running:
            seq.draft = []
        decoding = [seq for seq in running if seq.pending == 1 and seq.generated]
        if self.max_batch is not None and len(decoding) > self.max_batch:
            return failed
        for seq in decoding:
            if seq.forks or seq.constraint is not None:
                continue
            params = seq.handle.params
            if seq.drafter is None:
                seq.drafter = self.new_drafter(len(seq.handle.prompt) + params.max_tokens)
                seq.draft_length = AdaptiveDraftLength(self.draft_tokens)
            # A draft of every token still to come, all accepted, ends the request without a bonus row.
            want = min(seq.draft_length.next(), params.max_tokens - seq.generated)
            if want > 0 and isinstance(seq.drafter, PooledDrafter) and seq.drafter.batch is self._batch:
                pooled.append((seq, (seq.drafter, seq.tokens, want)))
            elif want > 0:
                try:
                    seq.draft = [int(t) for t in seq.drafter.propose(seq.tokens, want)]
                except Exception as error:  # a drafter's failure fails its request, not the engine
                    failed[seq] = error
        if pooled:
            try:
                drafts = self._batch.propose([request for _, request in pooled])
            except Exception as error:  # a draft model's failure fails the requests it drafted for
                return failed | {seq: error for seq, _ in pooled}
            for seq, (drafter, _, _) in pooled:
                seq.draft = drafts.get(drafter, [])
        return failed


def step_arrays(work: list[tuple[Sequence, int]], drafted: dict[Sequence, list[int]]):
    """The batched step's (ids, counts, starts, tables) for a plan's work, and where each work
    item's rows start in the logits: a speculating sequence runs as one entry per row (its pending
    token, then its draft), so that every row's logits come back."""
    ids, counts, starts, tables, first_rows = [], [], [], [], []
    for seq, count in work:
        first_rows.append(len(counts))
        pending = seq.tokens[seq.computed : seq.computed + min(count, seq.pending)]
        if seq in drafted:
            rows = pending + drafted[seq]
            ids += rows
            counts += [1] * len(rows)
            starts += range(seq.computed, seq.computed + len(rows))
            tables += [seq.table] * len(rows)
        else:
            ids += pending
            counts.append(count)
            starts.append(seq.computed)
            tables.append(seq.table)
    width = max(len(table) for table in tables)
    table_array = np.zeros((len(tables), width), np.int64)
    for row, table in enumerate(tables):
        table_array[row, : len(table)] = table
    arrays = (np.array(ids, np.int64), np.array(counts, np.int64), np.array(starts, np.int64), table_array)
    return arrays, first_rows


def verify(seq: Sequence, draft: list[int], rows: np.ndarray, outcome: Callable) -> tuple[int, list]:
    """The outcomes of a speculating sequence's rows (`rows[i]`: the logits after its pending
    token and draft[:i]): draft[i] accepted or replaced by the standard rule, in order, up to the
    first rejection (its replacement the last outcome), the request's end, or the row after the
    whole draft (a token of its own). `outcome(logits, proposed=, produced=)`: outcome.outcome()
    for this sequence. Returns (drafted tokens accepted, the outcomes); the adaptive draft length
    learns from it."""
    outcomes, taken = [], 0
    for i in range(len(draft) + 1):
        proposed = draft[i] if i < len(draft) else None
        result = outcome(rows[i], proposed=proposed, produced=i)
        outcomes.append(result)
        token, reason = result[1], result[4]
        if proposed is None or token != proposed:
            break
        taken += 1
        if reason is not None:
            break
    seq.draft_length.update(len(draft), taken)
    return taken, outcomes
