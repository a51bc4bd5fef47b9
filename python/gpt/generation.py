"""GPT.generate(), as a mixin GPT inherits: its overloads and argument checks, the decode loop
(plain, cached, speculative or JSON-constrained), and the GenerationStats record of a run."""

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal, Self, overload

import numpy as np

from gpt.config import GPTConfig
from gpt.sampling import check_sampling_args, sample
from gpt.speculative import SpeculationStats, check_draft_tokens, speculative_tokens
from gpt.speculative import drafter_for as speculative_drafter
from gpt.structured_output import json_schema_grammar
from gpt.tokenizer import ByteTokenizer, HFTokenizer
from gpt_runtime.timing import step_timer


@dataclasses.dataclass(frozen=True)
class GenerationStats:
    """Token counts and timings of one generate() run. The seconds exclude compilation:
    `compile_seconds` is the time the run waited for programs to compile (a program compiling on
    another thread meanwhile, as the decode step does during a first prefill, counts only for
    what the run waited for it); `prompt_seconds` is the prefill (or the first forward pass
    without the cache), `generate_seconds` every later step."""

    prompt_tokens: int
    generated_tokens: int
    prompt_seconds: float
    generate_seconds: float
    compile_seconds: float


class GenerationMixin:
    """generate() and the records of its last run (last_generation, last_speculation), inherited by
    gpt.GPT, whose steps (forward, new_cache, prefill, decode, verify) they run. This module never
    imports gpt.model: GPT imports it, as transformers' models inherit GenerationMixin."""

    # Set by GPT's constructor and its loaders (gpt/loading.py).
    _config: GPTConfig
    _tokenizer: HFTokenizer | None
    _end_of_generation: frozenset[int]
    # The counters of the generate() run in progress or last run; None before the first.
    _generation: dict[str, Any] | None
    # The speculation counters of that run (SpeculationStats); None when it did not speculate.
    _speculation: dict[str, int] | None

    @overload
    def generate(
        self,
        ids: Sequence[int],
        max_new_tokens: int,
        temperature: float = ...,
        top_k: int | None = ...,
        top_p: float | None = ...,
        seed: int | None = ...,
        use_cache: bool = ...,
        stop: Iterable[int] | None = ...,
        stream: Literal[False] = ...,
        *,
        stop_at_eos: bool = ...,
        speculative: "str | Self | None" = ...,
        draft_tokens: int | None = ...,
        json_schema: dict | bool | None = ...,
    ) -> list[int]: ...

    @overload
    def generate(
        self,
        ids: Sequence[int],
        max_new_tokens: int,
        temperature: float = ...,
        top_k: int | None = ...,
        top_p: float | None = ...,
        seed: int | None = ...,
        use_cache: bool = ...,
        stop: Iterable[int] | None = ...,
        *,
        stream: Literal[True],
        stop_at_eos: bool = ...,
        speculative: "str | Self | None" = ...,
        draft_tokens: int | None = ...,
        json_schema: dict | bool | None = ...,
    ) -> Iterator[int]: ...

    @overload
    def generate(
        self,
        ids: Sequence[int],
        max_new_tokens: int,
        temperature: float = ...,
        top_k: int | None = ...,
        top_p: float | None = ...,
        seed: int | None = ...,
        use_cache: bool = ...,
        stop: Iterable[int] | None = ...,
        stream: bool = ...,
        *,
        stop_at_eos: bool = ...,
        speculative: "str | Self | None" = ...,
        draft_tokens: int | None = ...,
        json_schema: dict | bool | None = ...,
    ) -> list[int] | Iterator[int]: ...

    def generate(
        self,
        ids: Sequence[int],
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        use_cache: bool = True,
        stop: Iterable[int] | None = None,
        stream: bool = False,
        *,
        stop_at_eos: bool = True,
        speculative: "str | Self | None" = None,
        draft_tokens: int | None = None,
        json_schema: dict | bool | None = None,
    ) -> list[int] | Iterator[int]:
        """Continues `ids` by up to `max_new_tokens` tokens and returns the new ones (not the prompt);
        an iterator over the same tokens when `stream=True`. temperature 0 is greedy; otherwise
        tokens are drawn from softmax(logits / temperature) limited to `top_k` tokens and to the
        `top_p` nucleus, with a generator seeded by `seed`. A token in `stop` ends generation and
        is not returned, and so does one of the model's `end_of_generation` tokens (its EOS, or an
        end of turn such as <|im_end|>) unless `stop_at_eos=False`. `use_cache=False` recomputes
        the whole sequence every step (the reference the cache is measured against). Arguments are
        checked before anything runs.

        `speculative="ngram"` (prompt lookup: the tokens that followed the text's last n-gram where
        it occurred before) or a draft `gpt.GPT` with the same vocabulary drafts up to
        `draft_tokens` tokens (default 8), which one cached step of this model verifies together
        (gpt/speculative.py); fewer are drafted while drafts are rejected. Greedy decoding gives the
        tokens plain decoding gives; sampling keeps its distribution (the standard accept/reject
        rule), though not the same draws for a seed. Stops, EOS, max_new_tokens and stream behave
        as without it.

        `json_schema` (a JSON schema dict, or True for any JSON object) constrains the tokens to
        JSON text that the schema accepts (gpt/structured_output.py: the logits of every other
        token are -inf before sampling), and generation ends when that text is complete; the text
        is cut short only by max_new_tokens. It needs the model's tokenizer, and does not combine
        with `speculative`. ValueError names a schema that is not a JSON object, too large, or
        refused by the grammar library."""
        prompt = self._check_ids(ids)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        unbounded = use_cache and self._config.unbounded_positions
        if len(prompt) + max_new_tokens > self._config.block_size and not unbounded:
            raise ValueError(
                f"{len(prompt)} prompt tokens + max_new_tokens={max_new_tokens} exceed "
                f"block_size={self._config.block_size}"
                + (
                    " (past block_size, a windowed rope model generates with use_cache=True only)"
                    if self._config.unbounded_positions
                    else ""
                )
            )
        check_sampling_args(temperature, top_k, top_p)
        stop_ids = frozenset(int(t) for t in self._check_ids(list(stop))) if stop else frozenset()
        if not isinstance(stop_at_eos, bool):
            raise TypeError(f"stop_at_eos must be a bool, got {type(stop_at_eos).__name__}")
        if stop_at_eos:
            stop_ids |= self._end_of_generation
        drafter = None
        if speculative is not None:
            if not use_cache:
                raise ValueError("speculative decoding verifies drafts against the KV cache: use_cache must be True")
            drafter = speculative_drafter(speculative, self)
            draft_tokens = check_draft_tokens(draft_tokens)
        elif draft_tokens is not None:
            raise ValueError("draft_tokens is given without speculative='ngram' or a draft model")
        constraint = None
        if json_schema is not None and json_schema is not False:
            constraint = self._json_constraint(json_schema, stop_ids, speculative)
        tokens = self._generate(
            prompt,
            int(max_new_tokens),
            float(temperature),
            top_k,
            top_p,
            np.random.default_rng(seed),
            use_cache,
            stop_ids,
            drafter,
            draft_tokens,
            constraint,
        )
        return tokens if stream else list(tokens)

    def _json_constraint(self, json_schema, stop_ids: frozenset[int], speculative):
        """generate()'s constraint for `json_schema`, its grammar ending at `stop_ids`."""
        if speculative is not None:
            # Drafts would need the grammar's mask at every drafted position, and a rollback of the
            # grammar with the KV cache: not built, so refused rather than left unconstrained.
            raise ValueError("json_schema and speculative cannot be combined: give one of them")
        tokenizer = self._tokenizer
        if tokenizer is None and self._config.vocab_size == 256:
            tokenizer = ByteTokenizer()
        if tokenizer is None:
            raise ValueError(
                "json_schema needs the model's tokenizer (to know each token's text), and this model has none"
            )
        grammar = json_schema_grammar(tokenizer, json_schema, vocab_size=self._config.vocab_size, end_ids=stop_ids)
        return grammar.start()

    @property
    def end_of_generation(self) -> frozenset[int]:
        """The token ids that end generate() unless it is called with `stop_at_eos=False`: a GGUF
        file's EOS, EOT and end-of-turn tokens (such as <|im_end|>: its tokenizer's
        `end_of_generation`, which `python -m gpt generate` and `chat` stop at), or a HF Llama or
        Qwen2 directory's eos_token_id (generation_config.json and config.json, as transformers'
        generate stops there). Empty otherwise: GPT-2 checkpoints (their eos_token_id is the
        <|endoftext|> between documents, a newline in the embedded byte-level model, and GPT-2
        text is continued past it) and models made from a config or weights."""
        return self._end_of_generation

    @property
    def last_speculation(self) -> SpeculationStats | None:
        """What speculative decoding did in the last generate() run (so far, while a stream is being
        consumed): tokens drafted, accepted and verification steps; None before the first run and
        after a run without `speculative`."""
        return None if self._speculation is None else SpeculationStats(**self._speculation)

    @property
    def last_generation(self) -> GenerationStats | None:
        """Token counts and timings of the last generate() run (so far, while a stream is being
        consumed); None before the first generate()."""
        return None if self._generation is None else GenerationStats(**self._generation)

    def _generation_cache_len(self, needed: int) -> int:
        """Cache capacity for a generation of `needed` positions: a power of two (>= 64), so that
        a windowed model's few programs (min(window, capacity) slots) serve every length. (A model
        without a window runs the same programs at every capacity: see KVCache.)"""
        length = 64
        while length < needed:
            length *= 2
        return min(length, self._config.block_size)

    def _generate(
        self,
        ids,
        max_new_tokens,
        temperature,
        top_k,
        top_p,
        rng,
        use_cache,
        stop_ids,
        drafter=None,
        draft_tokens=None,
        constraint=None,
    ):
        stats = self._generation = dict(
            prompt_tokens=len(ids),
            generated_tokens=0,
            prompt_seconds=0.0,
            generate_seconds=0.0,
            compile_seconds=0.0,
        )
        self._speculation = None if drafter is None else dict(drafted_tokens=0, accepted_tokens=0, verify_steps=0)
        if max_new_tokens == 0:
            return

        # The time a step waited for compiles, not the compiles' own: a compile on another thread
        # (the decode step's, during a prefill) overlaps the step and is not its time.
        timed = step_timer(stats, "compile_seconds", lambda: self._compile_waits)

        if drafter is not None:
            cache = self.new_cache(self._generation_cache_len(min(len(ids) + max_new_tokens, self._config.block_size)))
            yield from speculative_tokens(
                self,
                ids,
                max_new_tokens,
                temperature,
                top_k,
                top_p,
                rng,
                stop_ids,
                drafter,
                draft_tokens,
                cache,
                timed,
                stats,
                self._speculation,
            )
            return
        if use_cache:
            cache = self.new_cache(self._generation_cache_len(min(len(ids) + max_new_tokens, self._config.block_size)))
            logits = timed("prompt_seconds", self.prefill, ids, cache)
        else:
            sequence = list(ids)
            logits = timed("prompt_seconds", lambda: self.forward(sequence)[-1])
        for step in range(max_new_tokens):
            if constraint is not None:  # the mask's time counts as decoding's
                logits = timed("generate_seconds", constraint.mask, logits)
            token = sample(logits, temperature, top_k, top_p, rng)
            if token in stop_ids or (constraint is not None and token in constraint.end_ids):
                return
            stats["generated_tokens"] += 1
            complete = constraint is not None and constraint.advance(token)
            yield token
            if step + 1 == max_new_tokens or complete:
                return
            if use_cache:
                logits = timed("generate_seconds", self.decode, token, cache)
            else:
                sequence.append(token)
                logits = timed("generate_seconds", lambda: self.forward(sequence)[-1])
