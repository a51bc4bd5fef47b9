"""A request as the engine sees it: its parameters, its stream of events, and its text so far."""

import dataclasses
import itertools
import queue
import threading
from collections.abc import Callable, Iterator

import numpy as np

from gpt.detokenizer import IncrementalDetokenizer

_request_ids = itertools.count(1)


class QueueFullError(RuntimeError):
    """The engine's waiting queue is at its limit; try again later."""


@dataclasses.dataclass(frozen=True)
class Event:
    """What a request produced: a new token (with the text it completes, which may be "" while a
    multi-byte character or a possible stop string is still open), or its end (`finish_reason`:
    "length", "stop", "cancelled" or "error", with `error` saying why for the last)."""

    token: int | None
    text: str
    finish_reason: str | None = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float
    top_k: int | None
    top_p: float | None
    seed: int | None
    stop_ids: frozenset[int]
    stop_strings: tuple[str, ...]


class RequestHandle:
    """The caller's side of a submitted request: iterate it for tokens (blocking), or read
    `result()`; `cancel()` ends it at the next step boundary. Thread-safe."""

    def __init__(self, prompt: list[int], params: SamplingParams, on_event, keep_logits: bool, cancel):
        self.id = f"req-{next(_request_ids)}"
        self.prompt = prompt
        self.params = params
        self.tokens: list[int] = []
        self.text = ""
        self.finish_reason: str | None = None
        self.error: str | None = None
        # The logits each token was sampled from, when asked for (tests compare them).
        self.logits: list[np.ndarray] | None = [] if keep_logits else None
        self._events: queue.Queue[Event] = queue.Queue()
        self._on_event: Callable[[Event], None] | None = on_event
        self._done = threading.Event()
        self._cancel = cancel

    def cancel(self) -> None:
        self._cancel(self)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def result(self, timeout: float | None = None) -> list[int]:
        """The generated tokens once the request has ended (RuntimeError if it failed)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self.id} did not finish within {timeout} s")
        if self.finish_reason == "error":
            raise RuntimeError(f"{self.id} failed: {self.error}")
        return list(self.tokens)

    def __iter__(self) -> Iterator[int]:
        """The new tokens as they come; ends when the request does."""
        while True:
            event = self._events.get()
            if event.token is not None:
                yield event.token
            if event.finish_reason is not None:
                return

    def events(self) -> Iterator[Event]:
        while True:
            event = self._events.get()
            yield event
            if event.finish_reason is not None:
                return

    def _emit(self, event: Event) -> None:
        if event.finish_reason is not None:
            self.finish_reason, self.error = event.finish_reason, event.error
        self._events.put(event)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:  # a listener's failure (e.g. its event loop is gone) must not stop the engine
                self._on_event = None
        if event.finish_reason is not None:
            self._done.set()


class TextTracker:
    """The generated text of one request: finds stop strings and hands out only text that can no
    longer change (no open multi-byte character, no possible start of a stop string). Tokens are
    decoded incrementally (gpt.detokenizer), so a token costs the same at any length."""

    def __init__(self, tokenizer, stop_strings: tuple[str, ...]):
        self._detokenizer = IncrementalDetokenizer(tokenizer) if tokenizer is not None else None
        self._stop = stop_strings
        self._hold = max((len(s) for s in stop_strings), default=1) - 1
        self._emitted = 0
        self._stopped = False
        self.text = ""

    def add(self, token: int) -> tuple[str, bool]:
        """After a new token: (the text to hand out now, whether a stop string has appeared)."""
        if self._detokenizer is None:
            return "", False
        return self._extend(self._detokenizer.add(token))

    def _extend(self, piece: str) -> tuple[str, bool]:
        if self._stopped:  # the text ended at a stop string: what follows it is not part of it
            return "", True
        search_from = max(0, self._emitted - self._hold)
        self.text += piece
        found = [i for i in (self.text.find(s, search_from) for s in self._stop) if i >= 0]
        if found:
            self.text = self.text[: min(found)]
            self._stopped = True
            return self._take(len(self.text)), True
        return self._take(len(self.text) - self._hold), False

    def flush(self) -> str:
        """The rest of the text, at the end of the request (a stop string is still cut from it)."""
        if self._detokenizer is not None:
            self._extend(self._detokenizer.flush())
        return self._take(len(self.text))

    def _take(self, end: int) -> str:
        if end <= self._emitted:
            return ""
        piece, self._emitted = self.text[self._emitted : end], end
        return piece
