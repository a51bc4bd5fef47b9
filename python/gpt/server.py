"""An OpenAI-compatible HTTP API over gpt.engine.Engine (FastAPI on uvicorn).

POST /v1/completions (prompt text or token ids; server-sent events with "stream": true),
POST /v1/chat/completions (messages rendered with the model's chat template, gpt.chat), GET
/v1/models, GET /health, GET /metrics (Prometheus text). Both end a request at the model's EOS
(and a chat at its template's end of turn). The engine's thread runs the model; each request's
events cross to the event loop through an asyncio queue, the loop woken once per step's burst of
events (EventRelay). A client that goes away has its request cancelled (its blocks
return to the pool at the next step); shutdown (SIGTERM, as uvicorn handles it) stops taking
connections, lets running requests finish, then stops the engine.

No client can stall it: a request's body is bounded (413) and must arrive in time (408); a
connection must send its request head within a deadline, and beyond `max_connections` the oldest
idle one makes room (GuardedHttpProtocol); parsing, validation, tokenization and submission run in
worker threads, so /health answers while a maximal prompt is being tokenized (through the
tokenizer's GIL-releasing batch call: text_encoder); a prompt longer than the model's context
could hold is refused before it is tokenized (token_reach); the requests being admitted share a
memory budget (AdmissionBudget: the rest wait their turn, or get 503); and every error,
whatever the body holds, is answered in one shape, `{"error": {"message", "type", "param",
"code"}}`, on a connection that stays open unless the body was left unread.
"""

import asyncio
import collections
import contextlib
import dataclasses
import http
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal

import numpy as np
import pydantic_core
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    model_validator,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpt import chat, structured_output, tool_calls
from gpt.engine import MAX_CHOICES, MAX_STOP_STRING_LENGTH, Engine, QueueFullError, prometheus_text
from gpt.logprobs import (
    MAX_COMPLETION_LOGPROBS,
    MAX_TOP_LOGPROBS,
    TokenStrings,
    chat_content,
    completion_logprobs,
    text_offsets,
)
from gpt.tool_calls import MAX_TOOLS

# Seconds a client refused on a full queue is told to wait.
RETRY_AFTER_SECONDS = 1
# How often a waiting non-streaming request checks that its client is still there.
DISCONNECT_POLL_SECONDS = 0.25
# `stop`: up to 4 sequences, as OpenAI takes (the engine would take MAX_STOP_STRINGS), each of at
# most the engine's MAX_STOP_STRING_LENGTH characters.
MAX_STOP = 4
# `messages` of a chat request at most; their total size is bounded by the body's (max_body_bytes),
# and the rendered conversation's tokens by the model's context.
MAX_MESSAGES = 1024
# A request's line and headers together (llhttp, uvicorn's parser here, has no limit of its own;
# h11's default is 16 KiB, nginx's 4 x 8 KiB buffers).
MAX_HEAD_BYTES = 64 * 1024

# A request that does not fit ServerLimits.admission_bytes waits this long for its turn, then gets
# 503 with Retry-After (as on a full queue).
ADMISSION_WAIT_SECONDS = 10.0
# The peak memory of admitting a request (admission_cost): per byte of its body (the body itself,
# pydantic_core's parse and the validated request: a 2 MiB list of token ids is a million Python
# ints) and per character of the prompt it tokenizes (HF tokenizers' pre-tokenized pieces with
# their byte alignments, and the BPE words). Measured in docs/SERVING.md ("Memory").
ADMISSION_BYTES_PER_BODY_BYTE = 32
ADMISSION_BYTES_PER_PROMPT_CHAR = 160
# An admission whose estimated cost reaches this hands what it freed back to the system (trim_heap).
TRIM_AFTER_BYTES = 16 * 2**20

logger = logging.getLogger("uvicorn.error")  # where uvicorn logs its own errors, so they show alike


@dataclasses.dataclass(frozen=True)
class ServerLimits:
    """What one client may take from the server (`gpt serve` flags of the same names)."""

    # Request bodies longer than this are refused with 413, before they are read (Content-Length)
    # or as soon as the streamed bytes pass it (chunked). 2 MiB holds 128k token ids with room to
    # spare, and keeps the longest step that holds the GIL (validating a million ids) near 40 ms.
    max_body_bytes: int = 2 * 2**20
    # A connection's request line and headers must arrive within this many seconds of its opening
    # (or of its previous response): slowloris-style clients are cut off with 408.
    timeout_headers: float = 10.0
    # The body must arrive within this many seconds of the headers (408 otherwise).
    timeout_body: float = 30.0
    # An idle keep-alive connection is closed after this many seconds (uvicorn's own default).
    timeout_keep_alive: float = 5.0
    # Open connections at most: past it, the connection waiting longest for a request is closed to
    # make room, and a new one is refused with 503 when every open one has a request in flight.
    max_connections: int = 1024
    # Memory that the requests being admitted (parsed, validated, rendered, tokenized) may take
    # together, by their estimated peak (admission_cost): a request that does not fit waits its
    # turn, up to ADMISSION_WAIT_SECONDS, then gets 503. A maximal (2 MiB) text prompt is estimated
    # at 384 MiB, so 512 MiB tokenizes one at a time (its peak is 289 MB with SmolLM2's tokenizer),
    # beside smaller requests: a SmolLM2 chat is estimated at 10 MiB (its 65,536 characters at most).
    admission_bytes: int = 512 * 2**20

    def __post_init__(self):
        for name in ("max_body_bytes", "max_connections", "admission_bytes"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int):
                raise TypeError(f"{name} must be an int, got {getattr(self, name)!r}")
        for field in dataclasses.fields(self):
            if not getattr(self, field.name) > 0:
                raise ValueError(f"{field.name} must be > 0, got {getattr(self, field.name)!r}")


class EventRelay:
    """Hands the engine's events to the event loop, waking it once per burst, not once per event.

    A step emits an event for each of its sequences, back to back on the engine's thread. Waking
    the loop for each (`call_soon_threadsafe`: a write to its self-pipe, which lets the loop's
    thread take the GIL) would interleave the loop's work on the stream responses with the
    engine's sampling of the rest of the step, so the step's Python part would wait on the
    responses. Here the first event of a burst schedules one drain and the rest are appended, so
    the loop delivers them while the next step's compiled code runs (the GIL released).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Queue, object]] = []

    def post(self, queue: asyncio.Queue, event) -> None:
        """From any thread: `queue.put_nowait(event)` on the loop, in posting order."""
        with self._lock:
            self._pending.append((queue, event))
            if len(self._pending) > 1:
                return  # a drain is already scheduled and will take this one too
        self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for queue, event in pending:
            queue.put_nowait(event)


def _prompt_kind(value) -> str | None:
    return "text" if isinstance(value, str) else "token_ids" if isinstance(value, list) else None


def _one_or_many(value):
    return [value] if isinstance(value, str) else value


# Tags of the unions below: validation errors carry them in their location, messages do not.
_UNION_TAGS = (
    "text",
    "token_ids",
    *(f"type={kind}" for kind in ("text", "json_object", "json_schema")),
    "choice=mode",
    "choice=function",
)


# The sampling fields both endpoints take, alike.
_ModelName = Annotated[str, Field(max_length=256)] | None
_MaxTokens = Annotated[int, Field(ge=0)]
_Temperature = Annotated[float, Field(ge=0.0)]
_TopP = Annotated[float, Field(gt=0.0, le=1.0)]
_TopK = Annotated[int, Field(ge=1)] | None
_Seed = Annotated[int, Field(ge=0)] | None
_Stop = (
    Annotated[
        list[Annotated[str, Field(min_length=1, max_length=MAX_STOP_STRING_LENGTH)]],
        Field(max_length=MAX_STOP),
        BeforeValidator(_one_or_many, json_schema_input_type=str | list[str]),
    ]
    | None
)
# Choices per request: the engine's MAX_CHOICES (16), forked from one prefill of the prompt.
_N = Annotated[int, Field(ge=1, le=MAX_CHOICES)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class _TextFormat(_Strict):
    type: Literal["text"]


class _JsonObjectFormat(_Strict):
    type: Literal["json_object"]


class JsonSchemaSpec(_Strict):
    """`response_format.json_schema`: the schema the answer is decoded under (gpt.structured_output),
    strict or not (decoding follows it either way)."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
    description: str | None = None
    schema_: Annotated[dict[str, Any], Field(alias="schema")]
    strict: bool | None = None


class _JsonSchemaFormat(_Strict):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


def _format_kind(value) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else None
    return f"type={kind}" if kind in ("text", "json_object", "json_schema") else None


# `response_format`, OpenAI's: plain text, any JSON object, or JSON that a schema accepts. Tagged
# "type=..." so that an error's location (_invalid) drops the tag, not a field of the same name.
_ResponseFormat = (
    Annotated[
        Annotated[_TextFormat, Tag("type=text")]
        | Annotated[_JsonObjectFormat, Tag("type=json_object")]
        | Annotated[_JsonSchemaFormat, Tag("type=json_schema")],
        Discriminator(
            _format_kind,
            custom_error_type="response_format_type",
            custom_error_message='type must be "text", "json_object" or "json_schema"',
        ),
    ]
    | None
)


class FunctionSpec(_Strict):
    """A tool's function: its name, what it does and its arguments' JSON schema (`parameters`)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolSpec(_Strict):
    type: Literal["function"]
    function: FunctionSpec


class _FunctionName(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: _FunctionName


def _tool_choice_kind(value) -> str | None:
    return "choice=mode" if isinstance(value, str) else "choice=function" if isinstance(value, dict) else None


# `tool_choice`: a mode, or the function to call. Tagged so that an error's location reads
# "tool_choice", not the union member's name (_invalid drops the tags).
_ToolChoice = (
    Annotated[
        Annotated[Literal["none", "auto", "required"], Tag("choice=mode")]
        | Annotated[NamedToolChoice, Tag("choice=function")],
        Discriminator(
            _tool_choice_kind,
            custom_error_type="tool_choice_type",
            custom_error_message='must be "none", "auto", "required" or {"type": "function", "function": {"name"}}',
        ),
    ]
    | None
)


class ToolCallFunction(_Strict):
    name: str
    arguments: str  # JSON text, as OpenAI's API carries it


class MessageToolCall(_Strict):
    id: str
    type: Literal["function"]
    function: ToolCallFunction


class CompletionRequest(BaseModel):
    """The fields of OpenAI's completions request that this server implements (others are refused,
    so that a client never believes an option took effect when it did not). Strict: "3" is not a
    number nor "yes" a boolean, and NaN or Infinity is no number at all."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    model: _ModelName = None
    prompt: Annotated[
        Annotated[str, Tag("text")]
        | Annotated[list[Annotated[int, Field(ge=0, le=2**63 - 1)]], Field(min_length=1), Tag("token_ids")],
        Discriminator(
            _prompt_kind,
            custom_error_type="prompt_type",
            custom_error_message="prompt must be a string or a list of token ids",
        ),
    ]
    max_tokens: _MaxTokens = 16
    temperature: _Temperature = 1.0
    top_p: _TopP = 1.0
    top_k: _TopK = None
    seed: _Seed = None
    stop: _Stop = None
    stream: bool = False
    n: _N = 1
    user: str | None = None
    # The most likely alternatives listed with each token's logprob (0 to 5, as OpenAI's).
    logprobs: Annotated[int, Field(ge=0, le=MAX_COMPLETION_LOGPROBS)] | None = None
    # The prompt's text before the completion's, with its tokens' logprobs when `logprobs` is given.
    echo: bool = False
    response_format: _ResponseFormat = None


class ChatMessage(BaseModel):
    """One message of a conversation: its text content (no content parts or names), an assistant's
    `tool_calls` (its content may then be null), or a tool's answer to the call `tool_call_id`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: Annotated[list[MessageToolCall], Field(max_length=MAX_TOOLS)] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _fields_of_its_role(self):
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs its content (a string)")
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f"tool_calls are an assistant's, not a {self.role} message's")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("a tool message, and only a tool message, has the tool_call_id it answers")
        return self


class ChatCompletionRequest(BaseModel):
    """The fields of OpenAI's chat completions request that this server implements, as strict as
    CompletionRequest. `max_tokens` or its newer name `max_completion_tokens` (default: the rest of
    the model's context)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    model: _ModelName = None
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
    max_tokens: _MaxTokens | None = None
    max_completion_tokens: _MaxTokens | None = None
    temperature: _Temperature = 1.0
    top_p: _TopP = 1.0
    top_k: _TopK = None
    seed: _Seed = None
    stop: _Stop = None
    stream: bool = False
    n: _N = 1
    user: str | None = None
    logprobs: bool | None = None
    # The most likely alternatives listed with each token's logprob (0 to 20, as OpenAI's); needs
    # `logprobs: true`.
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    response_format: _ResponseFormat = None
    # Functions the model may call (rendered by the chat template), and whether it must: "auto"
    # when there are tools, a call to one forced by "required" or by its name (gpt.tool_calls).
    tools: Annotated[list[ToolSpec], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: _ToolChoice = None
    parallel_tool_calls: bool | None = None


def tool_choice_of(body: ChatCompletionRequest):
    """A chat request's tool_choice as gpt.tool_calls takes it: "none", "auto", "required" or
    {"type": "function", "function": {"name": ...}}; OpenAI's default is "auto" with tools, "none"
    without."""
    choice = body.tool_choice
    if choice is None:
        return "auto" if body.tools else "none"
    return choice.model_dump() if isinstance(choice, NamedToolChoice) else choice


def _parse_request(raw: bytes, kind: type[BaseModel]) -> BaseModel:
    """Runs in a worker thread. Parsing first and validating the parsed objects is two GIL holds of
    about 25 and 40 ms for a 2 MiB list of ids where `model_validate_json` is one of about 140."""
    return kind.model_validate(pydantic_core.from_json(raw))


def _token_array(ids: list[int]) -> np.ndarray:
    """`np.asarray(ids)` a slice at a time: over a 2 MiB body's million ids one call holds the GIL
    for about 60 ms, and the event loop's thread would wait that long (the engine's check of a
    token array is vectorized)."""
    step = 1 << 16
    if not len(ids):
        return np.zeros(0, np.int64)
    return np.concatenate([np.asarray(ids[i : i + step], dtype=np.int64) for i in range(0, len(ids), step)])


def text_encoder(tokenizer) -> Callable[[str], list[int]]:
    """`tokenizer.encode`, or a function that gives the same ids through its `tokenizers` backend's
    `encode_batch_fast` when the backend agrees with `encode` on probe texts (special tokens, BOS,
    spaces, non-ASCII; a wrapper that adds tokens of its own keeps its `encode`). The fast batch
    call keeps no offsets and lets other threads run while it encodes: during a 1.9 MB SmolLM2
    prompt /health answered within 21-60 ms, where through `encode` it waited 5.9 s (in a plain
    thread, `encode` and `encode_batch` leave the GIL to others at most every 200 ms or so, the
    fast call every 35 ms; freeing `encode`'s result alone holds it 80 ms), and over 1.9 MB of
    text it peaks at 249 MB more where `encode` peaks at 349 MB more."""
    backend = getattr(tokenizer, "backend", None)
    batch = getattr(backend, "encode_batch_fast", None)
    if batch is None:
        return tokenizer.encode

    def encode(text: str) -> list[int]:
        return batch([text])[0].ids

    try:
        agrees = all(encode(text) == list(tokenizer.encode(text)) for text in _probe_texts(tokenizer, backend))
    except Exception:  # noqa: BLE001 -- any failure to compare means: keep tokenizer.encode
        agrees = False
    return encode if agrees else tokenizer.encode


def _probe_texts(tokenizer, backend) -> list[str]:
    """Texts on which `text_encoder` compares the backend with `tokenizer.encode`."""
    texts = ["", "Hello, world!", "  two spaces,\ta tab\r\n", "naïve café, 日本語 😀", "3.14159 * 2**10 = x"]
    specials = [getattr(tokenizer, name, "") for name in ("bos_token", "eos_token")]
    with contextlib.suppress(Exception):
        added = backend.get_added_tokens_decoder()
        specials += [added[i].content for i in sorted(added)[:64]]
    texts += [f"{special}user\nHi!{special}" for special in dict.fromkeys(specials) if special]
    return texts


# Normalizers that never make text shorter, and pre-tokenizers that keep every character (Split's
# "Removed", Whitespace and BERT's pre-tokenizer drop some): through these, a token's own length
# bounds the characters of text it stands for.
_LENGTHENING_NORMALIZERS = {"Sequence", "Prepend", "Replace", "Lowercase", "NFD"}
_KEEPING_PRE_TOKENIZERS = {"Sequence", "ByteLevel", "Split", "Digits", "Metaspace", "Punctuation", "UnicodeScripts"}
# Bytes that UTF-8 text never holds: a vocabulary needs no token for them.
_NOT_IN_UTF8 = frozenset({0xC0, 0xC1, *range(0xF5, 0x100)})


@dataclasses.dataclass(frozen=True)
class TokenReach:
    """What a tokenizer's token can stand for: at most `chars` characters of text, not counting the
    `dropped` characters, which make no token at all (control bytes missing from a byte-level
    vocabulary: SmolLM2's has no token for "\x04", so a million of them are no token)."""

    chars: int
    dropped: str = ""

    def counted(self, text: str) -> int:
        """The characters of `text` that some token must stand for."""
        return len(text) - sum(text.count(c) for c in self.dropped)


def token_reach(tokenizer) -> TokenReach | None:
    """How much text one token of `tokenizer` can stand for, where its kind proves a bound: bytes
    (one character), or a `tokenizers` BPE whose every character is some token (its byte-level
    alphabet, or byte fallback; byte-level bytes without a token are `dropped` when they are whole
    characters) through normalizers and pre-tokenizers that drop nothing (the longest token's
    length). None where a character could vanish unaccounted or merge into one unknown token
    (fuse_unk), so that no length of text is provably too many tokens."""
    from gpt.tokenizer import ByteTokenizer

    if isinstance(tokenizer, ByteTokenizer):
        return TokenReach(1)  # a character is at least one byte
    backend = getattr(tokenizer, "backend", None)
    model = getattr(backend, "model", None)
    if type(model).__name__ != "BPE":
        return None
    try:
        normalizer = json.loads(backend.normalizer.__getstate__()) if backend.normalizer is not None else None
        pre_tokenizer = json.loads(backend.pre_tokenizer.__getstate__()) if backend.pre_tokenizer is not None else None
        vocab = backend.get_vocab(with_added_tokens=True)
    except Exception:  # noqa: BLE001 -- a backend this does not understand proves nothing
        return None
    normalizers, pre_tokenizers = _steps(normalizer, "normalizers"), _steps(pre_tokenizer, "pretokenizers")
    if not vocab or not all(step.get("type") in _LENGTHENING_NORMALIZERS for step in normalizers):
        return None
    for step in normalizers:  # a Replace that shortens text, or matches a regex, may shorten it
        pattern = step.get("pattern", {})
        if step["type"] == "Replace" and not len(pattern.get("String") or "") <= len(step.get("content", "")):
            return None
    for step in pre_tokenizers:
        if step.get("type") not in _KEEPING_PRE_TOKENIZERS or step.get("behavior") == "Removed":
            return None
    longest = max(len(token) for token in vocab)
    if any(step["type"] == "ByteLevel" for step in pre_tokenizers):
        missing = {b for b, c in _byte_level_alphabet().items() if c not in vocab} - _NOT_IN_UTF8
        # A character with one byte left makes a token of it; one with none left is dropped whole,
        # which only an ASCII character can be while every continuation byte has its token.
        if not missing & set(range(0x80, 0xC0)):
            return TokenReach(longest, "".join(chr(b) for b in sorted(missing) if b < 0x80))
    if model.byte_fallback and all(f"<0x{b:02X}>" in vocab for b in set(range(256)) - _NOT_IN_UTF8):
        return TokenReach(longest)
    if model.unk_token in vocab and not model.fuse_unk:
        return TokenReach(longest)
    return None


def _byte_level_alphabet() -> dict[int, str]:
    """GPT-2's byte-level alphabet: the character that stands for each byte (printable Latin-1
    bytes for themselves, the others for U+0100 on, in order)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(others)}


def _steps(spec: dict | None, key: str) -> list[dict]:
    """A tokenizers normalizer's or pre-tokenizer's JSON as its list of steps, Sequences flattened."""
    if spec is None:
        return []
    if spec.get("type") == "Sequence":
        return [step for inner in spec.get(key, []) for step in _steps(inner, key)]
    return [spec]


class AdmissionBudget:
    """Bytes of memory that the requests being admitted may take together (ServerLimits.
    admission_bytes). Requests are let in in arrival order: one that does not fit waits, as do
    those after it (so that small requests cannot starve a large one), up to a deadline. One whose
    cost alone passes the budget is let in when nothing else is admitted. Thread-safe, so that
    one budget serves every event loop that serves the app (as EventRelay's are, one per loop)."""

    def __init__(self, total: int):
        self.total = total
        self.in_use = 0
        self._lock = threading.Lock()
        self._waiting: collections.deque[tuple[int, asyncio.Future]] = collections.deque()

    async def acquire(self, cost: int, timeout: float) -> int | None:
        """Waits for `cost` bytes (at most the whole budget) and returns the bytes taken, for
        release(); None when they did not come within `timeout` seconds."""
        cost = min(cost, self.total)
        with self._lock:
            if not self._waiting and self.in_use + cost <= self.total:
                self.in_use += cost
                return cost
            let_in = asyncio.get_running_loop().create_future()
            waiter = (cost, let_in)
            self._waiting.append(waiter)
        try:
            # Not wait_for: it would return a result that came as its caller was cancelled.
            async with asyncio.timeout(timeout):
                await let_in
        except TimeoutError:
            if let_in.done() and not let_in.cancelled():  # let in as the time ran out
                return cost
            return None  # a grant that comes later finds its future cancelled and gives the bytes back
        except BaseException:
            if let_in.done() and not let_in.cancelled():  # let in as the caller was cancelled
                self.release(cost)
            raise
        finally:
            with self._lock:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(waiter)
                self._let_in()  # those behind a waiter that gave up may fit
        return cost

    def release(self, cost: int) -> None:
        with self._lock:
            self.in_use -= cost
            self._let_in()

    def _let_in(self) -> None:
        """Grants waiters from the front while they fit (the lock held); each future is resolved on
        its own loop."""
        while self._waiting and self.in_use + self._waiting[0][0] <= self.total:
            cost, future = self._waiting.popleft()
            if not future.done():
                self.in_use += cost
                future.get_loop().call_soon_threadsafe(self._resolve, future, cost)

    def _resolve(self, future: asyncio.Future, cost: int) -> None:
        if future.done():  # its waiter gave up (cancelled, or out of time) after the grant
            self.release(cost)
        else:
            future.set_result(None)


_malloc_trim = None  # glibc's, found on first use (False: there is none)


def trim_heap() -> None:
    """Returns the memory that this process has freed to the system (glibc's malloc_trim; nothing
    elsewhere). glibc keeps what a thread frees in that thread's own arena: each worker thread that
    tokenized a long prompt would otherwise hold the peak of that prompt (140 bytes a character)
    for good, so that the server's resident memory only grew, six workers' worth."""
    global _malloc_trim
    if _malloc_trim is None:
        import ctypes
        import ctypes.util

        try:
            _malloc_trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)  # ctypes releases the GIL for the call


def _error_body(status: int, message: str, param: str | None = None, code=None, kind=None) -> dict:
    kind = kind or ("invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status if code is None else code}}


def _error(status: int, message: str, param: str | None = None, headers=None, code=None) -> JSONResponse:
    return JSONResponse(_error_body(status, message, param, code), status_code=status, headers=headers)


def _invalid(errors: list[dict]) -> JSONResponse:
    """422 naming the first invalid field. The input is never echoed: it may be NaN, which JSON
    cannot carry, or megabytes long."""
    first = errors[0]
    path = [str(part) for part in first["loc"] if part not in ("body", *_UNION_TAGS)]
    param = path[0] if path else None
    message = f"{'.'.join(path)}: {first['msg']}" if path else "the body must be a JSON object"
    return _error(422, message, param)


async def _send_error(send, status: int, message: str, close: bool = False) -> None:
    """A whole error response from ASGI middleware; `close` when the request's body is left
    unread, so that the rest of it is not parsed as the next request."""
    body = json.dumps(_error_body(status, message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BoundedBody:
    """ASGI middleware: reads the request's body before the app sees it, refusing one longer than
    `max_bytes` with 413 (from its Content-Length, before reading a byte, or when the bytes read
    pass it) and one slower than `timeout` seconds with 408. At most `max_bytes` plus one read
    (uvicorn pauses the socket past 64 KiB unread) are ever held."""

    def __init__(self, app, max_bytes: int, timeout: float):
        self.app, self.max_bytes, self.timeout = app, max_bytes, timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_long = f"the request body is longer than max_body_bytes={self.max_bytes}"
        declared = dict(scope["headers"]).get(b"content-length")
        # The HTTP parser has refused a Content-Length that is not a number.
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await _send_error(send, 413, f"{too_long} (Content-Length: {int(declared)})", close=True)
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return  # nobody to answer
                    size += len(message.get("body", b""))
                    if size > self.max_bytes:
                        return await _send_error(send, 413, too_long, close=True)
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            message = f"the request body did not arrive within timeout_body={self.timeout:g} s"
            return await _send_error(send, 408, message, close=True)
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if replayed:  # after the body, the app waits here for the client to leave
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class LastResort:
    """ASGI middleware: an exception that escapes the app becomes a 500 in the documented shape,
    logged, on a connection that stays open (Starlette's ServerErrorMiddleware answers in plain
    text and raises again, and uvicorn then closes the connection). Once a response has started,
    only closing the connection can tell the client it is cut short, so that is left to uvicorn."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracked(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as e:
            if started:
                raise
            logger.exception("[gpt] %s %s failed", scope.get("method"), scope.get("path"))
            await _send_error(send, 500, f"internal error: {type(e).__name__}")


@dataclasses.dataclass(frozen=True)
class _Answering:
    """What a request asks of its answer's shape: `n` choices; each token's logprobs entry
    (`logprobs`, written with `strings`); completions' `echo` of the prompt (its text, and its
    tokens for their logprobs)."""

    n: int = 1
    logprobs: bool = False
    strings: TokenStrings | None = None
    echo: str | None = None
    prompt: tuple[int, ...] = ()
    # A chat with tools: its tool_choice (gpt.tool_calls), the answer's calls parsed out of its text.
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool = True


class _CompletionShape:
    """OpenAI's text_completion objects, each choice with its `token_ids` too (the completion's)."""

    prefix = "cmpl"

    def __init__(self, completion_id: str, created: int, model: str, answering: _Answering):
        self._head = {"id": completion_id, "object": "text_completion", "created": created, "model": model}
        self._answering = answering
        self._lengths = [0] * answering.n  # characters of each choice's text streamed so far

    @staticmethod
    def _choice(index, text, finish_reason, token_ids, logprobs=None):
        choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
        return choice | {"token_ids": token_ids}

    def _chunk(self, *choice) -> dict:
        return self._head | {"choices": [self._choice(*choice)]}

    def _prompt_logprobs(self, entries) -> dict:
        prompt, strings = list(self._answering.prompt), self._answering.strings
        return completion_logprobs(prompt, list(entries), text_offsets(strings.tokenizer, prompt), strings)

    def opening(self) -> list[dict]:
        """The echoed prompt's text first, when it has no logprobs to wait for."""
        echo = self._answering.echo
        if echo is None or self._answering.logprobs:
            return []
        self._lengths = [len(echo)] * self._answering.n
        return [self._chunk(index, echo, None, []) for index in range(self._answering.n)]

    def chunks(self, event) -> list[dict]:
        """One chunk per event (text "" while a character or a possible stop string is open); the
        echoed prompt's text with its logprobs when they come (`prompt_logprobs`)."""
        index, answering = event.index, self._answering
        if event.prompt_logprobs is not None:
            self._lengths[index] = len(answering.echo or "")
            return [self._chunk(index, answering.echo or "", None, [], self._prompt_logprobs(event.prompt_logprobs))]
        tokens = [event.token] if event.token is not None else []
        logprobs = None
        if answering.logprobs:
            entries = [event.logprob] if event.logprob is not None else []
            logprobs = completion_logprobs(tokens, entries, [self._lengths[index]] * len(tokens), answering.strings)
        self._lengths[index] += len(event.text)
        return [self._chunk(index, event.text, event.finish_reason, tokens, logprobs)]

    def whole(self, handles) -> dict:
        answering, choices = self._answering, []
        echo = answering.echo or ""
        for handle in handles:
            logprobs = None
            if answering.logprobs:
                offsets = [len(echo) + offset for offset in handle.text_offsets]
                logprobs = completion_logprobs(handle.tokens, handle.logprobs, offsets, answering.strings)
                if handle.prompt_logprobs is not None:
                    logprobs = {
                        key: value + logprobs[key]
                        for key, value in self._prompt_logprobs(handle.prompt_logprobs).items()
                    }
            text = echo + handle.text
            choices.append(self._choice(handle.index, text, handle.finish_reason, handle.tokens, logprobs))
        return self._head | {"choices": choices}


class _ChatShape:
    """OpenAI's chat.completion object, and its stream of chat.completion.chunk deltas: for each
    choice, the role first, then each piece of text (with its tokens' logprobs when asked), then
    an empty delta with the finish reason."""

    prefix = "chatcmpl"

    def __init__(self, completion_id: str, created: int, model: str, answering: _Answering):
        self._id, self._created, self._model = completion_id, created, model
        self._answering = answering
        # With tools, each choice's text passes through a parser that holds back what may be a call.
        self._tool_streams = None
        if answering.tool_choice is not None:
            forced = answering.tool_choice if answering.tool_choice not in ("auto", "none") else None
            self._tool_streams = [tool_calls.ToolCallStream(forced) for _ in range(answering.n)]

    def _calls(self, calls: list, finish_reason):
        """The calls to answer with (the first only without parallel_tool_calls), and the finish
        reason: "tool_calls" when there are any."""
        calls = calls if self._answering.parallel_tool_calls else calls[:1]
        return calls, "tool_calls" if calls and finish_reason in ("stop", "length") else finish_reason

    def _tool_text(self, event):
        """(the content to send, the finish reason, the calls) of an event: with tools, the text
        held back while it may be a call, and the calls parsed out of it at the end."""
        if self._tool_streams is None:
            return event.text, event.finish_reason, []
        stream = self._tool_streams[event.index]
        text = stream.feed(event.text)
        if event.finish_reason is None:
            return text, None, []
        rest, calls = stream.finish()
        calls, finish_reason = self._calls(calls, event.finish_reason)
        return text + rest, finish_reason, calls

    def _object(self, kind: str, choices: list[dict]) -> dict:
        return {"id": self._id, "object": kind, "created": self._created, "model": self._model, "choices": choices}

    def _chunk(self, index: int, delta: dict, finish_reason=None, logprobs=None) -> dict:
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        return self._object("chat.completion.chunk", [choice])

    def opening(self) -> list[dict]:
        return [self._chunk(index, {"role": "assistant", "content": ""}) for index in range(self._answering.n)]

    def chunks(self, event) -> list[dict]:
        out = []
        text, finish_reason, calls = self._tool_text(event)
        if self._answering.logprobs and event.logprob is not None:
            content = chat_content([event.logprob], self._answering.strings)
            out.append(self._chunk(event.index, {"content": text}, logprobs={"content": content}))
        elif text:
            out.append(self._chunk(event.index, {"content": text}))
        if calls:
            out.append(self._chunk(event.index, {"tool_calls": [call.openai(i) for i, call in enumerate(calls)]}))
        if finish_reason is not None:
            out.append(self._chunk(event.index, {}, finish_reason))
        return out

    def whole(self, handles) -> dict:
        choices = []
        for handle in handles:
            message = {"role": "assistant", "content": handle.text}
            finish_reason = handle.finish_reason
            if self._answering.tool_choice is not None:
                content, calls = tool_calls.answer(handle.text, self._answering.tool_choice)
                calls, finish_reason = self._calls(calls, finish_reason)
                message = {"role": "assistant", "content": content if calls else handle.text}
                if calls:
                    message["tool_calls"] = [call.openai() for call in calls]
            logprobs = None
            if self._answering.logprobs:
                logprobs = {"content": chat_content(handle.logprobs, self._answering.strings)}
            choices.append(
                {"index": handle.index, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}
            )
        return self._object("chat.completion", choices)


def create_app(
    engine: Engine,
    model_name: str = "gpt",
    instance: str | None = None,
    limits: ServerLimits | None = None,
    model_dir: str | None = None,
) -> FastAPI:
    """The app over a started engine; the engine is shut down (drained) when the app's lifespan ends.
    `instance` names this server in every completion's `X-GPT-Instance` header (default: host:pid),
    so a client behind a load balancer can tell the replicas apart. The app applies `limits`'
    body size and body timeout; the connection limits are the HTTP protocol's (`serve`). The chat
    template is the tokenizer's (a GGUF file's), else `model_dir`'s (a HF directory's
    tokenizer_config.json or chat_template.jinja: gpt.chat.chat_spec); without one,
    /v1/chat/completions answers 400."""
    instance = instance or f"{socket.gethostname()}:{os.getpid()}"
    limits = limits or ServerLimits()

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await asyncio.to_thread(engine.shutdown, True)
        done = engine.metrics()
        print(
            f"[gpt] drained: {done.requests_finished} requests finished, {done.requests_cancelled} cancelled",
            flush=True,
        )

    app = FastAPI(title="gpt", lifespan=lifespan)
    tokenizer = engine.tokenizer
    relays: dict[asyncio.AbstractEventLoop, EventRelay] = {}  # one per event loop serving the app
    # The tokens that end every request (the model's EOS: GPT.end_of_generation); a chat's also
    # end at its template's end of turn.
    eos = frozenset(getattr(engine.model, "end_of_generation", ()))
    chat_spec, no_chat = None, None
    if tokenizer is None:
        no_chat = f"the model {model_name!r} has no tokenizer, so it has no chat template"
    else:
        try:
            chat_spec = chat.chat_spec(tokenizer, model_dir)
        except chat.NoChatTemplate:
            no_chat = f"the model {model_name!r} has no chat template (a base model): use /v1/completions"
        except ValueError as e:
            no_chat = f"the model {model_name!r} cannot chat: {e}"
    # The longest completion prompt tokenized, checked before tokenizing: the body limit in
    # characters, or the characters that the model's context provably holds (block_size tokens of
    # the tokenizer's longest: token_reach), whichever is less. (A chat's rendered prompt has
    # gpt.chat's bound, chat.max_prompt_chars, applied while it renders: chat_prompt.)
    block_size = engine.model.config.block_size
    reach = token_reach(tokenizer) if tokenizer is not None else None
    max_prompt_chars = min(limits.max_body_bytes, block_size * reach.chars) if reach else limits.max_body_bytes

    def prompt_too_long(prompt: str) -> str | None:
        """What is wrong with a prompt of this many characters, if anything."""
        if len(prompt) <= max_prompt_chars or reach is None or (counted := reach.counted(prompt)) <= max_prompt_chars:
            return None
        return (
            f"prompt is {counted} characters, more than the model's context can hold: block_size={block_size} "
            f"tokens of at most {reach.chars} characters each ({max_prompt_chars} characters)"
        )

    encode_text = text_encoder(tokenizer) if tokenizer is not None else None
    token_strings = TokenStrings(tokenizer)  # the text and bytes of tokens in logprobs, cached
    budget = AdmissionBudget(limits.admission_bytes)

    def admission_cost(body_bytes: int, kind: type[BaseModel]) -> int:
        """The estimated peak memory of admitting a request: its body's, and its prompt's
        tokenizing: a completion's text is at most the body long (characters its tokenizer drops
        are not refused before tokenizing), a chat's rendered conversation at most
        chat.max_prompt_chars whatever the body (a template may repeat a message)."""
        if tokenizer is None:
            prompt_chars = 0
        elif kind is ChatCompletionRequest:
            prompt_chars = chat.max_prompt_chars(block_size, limits.max_body_bytes)
        else:
            prompt_chars = body_bytes
        return ADMISSION_BYTES_PER_BODY_BYTE * body_bytes + ADMISSION_BYTES_PER_PROMPT_CHAR * prompt_chars

    # An id past the vocabulary (a config.json's, say) can never be sampled, so cannot end anything.
    vocab_size = engine.model.config.vocab_size
    chat_end_ids = frozenset(i for i in (chat_spec.end_ids if chat_spec else frozenset()) | eos if i < vocab_size)

    # Added last, LastResort is the outer one: it also catches what BoundedBody raises.
    app.add_middleware(BoundedBody, max_bytes=limits.max_body_bytes, timeout=limits.timeout_body)
    app.add_middleware(LastResort)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        return _invalid(exc.errors())

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "gpt"}]}

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(prometheus_text(engine.metrics()), media_type="text/plain; version=0.0.4")

    def completion_prompt(body: CompletionRequest):
        """(the prompt's ids, max_tokens, the ids that end it), or the error response."""
        if isinstance(body.prompt, str):
            if tokenizer is None:
                return _error(400, "this model has no tokenizer: send the prompt as token ids", "prompt")
            if too_long := prompt_too_long(body.prompt):
                return _error(400, too_long, "prompt")
            try:
                ids = encode_text(body.prompt)
            except ValueError as e:  # UnicodeError included
                return _error(400, f"prompt cannot be tokenized: {e}", "prompt")
            if not len(ids):
                return _error(400, "prompt must not be empty", "prompt")
        else:
            ids = body.prompt
        return ids, body.max_tokens, eos

    def chat_prompt(body: ChatCompletionRequest):
        """(the rendered conversation's ids, max_tokens, the ids that end it), or the error response."""
        if chat_spec is None:
            return _error(400, no_chat, "messages")
        if body.max_tokens is not None and body.max_completion_tokens is not None:
            return _error(400, "give max_tokens or max_completion_tokens, not both", "max_completion_tokens")
        messages = tool_calls.template_messages([m.model_dump(exclude_none=True) for m in body.messages])
        tools = [tool.model_dump(exclude_none=True) for tool in body.tools or ()]
        try:
            tool_calls.check_choice(tools, tool_choice_of(body))
        except ValueError as e:  # the message starts with the field: tools or tool_choice
            return _error(400, str(e), str(e).split(":")[0])
        # The template renders the tools as transformers' apply_chat_template(tools=...) has it
        # render them; "none" leaves them out, so that the model cannot call what it cannot see.
        tools_variable = {"tools": tools} if tools and body.tool_choice != "none" else {}
        if tools_variable and "tools" not in chat_spec.template.source:
            return _error(400, f"tools: the chat template ({chat_spec.template.origin}) does not render tools", "tools")
        # The rendered prompt is bounded like a body: the body limit, or the context in tokens
        # (chat.MAX_CHARS_PER_TOKEN a token), whichever comes first, before it is tokenized.
        max_chars = chat.max_prompt_chars(engine.model.config.block_size, limits.max_body_bytes)
        try:
            rendered = chat_spec.template.render(
                messages, add_generation_prompt=True, max_chars=max_chars, **tools_variable
            )
            ids = chat.prompt_ids(tokenizer, chat_spec, rendered)
        except ValueError as e:  # chat.ChatTemplateError (naming the template: failed, overran), tokenizing
            return _error(400, f"messages: {e}", "messages")
        max_tokens = body.max_tokens if body.max_tokens is not None else body.max_completion_tokens
        if max_tokens is None:  # the rest of the context (past it, the engine names the prompt's length)
            max_tokens = max(engine.model.config.block_size - len(ids), 1)
        return ids, max_tokens, chat_end_ids

    def output_grammar(body, end_ids: frozenset[int]):
        """The grammar a request's answer is decoded under (gpt.structured_output): its
        response_format's JSON, or the call its tool_choice forces (gpt.tool_calls.forced_schema);
        None for free text; or the error response."""
        response_format = body.response_format
        forced = None
        if isinstance(body, ChatCompletionRequest) and body.tools and tool_choice_of(body) not in ("none", "auto"):
            tools = [tool.model_dump(exclude_none=True) for tool in body.tools]
            forced = tool_calls.forced_schema(tools, tool_choice_of(body), body.parallel_tool_calls is not False)
        if forced is not None and not isinstance(response_format, (_TextFormat, type(None))):
            message = "response_format and a tool_choice that forces a call both constrain the answer: give one"
            return _error(400, message, "response_format")
        if forced is not None:
            param, name, schema = "tools", "tools: the forced call's parameters", forced
        elif isinstance(response_format, _JsonObjectFormat):
            param, name, schema = "response_format", "response_format", True
        elif isinstance(response_format, _JsonSchemaFormat):
            param, name = "response_format", "response_format.json_schema.schema"
            schema = response_format.json_schema.schema_
        else:
            return None
        if tokenizer is None:
            return _error(400, f"{param} needs the model's tokenizer, and this model has none", param)
        try:
            return structured_output.json_schema_grammar(
                tokenizer, schema, vocab_size=vocab_size, end_ids=end_ids, name=name
            )
        except ValueError as e:
            return _error(400, str(e), param)

    def admit(raw: bytes, on_event, kind: type[BaseModel]):
        """Parses and validates a request of `kind`, makes its prompt's tokens and submits it to the
        engine: returns (the request, its handle, its prompt's length), or the error response. Runs
        in a worker thread, since each step takes time in proportion to the body (the loop would
        not answer /health meanwhile), and what they build is freed here too (the list of a 30 MB
        prompt's ids takes 0.1 s to free)."""
        try:
            body = _parse_request(raw, kind)
        except ValidationError as e:
            return _invalid(e.errors(include_url=False, include_input=False))
        except ValueError as e:  # pydantic_core.from_json: the body is no JSON
            hint = " (a UTF-16 surrogate needs its pair)" if "surrogate" in str(e) or "hex escape" in str(e) else ""
            return _error(400, f"the body is not valid JSON: {e}{hint}")
        if body.model is not None and body.model != model_name:
            message = f"the model {body.model!r} does not exist: this server serves {model_name!r} (GET /v1/models)"
            return _error(404, message, "model", code="model_not_found")
        is_chat = isinstance(body, ChatCompletionRequest)
        if is_chat and body.top_logprobs is not None and not body.logprobs:
            return _error(400, "top_logprobs needs logprobs: true", "top_logprobs")
        prepared = chat_prompt(body) if is_chat else completion_prompt(body)
        if isinstance(prepared, Response):
            return prepared
        ids, max_tokens, stop_ids = prepared
        prompt = _token_array(ids)
        # Alternatives per token's logprobs entry (None: no logprobs); an echoed prompt's tokens
        # are scored too (the engine's prompt_logprobs).
        logprobs = ((body.top_logprobs or 0) if body.logprobs else None) if is_chat else body.logprobs
        echo = None
        if not is_chat and body.echo:
            echo = body.prompt if isinstance(body.prompt, str) else tokenizer.decode(ids) if tokenizer else ""
        prompt_logprobs = logprobs if echo is not None else None
        answering = _Answering(
            body.n,
            logprobs is not None,
            token_strings if logprobs is not None else None,
            echo,
            tuple(prompt.tolist()) if prompt_logprobs is not None else (),
        )
        grammar = output_grammar(body, stop_ids)
        if isinstance(grammar, Response):
            return grammar
        if is_chat and body.tools and tool_choice_of(body) != "none":  # the answer may call them (gpt.tool_calls)
            calls = dict(tool_choice=tool_choice_of(body), parallel_tool_calls=body.parallel_tool_calls is not False)
            answering = dataclasses.replace(answering, **calls)
        del ids, prepared
        # The request's own ids (or messages) are freed here.
        body = body.model_copy(update={"messages": []} if is_chat else {"prompt": []})
        sampling = dict(
            temperature=body.temperature,
            top_k=body.top_k,
            top_p=body.top_p if body.top_p < 1.0 else None,
            seed=body.seed,
            stop=stop_ids,
            stop_strings=body.stop,
            on_event=on_event,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            grammar=grammar,
        )
        try:
            if body.n == 1:
                handles = [engine.submit(prompt, max_tokens, **sampling)]
            else:  # n choices from one prefill of the prompt
                handles = engine.submit_choices(prompt, body.n, max_tokens, **sampling)
        except QueueFullError as e:
            return _error(503, str(e), None, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        except (ValueError, TypeError) as e:
            message = str(e)
            param = next((p for p in ("prompt", "max_tokens", "stop", "seed", "top_k", "top_p") if p in message), None)
            if is_chat and param == "prompt":  # the prompt is the rendered conversation
                param, message = "messages", f"messages, rendered with the chat template: {message}"
            return _error(400, message, param)
        return body, handles, len(prompt), answering

    def admit_and_trim(raw: bytes, on_event, kind: type[BaseModel], cost: int):
        """admit(), then, for a large request, what it freed handed back to the system."""
        admitted = admit(raw, on_event, kind)
        if cost >= TRIM_AFTER_BYTES:
            trim_heap()
        return admitted

    # The body is parsed in a worker thread (FastAPI would parse it on the event loop), so the
    # schemas are given to the OpenAPI document by hand, the ones they refer to (ChatMessage) among
    # its components.
    referred: dict[str, dict] = {}

    def request_body(kind: type[BaseModel]) -> dict:
        schema = kind.model_json_schema(ref_template="#/components/schemas/{model}")
        referred.update(schema.pop("$defs", {}))
        return {"requestBody": {"content": {"application/json": {"schema": schema}}, "required": True}}

    default_openapi = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            default_openapi().setdefault("components", {}).setdefault("schemas", {}).update(referred)
        return app.openapi_schema

    app.openapi = openapi

    async def respond(request: Request, response: Response, kind: type[BaseModel], shape):
        """A request of `kind` (completion or chat) answered in `shape`'s objects, plain or streamed."""
        response.headers["X-GPT-Instance"] = instance
        loop = asyncio.get_running_loop()
        relay = relays.get(loop) or relays.setdefault(loop, EventRelay(loop))
        events: asyncio.Queue = asyncio.Queue()
        raw = await request.body()
        cost = await budget.acquire(admission_cost(len(raw), kind), ADMISSION_WAIT_SECONDS)
        if cost is None:
            message = (
                f"the server is busy admitting other requests (admission_bytes={limits.admission_bytes} of memory "
                f"in use): try again"
            )
            return _error(503, message, None, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        # The budget comes back when the worker is done, even if this handler is cancelled before.
        work = asyncio.ensure_future(
            asyncio.to_thread(admit_and_trim, raw, lambda event: relay.post(events, event), kind, cost)
        )
        work.add_done_callback(lambda _: budget.release(cost))
        del raw
        admitted = await work
        if isinstance(admitted, Response):
            return admitted
        body, handles, prompt_tokens, answering = admitted
        answer = shape(f"{shape.prefix}-{uuid.uuid4().hex}", int(time.time()), model_name, answering)

        if body.stream:

            async def stream():
                try:
                    for chunk in answer.opening():
                        yield f"data: {json.dumps(chunk)}\n\n"
                    running = len(handles)  # choices not finished yet, each ending with one event
                    while running:
                        event = await events.get()
                        for chunk in answer.chunks(event):
                            yield f"data: {json.dumps(chunk)}\n\n"
                        running -= event.finish_reason is not None
                    yield "data: [DONE]\n\n"
                finally:
                    for handle in handles:  # a no-op once it has finished; frees a disconnected client's blocks
                        handle.cancel()

            return StreamingResponse(
                stream(),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-GPT-Instance": instance},
            )

        next_check = loop.time() + DISCONNECT_POLL_SECONDS
        while not all(handle.done for handle in handles):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(events.get(), DISCONNECT_POLL_SECONDS)
            if loop.time() >= next_check:
                next_check = loop.time() + DISCONNECT_POLL_SECONDS
                if await request.is_disconnected():
                    for handle in handles:
                        handle.cancel()
                    return _error(499, "client disconnected")
        if failed := next((handle for handle in handles if handle.finish_reason == "error"), None):
            return _error(500, failed.error)
        completion_tokens = sum(len(handle.tokens) for handle in handles)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        return answer.whole(handles) | {"usage": usage}

    @app.post("/v1/completions", openapi_extra=request_body(CompletionRequest))
    async def completions(request: Request, response: Response):
        return await respond(request, response, CompletionRequest, _CompletionShape)

    @app.post("/v1/chat/completions", openapi_extra=request_body(ChatCompletionRequest))
    async def chat_completions(request: Request, response: Response):
        return await respond(request, response, ChatCompletionRequest, _ChatShape)

    return app


class _ConnectionGuard:
    """Over uvicorn's HTTP protocol (one instance per connection): a deadline for each request
    head and a cap on open connections, which uvicorn lacks (its keep-alive timer runs only after a
    response, and any byte cancels it, so a client that trickles a request line in holds its
    connection forever). Parser-agnostic: a connection is waiting for a head while it has no
    request in flight (`cycle`, set when a head is complete, None or answered)."""

    limits: ServerLimits  # set by guarded_protocol, with `waiting`
    waiting: dict  # the server's connections waiting for a request head, longest waiting first

    def connection_made(self, transport):
        super().connection_made(transport)
        self._deadline = None
        self._refused = False
        self._wait_for_head()
        if len(self.connections) > self.limits.max_connections:
            self._make_room()

    def connection_lost(self, exc):
        self.waiting.pop(self, None)
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def data_received(self, data):
        if self._refused:
            return
        if self._awaiting_head():
            self._head_started = True
        super().data_received(data)

    def on_response_complete(self):
        super().on_response_complete()
        if not self.transport.is_closing():
            self._wait_for_head()

    def _awaiting_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _wait_for_head(self):
        self._head_started = False
        self.waiting.pop(self, None)
        self.waiting[self] = None
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.limits.timeout_headers, self._head_overdue)

    def _head_overdue(self):
        self._deadline = None
        if not self._awaiting_head() or self.transport.is_closing():
            return  # a request in flight: its response re-arms the deadline
        if self._head_started:
            timeout = self.limits.timeout_headers
            self._refuse(408, f"the request head did not arrive within timeout_headers={timeout:g} s")
        else:  # an idle connection: nothing was asked, so nothing is answered
            self.waiting.pop(self, None)
            self.transport.close()

    def _make_room(self):
        """Closes the connection waiting longest for a request (self is the newest waiter), or
        refuses self when every other one has a request in flight."""
        while self.waiting:
            other = next(iter(self.waiting))
            if other is self:
                break
            del self.waiting[other]  # a busy one is back in line when its response is complete
            if not other.transport.is_closing() and other._awaiting_head():
                other.transport.close()
                return
        self._refuse(503, f"max_connections={self.limits.max_connections} are open, each with a request in flight")

    def _refuse(self, status: int, message: str):
        """Answers `status` and closes, outside any request (the app never sees this connection)."""
        self._refused = True
        self.waiting.pop(self, None)
        body = json.dumps(_error_body(status, message)).encode()
        head = (
            f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()


class _HeadBytesGuard:
    """Over uvicorn's httptools protocol: llhttp bounds no request line or header, so the bytes of
    each are counted as they are parsed (h11 has `h11_max_incomplete_event_size` instead)."""

    class HeadTooLong(Exception):
        pass

    def on_message_begin(self):
        self._head_bytes = 0
        super().on_message_begin()

    def on_url(self, url: bytes):
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes):
        self._count_head(len(name) + len(value))
        super().on_header(name, value)

    def _count_head(self, size: int):
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            self._refuse(431, f"the request line and headers are longer than {MAX_HEAD_BYTES} bytes")
            raise self.HeadTooLong  # stops the parser (uvicorn takes it for a parse error, see below)

    def send_400_response(self, msg: str):
        if not self._refused:  # the answer was 431, and the connection is closing
            super().send_400_response(msg)


def guarded_protocol(limits: ServerLimits) -> type:
    """The HTTP protocol class for uvicorn (`http=`) that applies `limits` to connections: httptools'
    (uvicorn's choice when it is installed, as ray[serve] installs it) or else h11's."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        bases = (_HeadBytesGuard, _ConnectionGuard, HttpToolsProtocol)
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        bases = (_ConnectionGuard, H11Protocol)
    return type("GuardedHttpProtocol", bases, {"limits": limits, "waiting": {}})


def _file_room(wanted: int) -> int:
    """How many connections the process can open files for (raising its soft limit up to the hard
    one when that lets `wanted` fit); a few dozen files stay for the model, the engine and Python."""
    import resource

    reserve = 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted + reserve:
        target = wanted + reserve if hard == resource.RLIM_INFINITY else min(hard, wanted + reserve)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return wanted if soft == resource.RLIM_INFINITY else min(wanted, max(1, soft - reserve))


def serve(
    engine: Engine,
    host: str,
    port: int,
    model_name: str = "gpt",
    limits: ServerLimits | None = None,
    model_dir: str | None = None,
) -> None:
    """Runs the server until SIGINT/SIGTERM, then drains (uvicorn waits for open requests, then the
    engine stops) and exits by the signal, which uvicorn raises again once it has shut down.
    `model_dir`: the HF directory the model came from, for its chat template (create_app)."""
    import uvicorn

    limits = limits or ServerLimits()
    room = _file_room(limits.max_connections)
    if room < limits.max_connections:
        print(f"[gpt] max_connections={limits.max_connections} lowered to {room}: ulimit -n is too low", flush=True)
        limits = dataclasses.replace(limits, max_connections=room)
    uvicorn.run(
        create_app(engine, model_name, limits=limits, model_dir=model_dir),
        host=host,
        port=port,
        log_level="warning",
        http=guarded_protocol(limits),
        timeout_keep_alive=limits.timeout_keep_alive,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
    )
