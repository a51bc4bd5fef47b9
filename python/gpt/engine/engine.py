"""Engine: many requests served together by batched steps over a paged KV cache.

The engine uses the model only through the paged contract: `model.new_block_pool`,
`model.step_batch`, `pool.copy_block`, plus `model.config` and `model.tokenizer`. One background
thread (or the caller, with `start=False` and `step()`) runs the steps; submit, cancel and the
request handles are safe to use from any thread.

A sliding-window model (`attention_window=W`) is served in O(W) blocks per sequence: blocks wholly
before a sequence's window go back to the pool after every step (engine/window.py), so a request
far longer than the pool runs as long as one token's window fits it.

A step is atomic with respect to any exception, KeyboardInterrupt included: its effects all land
or none do (see step()).

Speculative decoding (`speculative="ngram"` or a draft model): see engine/speculation.py.
"""

import collections
import contextlib
import threading
import time
from typing import Any

import numpy as np

from gpt.block_pool import step_batch_exact_rows
from gpt.claim import run_deferring_interrupts
from gpt.engine.blocks import BlockManager
from gpt.engine.metrics import COUNTED, EngineMetrics
from gpt.engine.outcome import step_outcomes, undo_all
from gpt.engine.requests import (
    Event,
    QueueFullError,
    RequestHandle,
    SamplingParams,
    TextTracker,
    check_ids,
    check_stop_strings,
    choice_seed,
    logprob_count,
    one_choice,
    positive_int,
)
from gpt.engine.scheduler import Scheduler, Sequence
from gpt.engine.speculation import Speculation, step_arrays
from gpt.engine.window import check_fits_pool
from gpt.logprobs import prompt_logprobs
from gpt.sampling import check_sampling_args
from gpt.structured_output import Grammar
from gpt.tokenizer import tokenizer_for
from gpt_runtime.read_only import ReadOnly

# Choices of one request at most (submit_choices' `n`; the server's bound too).
MAX_CHOICES = 16


class Engine:
    """Serves requests with continuous batching, chunked prefill and prefix sharing.

    num_blocks, block_size: the KV pool (default: room for 4 sequences of block_size positions).
    A sequence holds the blocks of all its positions until it ends, or with an attention window W
    only those of its last W positions (and of the prompt chunk being computed): a request is
    accepted when what it needs at any one moment fits the pool.
    max_batch_tokens: new tokens per step at most (decodes first, then prompt chunks).
    max_running: sequences in a step at most. max_queue: requests waiting for admission at most;
    submit raises QueueFullError beyond it.
    speculative: None, "ngram" for speculative decoding by prompt lookup, or a gpt.GPT draft model
    with the model's tokenizer (drafting for every sequence at once, in a paged pool of its own of
    as many positions as the model's), with up to `draft_tokens`
    (default 8, at most 64) drafted tokens per sequence and step (see engine/speculation.py).
    Greedy requests get the tokens they get without it; sampled ones the same distribution, not
    the same draws for a seed. A request with a grammar, or with choices still to fork from it,
    decodes plainly. speculative_max_batch: no drafts in a step where more than this many
    sequences decode (vLLM's speculative_disable_by_batch_size; docs/SERVING.md says why).
    """

    def __init__(
        self,
        model,
        num_blocks: int | None = None,
        block_size: int = 16,
        max_batch_tokens: int = 256,
        max_running: int = 32,
        max_queue: int = 256,
        tokenizer=None,
        start: bool = True,
        speculative=None,
        draft_tokens: int | None = None,
        speculative_max_batch: int | None = None,
    ):
        self._model = model
        self._config = model.config
        if speculative is None and draft_tokens is not None:
            raise ValueError("draft_tokens is given without speculative ('ngram' or a draft model)")
        if speculative is None and speculative_max_batch is not None:
            raise ValueError("speculative_max_batch is given without speculative ('ngram' or a draft model)")
        if speculative_max_batch is not None:
            speculative_max_batch = positive_int("speculative_max_batch", speculative_max_batch)
        self._speculative = speculative
        block_size = positive_int("block_size", block_size)
        if num_blocks is None:
            num_blocks = 4 * -(-self._config.block_size // block_size)
        self._num_blocks = positive_int("num_blocks", num_blocks)
        self._block_size = block_size
        self._speculation = None
        if speculative is not None:
            self._speculation = Speculation(
                model, speculative, draft_tokens, self._num_blocks, block_size, speculative_max_batch
            )
        self._max_batch_tokens = positive_int("max_batch_tokens", max_batch_tokens)
        self._max_queue = positive_int("max_queue", max_queue)
        self._pool = model.new_block_pool(self._num_blocks, block_size)
        self._blocks = BlockManager(self._num_blocks)
        self._scheduler = Scheduler(
            self._blocks,
            self._pool,
            block_size,
            self._max_batch_tokens,
            positive_int("max_running", max_running),
            window=self._config.attention_window,
        )
        if tokenizer is None:
            tokenizer = model.tokenizer
        if tokenizer is None and self._config.vocab_size == 256:
            tokenizer = tokenizer_for(None, 256)
        self._tokenizer = tokenizer
        self._lock = threading.Condition()
        self._cancelled: set[RequestHandle] = set()
        self._sequences: dict[RequestHandle, Sequence] = {}
        self._texts: dict[RequestHandle, TextTracker] = {}
        self._rngs: dict[RequestHandle, np.random.Generator] = {}
        # Requests whose prompt is scored (prompt_logprobs) before they are scheduled, oldest first.
        self._scoring: collections.deque[Sequence] = collections.deque()
        self._accepting = True
        self._stopping = False
        self._counters = collections.Counter()
        self._recent_tokens: collections.deque[tuple[float, int]] = collections.deque()
        # Events of committed changes not yet applied to their handles, oldest first (_deliver).
        self._outbox: collections.deque[tuple[RequestHandle, Event, np.ndarray | None]] = collections.deque()
        self._ended: list | None = None  # undo of the requests ended in the open transaction (_end)
        self._thread = None
        if start:
            self._thread = threading.Thread(target=self._run, name="gpt-engine", daemon=True)
            self._thread.start()

    model = ReadOnly[Any]()
    tokenizer = ReadOnly[Any]()
    block_size = ReadOnly[int]()
    num_blocks = ReadOnly[int]()
    speculative = ReadOnly[Any]("""None, "ngram" or the draft model, as given.""")

    @property
    def draft_tokens(self) -> int | None:
        """Tokens drafted per sequence and step at most (None without speculation)."""
        return self._speculation.draft_tokens if self._speculation is not None else None

    # -- the caller's side ----------------------------------------------------------------------

    def submit_choices(
        self,
        prompt,
        n: int,
        max_tokens: int = 16,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop=None,
        stop_strings=None,
        keep_logits: bool = False,
        on_event=None,
        logprobs: int | None = None,
        prompt_logprobs: int | None = None,
        grammar=None,
    ) -> list[RequestHandle]:
        """Queues a request for `n` choices (1 to MAX_CHOICES) of one prompt and returns a handle
        each, whose Events carry its `index` (submit(): one choice, its handle). `prompt`: token
        ids; sampling as `GPT.generate` takes it (the same seed gives the same tokens); `stop`:
        token ids that end the request unreturned; `stop_strings`: texts that end it, cut from its
        text (at most MAX_STOP_STRINGS of at most MAX_STOP_STRING_LENGTH characters). `on_event` is
        called on the engine's thread with every Event (keep it short). `logprobs`: each token's
        Event carries its gpt.logprobs.TokenLogprob with that many alternatives (0 to
        MAX_TOP_LOGPROBS); `prompt_logprobs`: the prompt's tokens are scored too, in an Event before
        the first token (see _score). `grammar`: a gpt.structured_output.Grammar (a JSON schema
        compiled for this model's tokenizer) that the tokens must follow: the logits of every other
        token are -inf when sampling, and the request ends ("stop") when the JSON is complete.
        Raises ValueError or TypeError naming a bad argument or a request that can never fit the
        pool (with an attention window, only one token's window must fit, however long the
        request), QueueFullError when the queue is full.

        The prompt runs once; the other choices then fork from the first, sharing its blocks
        (Scheduler.fork), and each draws its own tokens, choice i with the seed
        choice_seed(seed, i). Greedy choices are all the same. Each choice follows `grammar` with
        a state of its own."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_CHOICES:
            raise ValueError(f"n must be an int in [1, {MAX_CHOICES}] (MAX_CHOICES), got {n!r}")
        logprobs = logprob_count("logprobs", logprobs)
        prompt_logprobs = logprob_count("prompt_logprobs", prompt_logprobs)
        if prompt_logprobs is not None and not callable(getattr(self._model, "forward", None)):
            raise ValueError("prompt_logprobs needs the model's forward(), and this model has none")
        if grammar is not None and not isinstance(grammar, Grammar):
            raise TypeError(f"grammar must be a gpt.structured_output.Grammar, got {type(grammar).__name__}")
        if grammar is not None and grammar.vocab_size != self._config.vocab_size:
            raise ValueError(
                f"grammar was compiled for a vocabulary of {grammar.vocab_size} tokens, the model has "
                f"{self._config.vocab_size}"
            )
        prompt = check_ids(prompt, "prompt", self._config.vocab_size)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens < 0:
            raise ValueError(f"max_tokens must be an int >= 0, got {max_tokens!r}")
        check_sampling_args(temperature, top_k, top_p)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"seed must be None or an int >= 0, got {seed!r}")
        stop_ids = frozenset(check_ids(list(stop), "stop", self._config.vocab_size)) if stop else frozenset()
        stop_strings = check_stop_strings(stop_strings)  # at most MAX_STOP_STRINGS of MAX_STOP_STRING_LENGTH
        if stop_strings and self._tokenizer is None:
            raise ValueError("stop strings need a tokenizer, and this model has none")
        total = len(prompt) + int(max_tokens)
        # Rotary positions with a window have no table to run out of (GPTConfig.unbounded_positions).
        if total > self._config.block_size and not self._config.unbounded_positions:
            raise ValueError(
                f"{len(prompt)} prompt tokens + max_tokens={max_tokens} exceed block_size={self._config.block_size}"
            )
        check_fits_pool(len(prompt), max_tokens, self._config.attention_window, self._block_size, self._num_blocks)
        params = SamplingParams(
            int(max_tokens), float(temperature), top_k, top_p, seed, stop_ids, stop_strings, logprobs, prompt_logprobs
        )
        handles = [RequestHandle(prompt, params, on_event, keep_logits, self.cancel, index) for index in range(n)]
        with self._lock:
            if not self._accepting:
                raise QueueFullError("the engine is shutting down and takes no new requests")
            waiting = len(self._scheduler.waiting) + len(self._scoring)
            if waiting >= self._max_queue:
                self._counters["requests_rejected"] += 1
                raise QueueFullError(f"{waiting} requests are waiting (max_queue={self._max_queue})")
            seqs = [Sequence(handle, self._block_size) for handle in handles]
            for index, (handle, seq) in enumerate(zip(handles, seqs, strict=True)):
                self._sequences[handle] = seq
                self._texts[handle] = TextTracker(self._tokenizer, stop_strings)
                self._rngs[handle] = np.random.default_rng(choice_seed(seed, index))
                seq.constraint = grammar.start() if grammar is not None else None
            first = seqs[0]
            first.forks = seqs[1:]
            self._counters["requests_submitted"] += n
            self._counters["prompt_tokens"] += len(prompt)
            if prompt_logprobs is not None:
                self._scoring.append(first)  # then to the scheduler, or ended (max_tokens 0): _score
            elif max_tokens == 0:
                self._end(first, "length")  # and its forks
                self._deliver()
            else:
                self._scheduler.waiting.append(first)
            self._lock.notify_all()
        return handles

    submit = one_choice(submit_choices)

    def generate(self, prompt, max_tokens: int = 16, **kwargs) -> list[int]:
        """submit() and wait for the tokens."""
        return self.submit(prompt, max_tokens, **kwargs).result()

    def cancel(self, handle: RequestHandle) -> None:
        """Ends the request at the next step boundary (its blocks go back to the pool then)."""
        with self._lock:
            if handle in self._sequences:
                self._cancelled.add(handle)
                self._lock.notify_all()

    def metrics(self) -> EngineMetrics:
        with self._lock:
            now = time.monotonic()
            while self._recent_tokens and self._recent_tokens[0][0] < now - 10.0:
                self._recent_tokens.popleft()
            window = now - self._recent_tokens[0][0] if len(self._recent_tokens) > 1 else 0.0
            recent = sum(n for _, n in list(self._recent_tokens)[1:])
            return EngineMetrics(
                waiting=len(self._scheduler.waiting),
                running=len(self._scheduler.running),
                blocks_total=self._num_blocks,
                blocks_in_use=self._blocks.in_use,
                blocks_cached=self._blocks.cached,
                preemptions=self._scheduler.preemptions,
                blocks_copied=self._scheduler.blocks_copied,
                tokens_per_second=recent / window if window > 0 else 0.0,
                **{name: self._counters[name] for name in COUNTED},
            )

    def shutdown(self, drain: bool = True, timeout: float | None = None) -> None:
        """Stops taking requests; with `drain`, lets the submitted ones finish (else cancels them);
        then stops the engine's thread."""
        with self._lock:
            self._accepting = False
            if not drain:
                self._cancelled.update(self._sequences)
            self._stopping = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        else:
            while self.step():
                pass

    # -- the engine's side ----------------------------------------------------------------------

    def step(self) -> bool:
        """Runs one step (for start=False); False when there was nothing to run.

        A step is atomic with respect to any exception. Each change to the engine's state happens
        in a transaction under the lock (_begin): scheduling, then, after the model's call outside
        the lock, the step's results; an exception inside one rolls it back (_rollback), and one
        between them leaves the first committed, which is a state the engine knows (work
        scheduled, blocks reserved, nothing computed: the next step schedules it again). Sampling
        and the text work run between them too, on this thread, and a rolled-back step puts their
        RNG and text states back, so the step's tokens come again, the same, in the next one.
        Events reach the handles only from the outbox, after a commit (_deliver).

        A KeyboardInterrupt is raised between any two bytecodes, the rollback included, so on the
        main thread a Ctrl-C is held back until the step is done (gpt.claim.
        run_deferring_interrupts) and raised then: a Ctrl-C stops a stepping loop at a step's end.
        """
        if self._thread is not None and threading.current_thread() is not self._thread:
            raise RuntimeError("this engine runs its own steps (start=True); step() is for start=False")
        return run_deferring_interrupts(self._step)

    def _step(self) -> bool:
        if self._scoring and self._score():
            return True
        failed = {}
        if self._speculation is not None:
            # Only this thread changes the running sequences, so a draft model runs outside the
            # lock, holding up no submit, cancel or metrics.
            with self._lock:
                running = list(self._scheduler.running)
            failed = self._speculation.propose(running)
        with self._lock:
            self._deliver()  # what an interrupted delivery left
            with self._transaction():
                self._apply_cancellations()
                for seq, error in failed.items():
                    if seq.handle in self._sequences:
                        self._end(seq, "error", f"drafting failed: {type(error).__name__}: {error}")
                plan = self._scheduler.schedule()
                self._counters["prefix_hit_tokens"] += plan.prefix_hit_tokens
                self._counters["admitted_tokens"] += plan.admitted_tokens
            self._deliver()
            if not plan.work:
                return False
            # Once a request runs, only this thread uses its RNG and text tracker (submit makes
            # them and _end drops them, under the lock): the sampling and the stop-string search
            # run outside the lock, holding up no submit, cancel or metrics.
            rngs = [self._rngs[seq.handle] for seq, _ in plan.work]
            trackers = [self._texts[seq.handle] for seq, _ in plan.work]
            forks = self._forks_ready(plan)
        # A decode runs the one token sampled last, and a speculating one its draft after it (rows
        # past the pending tokens); everything else is prompt (or recompute).
        drafted = {seq: seq.draft[: count - seq.pending] for seq, count in plan.work if count > seq.pending}
        decodes = sum(1 for seq, count in plan.work if seq.pending == 1 and seq.generated)
        prefill_tokens = sum(count for _, count in plan.work) - decodes - sum(map(len, drafted.values()))
        arrays, first_rows = step_arrays(plan.work, drafted)  # first_rows[i]: where item i's logits start
        try:
            if drafted:
                logits = step_batch_exact_rows(self._model, self._pool, *arrays)
            else:
                logits = self._model.step_batch(self._pool, *arrays)
        except Exception as error:  # a failed step fails its requests, not the engine
            self._fail_step(plan, f"{type(error).__name__}: {error}")
            return True
        undo = []  # how to put back the RNG and text states that outcome() changes
        committed = False
        try:
            outcomes, accepted = step_outcomes(plan, drafted, logits, first_rows, rngs, trackers, forks, undo)
            with self._lock:
                # Not self._transaction(): `committed` is set before the commit, so that an interrupt
                # between the two cannot also undo the draws of a step whose tokens stand.
                saved = self._begin()
                try:
                    self._counters["steps"] += 1
                    self._counters["prefill_tokens"] += prefill_tokens
                    for seq, count in plan.work:
                        # A speculating sequence keeps the positions of its pending token and of
                        # the drafted tokens accepted; the rest of its rows are forgotten.
                        self._scheduler.after_step(seq, 1 + accepted[seq] if seq in drafted else count)
                    for seq, draft in drafted.items():
                        self._counters["drafted_tokens"] += len(draft)
                        self._counters["accepted_tokens"] += accepted[seq]
                        self._counters["verify_steps"] += 1
                    for seq, children in forks.items():
                        self._scheduler.fork(seq, [child for child, _, _ in children])
                    for result in outcomes:
                        self._apply(*result)
                    self._recent_tokens.append((time.monotonic(), len(outcomes)))
                except BaseException:
                    self._rollback(saved)
                    raise
                committed = True
                self._commit()
                self._deliver()
                self._lock.notify_all()
        except BaseException:
            if not committed:  # the step's tokens come again in the next step: so must their draws
                undo_all(undo)
            raise
        return True

    def _forks_ready(self, plan) -> dict:
        """The other choices of each request whose prompt completes in `plan` (lock held), with
        their RNGs and text trackers: they fork from it, each drawing its first token from the
        same logits (Scheduler.fork)."""
        return {
            seq: [(c, self._rngs[c.handle], self._texts[c.handle]) for c in seq.forks if c.handle in self._sequences]
            for seq, count in plan.work
            if seq.forks and seq.pending == count
        }

    def _fail_step(self, plan, message: str) -> None:
        """Ends the requests of a step whose model call raised, with the error."""
        with self._lock:
            with self._transaction():
                for seq, _ in plan.work:
                    self._end(seq, "error", message)
            self._deliver()
            self._lock.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                scheduler = self._scheduler
                while not (
                    scheduler.waiting
                    or scheduler.running
                    or self._scoring
                    or self._cancelled
                    or self._stopping
                    or self._outbox
                ):
                    self._lock.wait()
                if self._stopping and not (self._scheduler.waiting or self._scheduler.running or self._scoring):
                    self._deliver()
                    return
            try:
                if not self.step():
                    with self._lock:  # nothing could run (e.g. only cancellations): wait for news
                        self._lock.wait(0.05)
            except BaseException as error:  # a bug, rolled back: fail the requests, never hang them
                self._fail_all(f"engine step failed: {type(error).__name__}: {error}")

    def _fail_all(self, message: str) -> None:
        """Ends every request with an error, after a step failed on the engine's own thread: that
        thread goes on serving new requests. Nothing here may end the thread: a listener's
        BaseException leaves its event in the outbox, for the next step to deliver."""
        try:
            with self._lock:
                for seq in list(self._sequences.values()):
                    if seq.handle in self._sequences:  # not ended with the choice it was to fork from
                        self._end(seq, "error", message)
                self._deliver()
                self._lock.notify_all()
        except BaseException:  # see above
            pass

    def _apply(self, seq: Sequence, token, text: str, rest: str, reason, logits, entry) -> None:
        """Commits an outcome() (in a transaction)."""
        if token is None:  # an outcome that fails its request has the error as its text
            self._end(seq, reason, text if reason == "error" else None, rest=rest, logits=logits)
            return
        seq.append(token)
        self._counters["generated_tokens"] += 1
        self._outbox.append((seq.handle, Event(token, text, index=seq.handle.index, logprob=entry), logits))
        if reason is not None:
            self._end(seq, reason, rest=rest)

    def _end(self, seq: Sequence, reason: str, error: str | None = None, rest: str | None = None, logits=None) -> None:
        """Ends a request: its blocks go back, its last event goes to the outbox. `rest`: the rest
        of its text when the caller has it (else the tracker is flushed here)."""
        handle = seq.handle
        tracker = self._texts[handle]
        if self._ended is not None:  # in a transaction: how to bring the request back, saved first
            self._ended.append((handle, seq, tracker, self._rngs[handle], tracker.save()))
        self._scheduler.finish(seq)
        seq.drafter = None  # a draft model's cache of this sequence goes now, not when seq is collected
        del self._sequences[handle], self._texts[handle], self._rngs[handle]
        if rest is None:
            rest = tracker.flush() if reason != "error" else ""
        self._cancelled.discard(handle)
        self._counters["requests_cancelled" if reason == "cancelled" else "requests_finished"] += 1
        self._outbox.append((handle, Event(None, rest, reason, error, index=handle.index), logits))
        for child in seq.forks:  # choices not forked from it yet end with it (cancelled, failed, scored only)
            if child.handle in self._sequences:
                self._end(child, reason, error)

    def _score(self) -> bool:
        """Scores the prompt of the oldest request that asked (prompt_logprobs) and hands it on: to
        the scheduler, or to its end when it asked for no tokens (max_tokens 0: a prompt scored
        for its perplexity, as evaluation harnesses ask). The logprobs of every prompt position
        come from the model's forward() over the prompt (the full-logits entry point: step_batch
        returns the last position's logits only), run here on the engine's thread like every
        call into the model. False when no request waits to be scored."""
        with self._lock:
            self._deliver()
            while self._scoring and self._scoring[0].handle not in self._sequences:
                self._scoring.popleft()  # ended (cancelled) while it waited
            if not self._scoring:
                return False
            seq = self._scoring[0]
        params, error = seq.handle.params, None
        try:
            logits = self._model.forward(seq.handle.prompt)
            entries = tuple(prompt_logprobs(logits, seq.handle.prompt, params.temperature, params.prompt_logprobs))
        except Exception as e:  # a prompt the forward entry refuses fails its request, not the engine
            error = f"{type(e).__name__}: {e}"
        with self._lock:
            with self._transaction():
                if error is not None:
                    self._end(seq, "error", error)
                else:
                    for choice in (seq, *seq.forks):
                        if choice.handle in self._sequences:
                            event = Event(None, "", index=choice.handle.index, prompt_logprobs=entries)
                            self._outbox.append((choice.handle, event, None))
                    if params.max_tokens == 0:
                        self._end(seq, "length")
                    else:
                        self._scheduler.waiting.append(seq)
                self._scoring.popleft()  # last: a rollback leaves it to be scored again
            self._deliver()
            self._lock.notify_all()
        return True

    # -- transactions: each change of state in a step is one -------------------------------------

    @contextlib.contextmanager
    def _transaction(self):
        """A transaction (lock held) around the body: committed when it returns, rolled back when it
        raises (the exception goes on)."""
        saved = self._begin()
        try:
            yield
        except BaseException:
            self._rollback(saved)
            raise
        self._commit()

    def _begin(self) -> tuple:
        """Opens a transaction (the lock is held until it commits or rolls back): the scheduler
        and the block manager journal their changes, _end journals the requests it ends, and
        what is left is saved here. Its cost is O(running sequences), not O(pool)."""
        self._scheduler.begin()
        self._ended = []
        return self._counters.copy(), set(self._cancelled), len(self._recent_tokens), len(self._outbox)

    def _commit(self) -> None:
        # Nothing to write: a skipped commit only leaves journals that the next _begin drops.
        self._ended = None
        self._scheduler.commit()

    def _rollback(self, saved: tuple) -> None:
        counters, cancelled, recent_tokens, outbox = saved
        for handle, seq, tracker, rng, state in reversed(self._ended or ()):
            self._sequences[handle], self._texts[handle], self._rngs[handle] = seq, tracker, rng
            tracker.restore(state)
        self._ended = None
        self._scheduler.rollback()
        self._counters.clear()
        self._counters.update(counters)
        self._cancelled.clear()
        self._cancelled.update(cancelled)
        while len(self._recent_tokens) > recent_tokens:
            self._recent_tokens.pop()
        while len(self._outbox) > outbox:
            self._outbox.pop()

    def _deliver(self) -> None:
        """Applies the outbox's events to their handles, in order (lock held). An event leaves the
        outbox only once delivered, so one that an exception interrupted comes again next time
        (RequestHandle._emit skips it if it was applied)."""
        while self._outbox:
            handle, event, logits = self._outbox[0]
            handle._emit(event, logits)
            self._outbox.popleft()

    def _apply_cancellations(self) -> None:
        for handle in list(self._cancelled):
            seq = self._sequences.get(handle)
            if seq is not None:
                self._end(seq, "cancelled")
        self._cancelled.clear()
