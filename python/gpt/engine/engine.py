"""Engine: many requests served together by batched steps over a paged KV cache.

The engine uses the model only through the paged contract: `model.new_block_pool`,
`model.step_batch`, `pool.copy_block`, plus `model.config` and `model.tokenizer`. One background
thread (or the caller, with `start=False` and `step()`) runs the steps; submit, cancel and the
request handles are safe to use from any thread.

A sliding-window model (`attention_window=W`) is served in O(W) blocks per sequence: blocks wholly
before a sequence's window go back to the pool after every step (engine/window.py), so a request
far longer than the pool runs as long as one token's window fits it.
"""

import collections
import threading
import time

import numpy as np

from gpt.engine.blocks import BlockManager
from gpt.engine.metrics import EngineMetrics
from gpt.engine.requests import Event, QueueFullError, RequestHandle, SamplingParams, TextTracker
from gpt.engine.scheduler import Scheduler, Sequence
from gpt.engine.window import most_blocks_needed
from gpt.sampling import check_sampling_args, sample
from gpt.tokenizer import tokenizer_for


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


class Engine:
    """Serves requests with continuous batching, chunked prefill and prefix sharing.

    num_blocks, block_size: the KV pool (default: room for 4 sequences of block_size positions).
    A sequence holds the blocks of all its positions until it ends, or with an attention window W
    only those of its last W positions (and of the prompt chunk being computed): a request is
    accepted when what it needs at any one moment fits the pool.
    max_batch_tokens: new tokens per step at most (decodes first, then prompt chunks).
    max_running: sequences in a step at most. max_queue: requests waiting for admission at most;
    submit raises QueueFullError beyond it.
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
    ):
        self._model = model
        self._config = model.config
        block_size = _positive_int("block_size", block_size)
        if num_blocks is None:
            num_blocks = 4 * -(-self._config.block_size // block_size)
        self._num_blocks = _positive_int("num_blocks", num_blocks)
        self._block_size = block_size
        self._max_batch_tokens = _positive_int("max_batch_tokens", max_batch_tokens)
        self._max_queue = _positive_int("max_queue", max_queue)
        self._pool = model.new_block_pool(self._num_blocks, block_size)
        self._blocks = BlockManager(self._num_blocks)
        self._scheduler = Scheduler(
            self._blocks,
            self._pool,
            block_size,
            self._max_batch_tokens,
            _positive_int("max_running", max_running),
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
        self._accepting = True
        self._stopping = False
        self._counters = collections.Counter()
        self._recent_tokens: collections.deque[tuple[float, int]] = collections.deque()
        self._thread = None
        if start:
            self._thread = threading.Thread(target=self._run, name="gpt-engine", daemon=True)
            self._thread.start()

    @property
    def model(self):
        return self._model

    @property
    def tokenizer(self):
        return self._tokenizer

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def num_blocks(self) -> int:
        return self._num_blocks

    # -- the caller's side ----------------------------------------------------------------------

    def submit(
        self,
        prompt,
        max_tokens: int = 16,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop=None,
        stop_strings=None,
        keep_logits: bool = False,
        on_event=None,
    ) -> RequestHandle:
        """Queues a request and returns its handle. `prompt`: token ids; sampling as
        `GPT.generate` takes it (the same seed gives the same tokens); `stop`: token ids that end
        the request unreturned; `stop_strings`: texts that end it, cut from its text. `on_event`
        is called on the engine's thread with every Event (keep it short). Raises ValueError or
        TypeError naming a bad argument or a request that can never fit the pool (with an attention
        window, only one token's window must fit, however long the request), QueueFullError when
        the queue is full."""
        prompt = self._check_ids(prompt, "prompt")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens < 0:
            raise ValueError(f"max_tokens must be an int >= 0, got {max_tokens!r}")
        check_sampling_args(temperature, top_k, top_p)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"seed must be None or an int >= 0, got {seed!r}")
        stop_ids = frozenset(self._check_ids(list(stop), "stop")) if stop else frozenset()
        if isinstance(stop_strings, str):
            stop_strings = [stop_strings]
        stop_strings = tuple(stop_strings or ())
        if any(not isinstance(s, str) or not s for s in stop_strings):
            raise ValueError(f"stop strings must be non-empty strings, got {stop_strings!r}")
        if stop_strings and self._tokenizer is None:
            raise ValueError("stop strings need a tokenizer, and this model has none")
        total = len(prompt) + int(max_tokens)
        # Rotary positions with a window have no table to run out of (GPTConfig.unbounded_positions).
        if total > self._config.block_size and not self._config.unbounded_positions:
            raise ValueError(
                f"{len(prompt)} prompt tokens + max_tokens={max_tokens} exceed block_size={self._config.block_size}"
            )
        window = self._config.attention_window
        needed = most_blocks_needed(total, window, self._block_size)
        if needed > self._num_blocks:
            windowed = needed < -(-total // self._block_size)  # the window, not the length, decides
            at_once = f" at once (one token's window of {window} positions)" if windowed else ""
            raise ValueError(
                f"{len(prompt)} prompt tokens + max_tokens={max_tokens} need {needed} blocks "
                f"of {self._block_size}{at_once}, more than the pool's {self._num_blocks}"
            )
        params = SamplingParams(int(max_tokens), float(temperature), top_k, top_p, seed, stop_ids, stop_strings)
        handle = RequestHandle(prompt, params, on_event, keep_logits, self.cancel)
        with self._lock:
            if not self._accepting:
                raise QueueFullError("the engine is shutting down and takes no new requests")
            if len(self._scheduler.waiting) >= self._max_queue:
                self._counters["rejected"] += 1
                raise QueueFullError(
                    f"{len(self._scheduler.waiting)} requests are waiting (max_queue={self._max_queue})"
                )
            seq = Sequence(handle, self._block_size)
            self._sequences[handle] = seq
            self._texts[handle] = TextTracker(self._tokenizer, stop_strings)
            self._rngs[handle] = np.random.default_rng(seed)
            self._counters["submitted"] += 1
            self._counters["prompt_tokens"] += len(prompt)
            if max_tokens == 0:
                self._end(seq, "length")
            else:
                self._scheduler.waiting.append(seq)
            self._lock.notify_all()
        return handle

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
            c = self._counters
            return EngineMetrics(
                waiting=len(self._scheduler.waiting),
                running=len(self._scheduler.running),
                blocks_total=self._num_blocks,
                blocks_in_use=self._blocks.in_use,
                blocks_cached=self._blocks.cached,
                prompt_tokens=c["prompt_tokens"],
                admitted_tokens=c["admitted_tokens"],
                prefix_hit_tokens=c["prefix_hit_tokens"],
                prefill_tokens=c["prefill_tokens"],
                generated_tokens=c["generated_tokens"],
                steps=c["steps"],
                preemptions=self._scheduler.preemptions,
                blocks_copied=self._scheduler.blocks_copied,
                requests_submitted=c["submitted"],
                requests_finished=c["finished"],
                requests_cancelled=c["cancelled"],
                requests_rejected=c["rejected"],
                tokens_per_second=recent / window if window > 0 else 0.0,
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
        """Runs one step (for start=False); False when there was nothing to run."""
        if self._thread is not None and threading.current_thread() is not self._thread:
            raise RuntimeError("this engine runs its own steps (start=True); step() is for start=False")
        with self._lock:
            self._apply_cancellations()
            plan = self._scheduler.schedule()
            if not plan.work:
                return False
            self._counters["prefix_hit_tokens"] += plan.prefix_hit_tokens
            self._counters["admitted_tokens"] += plan.admitted_tokens
            # A decode runs the one token sampled last; everything else is prompt (or recompute).
            decodes = sum(1 for seq, count in plan.work if count == 1 and seq.pending == 1 and seq.handle.tokens)
            self._counters["prefill_tokens"] += sum(count for _, count in plan.work) - decodes
        ids = np.concatenate([seq.tokens[seq.computed : seq.computed + count] for seq, count in plan.work])
        counts = np.array([count for _, count in plan.work], np.int64)
        starts = np.array([seq.computed for seq, _ in plan.work], np.int64)
        width = max(len(seq.table) for seq, _ in plan.work)
        tables = np.zeros((len(plan.work), width), np.int64)
        for row, (seq, _) in enumerate(plan.work):
            tables[row, : len(seq.table)] = seq.table
        try:
            logits = self._model.step_batch(self._pool, ids.astype(np.int64), counts, starts, tables)
        except Exception as error:  # a failed step fails its requests, not the engine
            with self._lock:
                for seq, _ in plan.work:
                    self._end(seq, "error", f"{type(error).__name__}: {error}")
            return True
        with self._lock:
            self._counters["steps"] += 1
            sampled = 0
            for row, (seq, count) in enumerate(plan.work):
                self._scheduler.after_step(seq, count)
                if seq.pending == 0:
                    self._sample(seq, logits[row])
                    sampled += 1
            self._recent_tokens.append((time.monotonic(), sampled))
            self._lock.notify_all()
        return True

    def _run(self) -> None:
        while True:
            with self._lock:
                while not (self._scheduler.waiting or self._scheduler.running or self._cancelled or self._stopping):
                    self._lock.wait()
                if self._stopping and not (self._scheduler.waiting or self._scheduler.running):
                    return
            try:
                if not self.step():
                    with self._lock:  # nothing could run (e.g. only cancellations): wait for news
                        self._lock.wait(0.05)
            except Exception as error:  # a bug in scheduling: fail the requests, never hang them
                with self._lock:
                    for seq in list(self._sequences.values()):
                        self._end(seq, "error", f"engine step failed: {type(error).__name__}: {error}")

    def _sample(self, seq: Sequence, logits: np.ndarray) -> None:
        handle, params = seq.handle, seq.handle.params
        if handle.logits is not None:
            handle.logits.append(np.array(logits, copy=True))
        token = sample(logits, params.temperature, params.top_k, params.top_p, self._rngs[handle])
        if token in params.stop_ids:
            self._end(seq, "stop")
            return
        seq.append(token)
        handle.tokens.append(token)
        self._counters["generated_tokens"] += 1
        text, stopped = self._texts[handle].add(token)
        handle.text += text
        handle._emit(Event(token, text))
        if stopped:
            self._end(seq, "stop")
        elif len(handle.tokens) == params.max_tokens:
            self._end(seq, "length")

    def _end(self, seq: Sequence, reason: str, error: str | None = None) -> None:
        handle = seq.handle
        self._scheduler.finish(seq)
        rest = self._texts[handle].flush() if reason != "error" else ""
        handle.text += rest
        del self._sequences[handle], self._texts[handle], self._rngs[handle]
        self._cancelled.discard(handle)
        self._counters["cancelled" if reason == "cancelled" else "finished"] += 1
        handle._emit(Event(None, rest, reason, error))

    def _apply_cancellations(self) -> None:
        for handle in list(self._cancelled):
            seq = self._sequences.get(handle)
            if seq is not None:
                self._end(seq, "cancelled")
        self._cancelled.clear()

    def _check_ids(self, ids, name: str) -> list[int]:
        array = np.asarray(ids)
        if array.ndim != 1 or array.size == 0:
            raise ValueError(f"{name} must be a non-empty 1-D sequence of token ids, got shape {array.shape}")
        if not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"{name} token ids must be integers, got dtype {array.dtype}")
        vocab = self._config.vocab_size
        bad = (array < 0) | (array >= vocab)
        if bad.any():
            raise ValueError(f"{name} token id {int(array[bad][0])} is out of range [0, vocab_size={vocab})")
        return [int(t) for t in array]
