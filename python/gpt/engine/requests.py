"""A request as the engine sees it: its parameters, its stream of events, and its text so far."""

import dataclasses
import inspect
import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, Concatenate, ParamSpec

import numpy as np

from gpt.detokenizer import IncrementalDetokenizer
from gpt.logprobs import MAX_TOP_LOGPROBS, TokenLogprob

_request_ids = itertools.count(1)

# Bounds on a request's stop strings. Each new token is searched for every stop string over its
# new text plus the longest stop string's length of held text, so these two numbers bound the
# work per token (16 x 256 characters: microseconds); the server refuses more at its API.
MAX_STOP_STRINGS = 16
MAX_STOP_STRING_LENGTH = 256


def check_stop_strings(stop_strings) -> tuple[str, ...]:
    """The stop strings of a request as a tuple, or ValueError / TypeError naming what is wrong.
    An oversized collection is refused after reading MAX_STOP_STRINGS + 1 of its items, so a
    million of them cost no more to refuse than seventeen."""
    if stop_strings is None:
        return ()
    if isinstance(stop_strings, str):
        stop_strings = (stop_strings,)
    try:
        strings = tuple(itertools.islice(stop_strings, MAX_STOP_STRINGS + 1))
    except TypeError:
        raise TypeError(
            f"stop strings must be a string or a sequence of strings, got {type(stop_strings).__name__}"
        ) from None
    if len(strings) > MAX_STOP_STRINGS:
        count = f"{len(stop_strings)}" if hasattr(stop_strings, "__len__") else "more"
        raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings are allowed (MAX_STOP_STRINGS), got {count}")
    for s in strings:
        if not isinstance(s, str) or not s:
            raise ValueError(f"stop strings must be non-empty strings, got {s!r:.80}")
        if len(s) > MAX_STOP_STRING_LENGTH:
            raise ValueError(
                f"stop strings must be at most {MAX_STOP_STRING_LENGTH} characters (MAX_STOP_STRING_LENGTH), "
                f"got one of {len(s)}"
            )
    return strings


def logprob_count(name: str, value) -> int | None:
    """A request's `logprobs` or `prompt_logprobs`: None, or alternatives per entry (0 to MAX_TOP_LOGPROBS)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= MAX_TOP_LOGPROBS:
        raise ValueError(f"{name} must be None or an int in [0, {MAX_TOP_LOGPROBS}], got {value!r}")
    return int(value)


def positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


def check_ids(ids, name: str, vocab_size: int) -> list[int]:
    """`ids` (a prompt, stop tokens) as a list of ints, or ValueError / TypeError naming what is wrong."""
    array = np.asarray(ids)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of token ids, got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{name} token ids must be integers, got dtype {array.dtype}")
    bad = (array < 0) | (array >= vocab_size)
    if bad.any():
        raise ValueError(f"{name} token id {int(array[bad][0])} is out of range [0, vocab_size={vocab_size})")
    return [int(t) for t in array]


def choice_seed(seed: int | None, index: int):
    """The seed of choice `index` of a request seeded with `seed`: the seed itself for the first
    (so one choice draws what GPT.generate draws with that seed), and one derived from (seed,
    index) for the others, so that a seeded request with n choices is reproducible whole."""
    if seed is None or index == 0:
        return seed
    return np.random.SeedSequence([int(seed), index])


class QueueFullError(RuntimeError):
    """The engine's waiting queue is at its limit; try again later."""


@dataclasses.dataclass(frozen=True)
class Event:
    """What a request produced: a new token (with the text it completes, which may be "" while a
    multi-byte character or a possible stop string is still open), or its end (`finish_reason`:
    "length", "stop", "cancelled" or "error", with `error` saying why for the last). `index`: the
    choice it belongs to (Engine.submit_choices); `logprob`: the new token's entry when the request
    asked for logprobs; `prompt_logprobs`: the prompt tokens' entries (the first None), in an event
    of their own before any token, when it asked for them."""

    token: int | None
    text: str
    finish_reason: str | None = None
    error: str | None = None
    index: int = 0
    logprob: TokenLogprob | None = None
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float
    top_k: int | None
    top_p: float | None
    seed: int | None
    stop_ids: frozenset[int]
    stop_strings: tuple[str, ...]
    # Alternatives per token's logprob entry (None: no logprobs), and per prompt token's (None: the
    # prompt is not scored).
    logprobs: int | None = None
    prompt_logprobs: int | None = None


class RequestHandle:
    """The caller's side of a submitted request: iterate it for tokens (blocking), or read
    `result()`; `cancel()` ends it at the next step boundary. Thread-safe."""

    def __init__(self, prompt: list[int], params: SamplingParams, on_event, keep_logits: bool, cancel, index: int = 0):
        self.id = f"req-{next(_request_ids)}"
        self.prompt = prompt
        self.params = params
        self.index = index  # the choice this is, of those submitted together (Engine.submit_choices)
        self.tokens: list[int] = []
        self.text = ""
        # With params.logprobs: each token's entry, and where its text starts in `text`.
        self.logprobs: list[TokenLogprob] | None = [] if params.logprobs is not None else None
        self.text_offsets: list[int] | None = [] if params.logprobs is not None else None
        # With params.prompt_logprobs: the prompt tokens' entries (the first None), once scored.
        self.prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        # The logits each token was sampled from, when asked for (tests compare them).
        self.logits: list[np.ndarray] | None = [] if keep_logits else None
        self._events: queue.Queue[Event] = queue.Queue()
        self._on_event: Callable[[Event], None] | None = on_event
        self._done = threading.Event()
        self._cancel = cancel
        self._last_event: Event | None = None  # see _emit

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

    def _emit(self, event: Event, logits: np.ndarray | None = None) -> None:
        """Applies an event to the handle (tokens, text, logits, end) and hands it to the listeners.
        The engine delivers each event from its outbox and drops it only after this returns, so an
        event may come again after an interrupted delivery: the one applied last is then skipped.
        Only the engine's delivery calls this, one event at a time, under the engine's lock."""
        if event is self._last_event:
            return
        if event.token is not None:
            self.tokens.append(event.token)
            if self.logprobs is not None and event.logprob is not None:
                self.logprobs.append(event.logprob)
                self.text_offsets.append(len(self.text))
        if event.prompt_logprobs is not None:
            self.prompt_logprobs = event.prompt_logprobs
        if logits is not None and self.logits is not None:
            self.logits.append(logits)
        self.text += event.text
        if event.finish_reason is not None:
            self.finish_reason, self.error = event.finish_reason, event.error
        self._last_event = event
        try:
            self._events.put(event)
            if self._on_event is not None:
                try:
                    self._on_event(event)
                except Exception:  # a listener's failure (e.g. its event loop is gone) must not stop the engine
                    self._on_event = None
        finally:  # even when a listener raises a BaseException: result() must not wait forever
            if event.finish_reason is not None:
                self._done.set()


class TextTracker:
    """The generated text of one request: finds stop strings and hands out only text that can no
    longer change (no open multi-byte character, no possible start of a stop string). Tokens are
    decoded incrementally (gpt.detokenizer), and a stop string is searched for only in the text
    not handed out yet (at most the longest stop string's length - 1 characters) plus the new
    piece: one that ended inside the text handed out would have been found when that text came. So
    a token costs the same at any length of text.

    The engine runs it outside its lock, on the stepping thread; `save()` and `restore()` undo the
    tokens of a step that is rolled back."""

    def __init__(self, tokenizer, stop_strings: tuple[str, ...]):
        self._detokenizer = IncrementalDetokenizer(tokenizer) if tokenizer is not None else None
        self._stop = stop_strings
        self._hold = max((len(s) for s in stop_strings), default=1) - 1
        self._handed_out: list[str] = []
        self._held = ""  # text not handed out yet: at most _hold characters, unless stopped
        self._stopped = False

    @property
    def text(self) -> str:
        """The text so far (cut at a stop string once one has appeared)."""
        return "".join(self._handed_out) + self._held

    def add(self, token: int) -> tuple[str, bool]:
        """After a new token: (the text to hand out now, whether a stop string has appeared)."""
        if self._detokenizer is None:
            return "", False
        return self._extend(self._detokenizer.add(token))

    def _extend(self, piece: str) -> tuple[str, bool]:
        if self._stopped:  # the text ended at a stop string: what follows it is not part of it
            return "", True
        window = self._held + piece
        found = [i for i in (window.find(s) for s in self._stop) if i >= 0]
        if found:
            self._held, self._stopped = window[: min(found)], True
            return self._take(len(self._held)), True
        self._held = window
        return self._take(len(window) - self._hold), False

    def flush(self) -> str:
        """The rest of the text, at the end of the request (a stop string is still cut from it),
        an unfinished last character included (as U+FFFD, as the whole text decodes)."""
        piece = ""
        if self._detokenizer is not None:
            piece, _ = self._extend(self._detokenizer.flush())
        return piece + self._take(len(self._held))

    def save(self) -> tuple:
        detokenizer = self._detokenizer.save() if self._detokenizer is not None else None
        return detokenizer, len(self._handed_out), self._held, self._stopped

    def restore(self, state: tuple) -> None:
        detokenizer, handed_out, self._held, self._stopped = state
        if detokenizer is not None:
            self._detokenizer.restore(detokenizer)
        del self._handed_out[handed_out:]

    def _take(self, end: int) -> str:
        if end <= 0:
            return ""
        piece, self._held = self._held[:end], self._held[end:]
        self._handed_out.append(piece)
        return piece


P = ParamSpec("P")


def one_choice(
    submit_choices: Callable[Concatenate[Any, Any, int, P], list[RequestHandle]],
) -> Callable[Concatenate[Any, Any, P], RequestHandle]:
    """Engine.submit made from Engine.submit_choices: its parameters but `n`, for one choice, and
    its one handle. The parameter list is written once: submit's signature (inspect, help()) and a
    type checker's view of it (ParamSpec) follow submit_choices'."""

    def submit(self, prompt, *args: P.args, **kwargs: P.kwargs) -> RequestHandle:
        """Queues a request of one choice and returns its handle: submit_choices(prompt, 1, ...),
        every other parameter the same (see there)."""
        return submit_choices(self, prompt, 1, *args, **kwargs)[0]

    signature = inspect.signature(submit_choices)
    parameters = [parameter for name, parameter in signature.parameters.items() if name != "n"]
    submit.__signature__ = signature.replace(parameters=parameters, return_annotation=RequestHandle)
    submit.__qualname__ = submit_choices.__qualname__.replace("submit_choices", "submit")
    return submit
