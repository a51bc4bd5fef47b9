"""Speculative decoding for one sequence: drafters (prompt lookup, a draft model) and the loop that
verifies their drafts in one cached step of the target model and rolls the rejected suffix back."""

import dataclasses
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from gpt.cache import KVCache
from gpt.sampling import allowed_probabilities, sample

# The longest n-gram prompt lookup matches: HF transformers' prompt_lookup (max_matching_ngram_size
# 2 by default) and llama.cpp's ngram speculation (3) look back this far; longer matches add
# little on copied text and cost a lookup per length.
MAX_NGRAM = 3
# The shortest: a single token recurs all over free text (" the", ","), and what followed it once
# rarely follows it again, so 1-gram drafts are mostly rejected verification rows (measured with
# SmolLM2 on free text: 1 of 28 drafted tokens accepted); two tokens in a row are evidence of a copy.
MIN_NGRAM = 2
# Draft tokens per verification at most when the caller does not say: HF's prompt_lookup_num_tokens
# is 10, llama.cpp's --draft-max 16; on a CPU the verification step's rows are not free (each
# costs about an eighth of a decode step of SmolLM2 at 9 rows), so fewer. Prompt lookup drafts
# this many only when the match behind the draft is as long (NgramDrafter); 16 lost more rows where
# a copy ends than it saved on long copies (tools/bench/bench_speculative.py).
DEFAULT_DRAFT_TOKENS = 8
# Up to this many rows, every row of a verification step has decode's logits to the bit whatever
# the row count: the step's attention takes one query at a time, as decode does
# (cc/conversion/AttentionLowering.cpp, kMaxOneByOneStepQueries), and a matmul's register tile of
# several rows sums each output in decode's order. Past it the attention's query blocks of an even
# count sum q . k^T as a matmul, in another order: there only an odd count (blocks of one query)
# is exact.
EXACT_ROWS_ANY_COUNT = 16
# After a draft is rejected outright, plain decoding runs for a while before the next try: this
# many tokens at first, doubling with every consecutive failure up to the cap. A try on text that
# copies nothing costs one verification of three rows, so the cap keeps that under 1% of the steps.
FIRST_BACKOFF, MAX_BACKOFF = 2, 128


@dataclasses.dataclass(frozen=True)
class SpeculationStats:
    """What speculation did in one generate() run (GPT.last_speculation): tokens drafted, those of
    them accepted (each one a token that cost no decode step of its own), and the verification
    steps that checked them."""

    drafted_tokens: int
    accepted_tokens: int
    verify_steps: int


class NgramDrafter:
    """Prompt lookup: the last n tokens (n from MAX_NGRAM down to MIN_NGRAM) found earlier in the prompt or
    the text so far, and the tokens that followed there proposed as the draft. The most recent
    earlier occurrence wins: in text being copied it is the one the copy follows. The index of
    n-grams grows with the sequence, so a lookup costs O(MAX_NGRAM), not a scan.

    A draft is as long as the match behind it (rounded up to even): the tokens before the n-gram
    that also agree with the text's end count too, so a copy that has run for 20 tokens drafts
    the caller's whole count, and a 2-gram that recurs by chance in free text drafts 2. A verified
    row costs a quarter to a third of a decode step (SmolLM2-135M as shipped, on this CPU), and every row
    drafted past the point where the answer leaves the prompt is paid for: on the edit task of
    tools/bench/bench_speculative.py drafts of 8 verified 48 rows for 32 accepted tokens, drafts sized
    by the match 38 (2.06x plain decoding where they were 1.85x, 1 thread, CPU time, under load)."""

    def __init__(self, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM):
        self._max_ngram = max_ngram
        self._min_ngram = min_ngram
        # n-gram -> the position just past its most recent occurrence (where its continuation starts).
        self._ends: dict[tuple[int, ...], int] = {}
        self._indexed = 0  # n-grams ending before this position are in _ends
        self._tokens: list[int] = []

    def propose(self, tokens: Sequence[int], count: int) -> list[int]:
        """Up to `count` tokens that may follow `tokens` (which only ever grows between calls of
        one generation); [] when no n-gram of its end occurred before."""
        if count <= 0:
            return []
        known = len(self._tokens)
        if len(tokens) < known or (known and (tokens[0] != self._tokens[0] or tokens[known - 1] != self._tokens[-1])):
            self.__init__(self._max_ngram, self._min_ngram)  # another sequence: start over
        self._tokens.extend(int(t) for t in tokens[len(self._tokens) :])
        seq = self._tokens
        # Index every n-gram that ends before the last position: the suffix itself is what is looked up.
        for end in range(max(self._indexed, 1), len(seq)):
            for n in range(self._min_ngram, min(self._max_ngram, end) + 1):
                self._ends[tuple(seq[end - n : end])] = end
        self._indexed = max(self._indexed, len(seq))
        for n in range(min(self._max_ngram, len(seq)), self._min_ngram - 1, -1):
            start = self._ends.get(tuple(seq[len(seq) - n :]))
            if start is not None:
                matched = self._match_length(start, n, count)
                return seq[start : start + min(count, matched + matched % 2)]
        return []

    def _match_length(self, start: int, n: int, count: int) -> int:
        """How many tokens before `start` equal the text's last ones (n at least: the n-gram
        found), counted up to `count`, the most a draft may use."""
        seq = self._tokens
        end = len(seq)
        matched = n
        while matched < count and start - matched > 0 and seq[start - matched - 1] == seq[end - matched - 1]:
            matched += 1
        return matched


class DraftModelDrafter:
    """A smaller GPT with the same tokenizer drafts greedily against a cache of its own, which
    follows the accepted text: what it drafted and the target rejected is rolled back."""

    def __init__(self, draft, target, max_len: int | None = None):
        # The target is a gpt.GPT (GPT.generate passes itself); its class stands for gpt.model's,
        # which imports this module.
        if not isinstance(draft, type(target)):
            raise TypeError(f"speculative must be 'ngram' or a gpt.GPT draft model, got {type(draft).__name__}")
        if draft is target:
            raise ValueError("speculative: the draft model must be another model than the one generating")
        if draft.config.attention_window is not None:
            # Its rolling cache overwrites the slots of positions still in the window: no rollback.
            raise ValueError("speculative: a draft model with an attention_window cannot roll its drafts back")
        if draft.config.vocab_size != target.config.vocab_size:
            raise ValueError(
                f"speculative: the draft model's vocab_size {draft.config.vocab_size} differs from the target's "
                f"{target.config.vocab_size}; a draft model must share the target's tokenizer"
            )
        self._draft = draft
        # Positions the cache holds: the draft's context, or fewer when the caller knows how long
        # its sequence can grow (the engine: a cache per sequence, sized to its request).
        self._limit = draft.config.block_size if max_len is None else min(max_len, draft.config.block_size)
        self._cache: KVCache | None = None
        self._cached: list[int] = []  # the tokens whose keys and values the cache holds

    def propose(self, tokens: Sequence[int], count: int) -> list[int]:
        draft = self._draft
        limit = self._limit
        count = min(count, limit - len(tokens))
        if count <= 0:
            return []
        if self._cache is None:
            self._cache = draft.new_cache(limit)
        tokens = [int(t) for t in tokens]
        common = 0
        for mine, theirs in zip(self._cached, tokens, strict=False):
            if mine != theirs:
                break
            common += 1
        common = min(common, len(tokens) - 1)  # at least the last token is fed, for its logits
        rewind(self._cache, common)
        # What the cache surely holds if the steps below raise: the next call rewinds no further.
        self._cached = tokens[:common]
        logits = draft.prefill(np.asarray(tokens[common:], dtype=np.int64), self._cache)
        self._cached = tokens
        proposed: list[int] = []
        while True:
            token = int(np.argmax(logits))
            proposed.append(token)
            if len(proposed) == count:
                return proposed
            logits = draft.decode(token, self._cache)
            self._cached = self._cached + [token]


def drafter_for(speculative, model):
    """The drafter `speculative` names: "ngram" (prompt lookup) or a draft gpt.GPT."""
    if isinstance(speculative, str):
        if speculative != "ngram":
            raise ValueError(f"speculative must be 'ngram' or a gpt.GPT draft model, got {speculative!r}")
        return NgramDrafter()
    return DraftModelDrafter(speculative, model)


def check_draft_tokens(draft_tokens) -> int:
    if draft_tokens is None:
        return DEFAULT_DRAFT_TOKENS
    if isinstance(draft_tokens, bool) or not isinstance(draft_tokens, (int, np.integer)) or not 1 <= draft_tokens <= 64:
        raise ValueError(f"draft_tokens must be an int in [1, 64], got {draft_tokens!r}")
    return int(draft_tokens)


def rewind(cache: KVCache, length: int) -> None:
    """Sets the cache's length back to `length`: the positions past it are forgotten, and the next
    step writes over them (attention reads only positions below the length it is given)."""

    def set_length() -> None:
        if not 0 <= length <= cache._length:
            raise ValueError(f"cannot rewind a KV cache of {cache._length} positions to {length}")
        cache._length = length

    cache._claim.run(set_length)


class AdaptiveDraftLength:
    """How many tokens to draft next, an even count (the engine's batched step is exact in an odd
    number of rows; speculative_tokens shapes its own rows with verification_rows): 2 at first,
    doubled up to the maximum while whole drafts are accepted, cut to what was accepted when part
    of one is, and when a draft is rejected at its first token, halved; below 2, plain decoding
    for a backoff that doubles with every consecutive failure. A failed try costs a verification
    of 3 rows (about 1.25 decode steps of SmolLM2-135M as shipped, in 3-row tiles), so text which copies
    nothing decodes (almost) as if speculation were off."""

    def __init__(self, maximum: int):
        self.maximum = maximum
        self.length = min(2, maximum)
        self._backoff = FIRST_BACKOFF
        self._wait = 0

    def next(self) -> int:
        if self._wait > 0:
            self._wait -= 1
            return 0
        return max(self.length, 1)

    def update(self, drafted: int, accepted: int) -> None:
        if accepted == drafted:
            self.length = min(self.maximum, max(self.length, 1) * 2)
            self._backoff = FIRST_BACKOFF
        elif accepted > 0:
            self.length = min(self.maximum, accepted + accepted % 2)
            self._backoff = FIRST_BACKOFF
        else:
            self.length //= 2
            if self.length < 2:
                self.length = min(2, self.maximum)
                self._wait = self._backoff
                self._backoff = min(self._backoff * 2, MAX_BACKOFF)


def verification_rows(rows: int, most: int) -> int:
    """The row count to verify `rows` rows (the last token and its draft) in, at most `most`: up
    to EXACT_ROWS_ANY_COUNT, `rows` itself where the step's block-quantized matmuls tile it with
    several rows at once (cc/codegen/cpu/SelectRegisterTiles.cpp: 4, 3 or 2 rows; even and
    multiple-of-3 counts), else one more or one fewer row: a count like 5 or 7 runs one-row tiles,
    which unpack every weight word again for each row (a row cost 0.2 of a decode step of SmolLM2-135M
    as shipped where it costs about 0.1 in a tile). Past it an odd count, whose every row is exact."""
    if rows <= EXACT_ROWS_ANY_COUNT:
        if rows <= 3 or rows % 2 == 0 or rows % 3 == 0:
            return rows
        return rows + 1 if rows < most and rows + 1 <= EXACT_ROWS_ANY_COUNT else rows - 1
    if rows % 2:
        return rows
    return rows + 1 if rows < most else rows - 1


def accepts(
    logits: np.ndarray, token: int, temperature: float, top_k, top_p, rng: np.random.Generator
) -> tuple[bool, int]:
    """The standard accept/reject rule for a draft token drawn from a point mass (prompt lookup, a
    greedy draft model): (True, token) with probability p(token) under the target's sampling
    distribution p, else (False, a draw from p with `token` removed), which together is a draw
    from p. Greedy (temperature 0): accepted iff it is the argmax, else the argmax."""
    if temperature == 0:
        best = int(np.argmax(logits))
        return best == token, best
    probs = allowed_probabilities(logits, temperature, top_k, top_p)
    if rng.random() < probs[token]:
        return True, token
    residual = probs.copy()
    residual[token] = 0.0
    total = residual.sum()
    if total <= 0.0:  # p(token) == 1 within rounding: nothing else can be drawn
        return True, token
    return False, int(rng.choice(residual.size, p=residual / total))


def speculative_tokens(
    model,
    prompt: np.ndarray,
    max_new_tokens: int,
    temperature: float,
    top_k,
    top_p,
    rng: np.random.Generator,
    stop_ids: frozenset[int],
    drafter,
    draft_tokens: int,
    cache: KVCache,
    timed: Callable,
    stats: dict,
    speculation: dict,
) -> Iterator[int]:
    """generate()'s loop with speculation: the same tokens, stops and counts as plain decoding
    (greedy: the same tokens; sampled: the same distribution), drafts verified `draft_tokens` at a
    time (adaptively fewer; the rows shaped by verification_rows) in one step of the target that
    returns every position's logits."""
    vocab = model.config.vocab_size
    logits = timed("prompt_seconds", model.prefill, prompt, cache)
    tokens = [int(t) for t in prompt]
    produced = 0
    chosen: int | None = None  # a token the last verification drew (a rejected draft's replacement)
    length = AdaptiveDraftLength(draft_tokens)
    while True:
        token = chosen if chosen is not None else sample(logits, temperature, top_k, top_p, rng)
        chosen = None
        if token in stop_ids:
            return
        stats["generated_tokens"] += 1
        produced += 1
        yield token
        if produced == max_new_tokens:
            return
        tokens.append(token)
        offset = len(cache)  # where `token` goes
        # Drafts never run past max_new_tokens, nor past the cache (a rolling cache: never wrapped).
        room = (cache.slots if cache.rolling else cache.max_len) - offset - 1
        want = min(length.next(), max_new_tokens - produced, room)
        draft = drafter.propose(tokens, want) if want > 0 else []
        drafted = len(draft)  # the drafter's own tokens, before any filler
        if draft:
            rows = verification_rows(len(draft) + 1, room + 1)
            if rows - 1 > len(draft) and isinstance(drafter, NgramDrafter):
                # Prompt lookup's next token costs a slice, and where the match runs on it is a
                # real guess; a draft model's would cost another of its steps.
                draft = drafter.propose(tokens, rows - 1)
            # A filler guess (the last token again) or one token fewer, to make the rows a count
            # that verification runs quickly and exactly.
            draft = (draft + [draft[-1]] * (rows - 1 - len(draft)))[: rows - 1]
            drafted = min(drafted, len(draft))
        if not draft:
            logits = timed("generate_seconds", model.decode, token, cache)
            continue
        rows = timed("generate_seconds", model._verify, np.asarray([token] + draft, dtype=np.int64), cache)
        speculation["drafted_tokens"] += len(draft)
        speculation["verify_steps"] += 1
        accepted = 0
        for i, proposed in enumerate(draft):
            ok, drawn = accepts(rows[i, :vocab], proposed, temperature, top_k, top_p, rng)
            if not ok:
                chosen = drawn
                break
            accepted += 1
            if proposed in stop_ids:
                return
            stats["generated_tokens"] += 1
            speculation["accepted_tokens"] += 1
            produced += 1
            yield proposed
            if produced == max_new_tokens:
                return
            tokens.append(proposed)
        # Keep `token` and the accepted drafts; the rejected suffix's positions are written over next.
        rewind(cache, offset + 1 + accepted)
        # The drafter's tokens decide the next length: a filler guess rejected after a whole
        # accepted draft must not cut the length back to what was accepted.
        length.update(drafted, min(accepted, drafted))
        if chosen is None:
            logits = rows[len(draft), :vocab]
