"""What keeps one client from stalling the server: its limits (ServerLimits), the memory budget of
the requests being admitted (AdmissionBudget, trim_heap), the ASGI middleware that bounds a body and
answers what escapes the app (BoundedBody, LastResort), and uvicorn's HTTP protocol with a deadline
for each request head and a cap on connections (guarded_protocol)."""

import asyncio
import collections
import contextlib
import dataclasses
import http
import json
import logging
import threading

from gpt.serving.protocol import error_body

# A request's line and headers together (llhttp, uvicorn's parser here, has no limit of its own;
# h11's default is 16 KiB, nginx's 4 x 8 KiB buffers).
MAX_HEAD_BYTES = 64 * 1024
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


async def send_error(send, status: int, message: str, close: bool = False) -> None:
    """A whole error response from ASGI middleware; `close` when the request's body is left
    unread, so that the rest of it is not parsed as the next request."""
    body = json.dumps(error_body(status, message)).encode()
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
            return await send_error(send, 413, f"{too_long} (Content-Length: {int(declared)})", close=True)
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return  # nobody to answer
                    size += len(message.get("body", b""))
                    if size > self.max_bytes:
                        return await send_error(send, 413, too_long, close=True)
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            message = f"the request body did not arrive within timeout_body={self.timeout:g} s"
            return await send_error(send, 408, message, close=True)
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
            await send_error(send, 500, f"internal error: {type(e).__name__}")


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
        body = json.dumps(error_body(status, message)).encode()
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


def file_room(wanted: int) -> int:
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
