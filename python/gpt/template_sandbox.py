"""Chat templates run as untrusted code: compiled and rendered in worker processes that are killed
when they overrun their time, memory or output budget (gpt.chat.ChatTemplate renders through it).

A chat template is a Jinja program from a model file. jinja2's immutable sandbox keeps it from
Python's internals, but not from running forever (`range` nested in `range`), from building a
300 MB string, from hanging the compiler (jinja2 folds `9**9**9**9` while it compiles) or from
recursing until RecursionError. A thread cannot be stopped, so each compile and render runs in a
worker process of a small shared pool: the caller waits on a pipe, with a deadline, and a worker
past its deadline is killed (SIGKILL) and a fresh one started for the next template. Inside the
worker, `+`, `*` and `**` are checked before they run (ints by bit length, strings and lists by
length against the render's output budget; jinja2 does not constant-fold an intercepted operator,
so they cannot run at compile time either), the output is counted as it is generated, memory is
capped by RLIMIT_AS, and a watchdog thread ends a worker whose parent died or that outlived its
deadline. Every failure is one ChatTemplateError (a ValueError) naming the template's origin.

This file is also the worker's program: it is run by path (`runpy.run_path`), so that a worker
imports jinja2 and the standard library only, never the gpt package. Keep the top-level imports
to the standard library.
"""

import atexit
import collections
import itertools
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time

# The jinja2 source of one template, at most: real chat templates are a few KB (the largest, with
# tool calling, some 20 KB); a megabyte of template is no chat format, and compiling it takes seconds.
MAX_TEMPLATE_CHARS = 2**20
# Rendered characters when the caller gives no max_chars: twice the server's default body limit.
DEFAULT_MAX_CHARS = 4 * 2**20
# Compiling a template, at most (a real one takes 5-50 ms here; the rest is margin for a loaded machine).
COMPILE_SECONDS = 5.0
# A render's time: RENDER_SECONDS, plus a second per RENDER_BYTES_PER_SECOND of input (messages
# and variables, pickled). SmolLM2's template renders a short conversation in 0.1 ms through a
# worker (0.02 ms in-process) and a 2 MB message in 10 ms (0.7 ms in-process: the rest is the
# pipe), medians of 30 on the two-core dev machine. The budget is thousands of times that, so a
# legitimate render never meets it on a loaded machine, while a hostile one holds a worker for
# half a second at most (the 100 ms would leave a scheduling hiccup too little room).
RENDER_SECONDS = 0.5
RENDER_BYTES_PER_SECOND = 2**20
# Workers in the pool. Renders take a millisecond, so two serve many requests a second; a third
# caller waits for a worker (at most QUEUE_SECONDS, then it is refused).
POOL_SIZE = 2
QUEUE_SECONDS = 30.0
# Starting a worker (an interpreter and jinja2: 0.1-0.4 s here), at most.
START_SECONDS = 60.0
# What a worker may add to its address space once started: a render's strings are a few times its
# max_chars (4 bytes a character at most), and 512 MiB is far past that; a runaway template meets
# MemoryError long before the machine does.
WORKER_HEADROOM_BYTES = 512 * 2**20
# Integers a template may make with * and ** (a 65536-bit number is already absurd in a prompt,
# and still costs nothing to make).
MAX_INT_BITS = 2**16
# strftime_now's format, at most (real ones are "%d %b %Y"; a longer one only amplifies).
MAX_STRFTIME_FORMAT = 256
# Compiled templates a worker keeps (a server has one or a few; tests make many).
WORKER_CACHE = 64
# Longest problem text a worker sends back.
MAX_MESSAGE_CHARS = 2000

_FRAME = struct.Struct("!I")


class ChatTemplateError(ValueError):
    """A chat template that does not compile, or failed, overran its time or output budget, or
    rendered nothing. The message starts with the template's origin (its file and key)."""


class RenderTooLong(ChatTemplateError):
    """A render made more characters than its max_chars (a conversation too long for the prompt,
    or a template that writes without end)."""


# ---------------------------------------------------------------------------------------------
# The worker (runs in its own process).


class _OverBudget(Exception):
    """An operator or the output passed the render's size budget."""


def _check_binop(operator: str, left, right, max_chars: int) -> None:
    """Refuses `left operator right` when its result would pass the budget, before it is made."""
    sized = (str, list, tuple)
    if operator == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            if right > MAX_INT_BITS or abs(left).bit_length() * right > MAX_INT_BITS:
                raise _OverBudget(f"** would make an int of more than {MAX_INT_BITS} bits")
    elif operator == "*":
        if isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise _OverBudget(f"* would make an int of more than {MAX_INT_BITS} bits")
        else:
            for sequence, count in ((left, right), (right, left)):
                if isinstance(sequence, sized) and isinstance(count, int) and len(sequence) * count > max_chars:
                    raise _OverBudget(
                        f"* would make a {type(sequence).__name__} of {len(sequence) * count} items, more than "
                        f"the {max_chars} characters this prompt may have"
                    )
    elif operator == "+":
        if isinstance(left, sized) and isinstance(right, sized) and len(left) + len(right) > max_chars:
            raise _OverBudget(
                f"+ would make a {type(left).__name__} of {len(left) + len(right)} items, more than the "
                f"{max_chars} characters this prompt may have"
            )


def _environment():
    """jinja2's immutable sandbox with transformers' settings and globals (trim_blocks,
    lstrip_blocks, loop controls; raise_exception, strftime_now, a tojson that keeps non-ASCII
    and HTML characters), and `+`, `*`, `**` bounded by the render's budget."""
    import datetime
    import json

    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"+", "*", "**"})
        max_chars = DEFAULT_MAX_CHARS  # set for each render

        def call_binop(self, context, operator, left, right):
            _check_binop(operator, left, right, self.max_chars)
            return super().call_binop(context, operator, left, right)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        if not isinstance(format, str) or len(format) > MAX_STRFTIME_FORMAT:
            raise _OverBudget(f"strftime_now takes a format of at most {MAX_STRFTIME_FORMAT} characters")
        return datetime.datetime.now().strftime(format)

    environment = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = strftime_now
    return environment


def _problem(what: str, e: BaseException) -> str:
    """The text of a worker's failure: `what` ("does not compile", "failed") and the error."""
    import jinja2

    if isinstance(e, RecursionError):
        detail = "it nests or recurses too deeply (RecursionError)"
    elif isinstance(e, MemoryError):
        detail = f"it needs more than the {WORKER_HEADROOM_BYTES >> 20} MiB a template may take (MemoryError)"
    elif isinstance(e, _OverBudget):
        detail = str(e)
    elif isinstance(e, jinja2.exceptions.TemplateSyntaxError):
        detail = f"{e.message} (line {e.lineno})"
    else:
        detail = f"{type(e).__name__}: {e}"
    return f"the chat template {what}: {detail}"[:MAX_MESSAGE_CHARS]


def _read_exactly(fd: int, count: int) -> bytes | None:
    chunks, left = [], count
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _send(fd: int, status: bytes, text: str) -> None:
    payload = status + text.encode("utf-8", "surrogatepass")
    data = memoryview(_FRAME.pack(len(payload)) + payload)
    while data:
        data = data[os.write(fd, data) :]


def _serve() -> None:
    """The worker: reads requests (pickled by its parent) from stdin, answers on stdout, until EOF."""
    import resource

    request_fd, reply_fd = sys.stdin.fileno(), sys.stdout.fileno()
    sys.stdout = sys.stderr  # nothing but replies on the reply pipe
    environment = _environment()
    # Warm the compiler and the render path, so the budgets measure the template, not imports.
    environment.from_string("{% for m in messages %}{{ m.content + '' }}{% endfor %}").render(messages=[])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            mapped = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (mapped + WORKER_HEADROOM_BYTES, resource.RLIM_INFINITY))
    except (OSError, ValueError, StopIteration):
        pass  # no /proc or no RLIMIT_AS: the parent's deadline still bounds the worker

    parent = os.getppid()
    deadline = [None]  # monotonic time past which this worker ends itself (None: idle)

    def watchdog():
        # The parent kills a worker past its deadline; this covers a parent that died first
        # (a render spinning forever would otherwise outlive it).
        while True:
            time.sleep(0.1)
            if os.getppid() != parent or (deadline[0] is not None and time.monotonic() > deadline[0]):
                os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    compiled = collections.OrderedDict()
    _send(reply_fd, b"r", "ready")
    while True:
        header = _read_exactly(request_fd, _FRAME.size)
        if header is None:
            return
        frame = _read_exactly(request_fd, _FRAME.unpack(header)[0])
        if frame is None:
            return
        key, source, context, max_chars, seconds = pickle.loads(frame)
        deadline[0] = time.monotonic() + seconds + 2.0
        try:
            status, text = _handle(environment, compiled, key, source, context, max_chars)
        finally:
            deadline[0] = None
        _send(reply_fd, status, text)


def _handle(environment, compiled, key, source, context, max_chars) -> tuple[bytes, str]:
    """One request: compile `source` (cached under `key`), then render `context` (None: compile only)."""
    template = compiled.get(key)
    if template is None:
        try:
            template = environment.from_string(source)
        except Exception as e:  # noqa: BLE001 (every compile failure is the template's)
            return b"e", _problem("does not compile", e)
        compiled[key] = template
        if len(compiled) > WORKER_CACHE:
            compiled.popitem(last=False)
    compiled.move_to_end(key)
    if context is None:
        return b"o", ""
    context = pickle.loads(context)
    environment.max_chars = max_chars
    pieces, total = [], 0
    try:
        for piece in template.generate(context):
            total += len(piece)
            if total > max_chars:
                return (
                    b"l",
                    f"the rendered conversation is longer than {max_chars} characters, the most this prompt may have",
                )
            pieces.append(piece)
    except Exception as e:  # noqa: BLE001 (a render's failures are all the template's)
        return b"e", _problem("failed", e)
    return b"o", "".join(pieces)


# ---------------------------------------------------------------------------------------------
# The caller's side: the pool of workers.

# Started as `python -E -s -c BOOT <this file> <sys.path...>`: the caller's import path, without
# the current directory and without importing gpt (whose package __init__ loads the compiler).
_BOOT = "import sys, runpy; sys.path[:] = sys.argv[2:]; runpy.run_path(sys.argv[1], run_name='__main__')"


def _wait(fd: int, event: int, deadline: float) -> None:
    """Until `fd` is ready for `event` (or has hung up), by `deadline`; TimeoutError past it. poll,
    not select: a server's descriptors run past select's 1024."""
    poller = select.poll()
    poller.register(fd, event)
    if not poller.poll(max(0, int((deadline - time.monotonic()) * 1000) + 1)):
        raise TimeoutError


class _Worker:
    """One worker process and the template keys it has compiled."""

    def __init__(self):
        path = [p for p in sys.path if p and os.path.isdir(p)]
        self.process = subprocess.Popen(
            [sys.executable, "-E", "-s", "-c", _BOOT, os.path.abspath(__file__), *path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,  # a terminal's Ctrl-C goes to the caller, which ends its workers
        )
        self.request_fd, self.reply_fd = self.process.stdin.fileno(), self.process.stdout.fileno()
        os.set_blocking(self.request_fd, False)
        self.compiled: set[int] = set()
        try:
            status, _ = self.exchange(None, time.monotonic() + START_SECONDS, 64)
            if status != b"r":
                raise OSError("the worker did not start")
        except BaseException:
            self.kill()
            raise

    def exchange(self, request: bytes | None, deadline: float, max_reply: int) -> tuple[bytes, bytes]:
        """Sends `request` (None: none) and reads the reply, by `deadline`. TimeoutError past it;
        OSError when the worker died or broke the protocol."""
        if request is not None:
            data = memoryview(_FRAME.pack(len(request)) + request)
            while data:
                _wait(self.request_fd, select.POLLOUT, deadline)
                data = data[os.write(self.request_fd, data) :]
        header = self._read(_FRAME.size, deadline)
        (length,) = _FRAME.unpack(header)
        if not 1 <= length <= max_reply:
            raise OSError(f"a reply of {length} bytes, more than the {max_reply} expected")
        reply = self._read(length, deadline)
        return reply[:1], reply[1:]

    def _read(self, count: int, deadline: float) -> bytes:
        chunks, left = [], count
        while left:
            _wait(self.reply_fd, select.POLLIN, deadline)
            chunk = os.read(self.reply_fd, min(left, 1 << 20))
            if not chunk:
                raise OSError(f"the worker exited (status {self.process.wait()})")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def kill(self) -> None:
        self.process.kill()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            pass


class _Pool:
    """Up to `size` workers, each serving one caller at a time; a worker that overran or failed is
    killed, and its place taken by a fresh one when a caller next needs it."""

    def __init__(self, size: int):
        self.size = size
        self.pid = os.getpid()
        self._condition = threading.Condition()
        self._idle: list[_Worker] = []
        self._live = 0
        self._all: set[_Worker] = set()

    def acquire(self, origin: str) -> _Worker:
        deadline = time.monotonic() + QUEUE_SECONDS
        with self._condition:
            while not self._idle and self._live >= self.size:
                if not self._condition.wait(deadline - time.monotonic()) and time.monotonic() >= deadline:
                    raise ChatTemplateError(
                        f"{origin}: no template worker came free within {QUEUE_SECONDS:.0f} s (all were rendering)"
                    )
            if self._idle:
                return self._idle.pop()
            self._live += 1
        try:
            worker = _Worker()
        except (OSError, TimeoutError, ValueError) as e:
            with self._condition:
                self._live -= 1
                self._condition.notify()
            raise ChatTemplateError(f"{origin}: cannot start a worker to run the chat template ({e})") from None
        with self._condition:
            self._all.add(worker)
        return worker

    def release(self, worker: _Worker, healthy: bool) -> None:
        if not healthy:
            worker.kill()
        with self._condition:
            if healthy:
                self._idle.append(worker)
            else:
                self._live -= 1
                self._all.discard(worker)
            self._condition.notify()

    def close(self) -> None:
        with self._condition:
            workers, self._all, self._idle = list(self._all), set(), []
        for worker in workers:
            worker.kill()


_pool: _Pool | None = None
_pool_lock = threading.Lock()
_keys = itertools.count()


def _shared_pool() -> _Pool:
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():  # a forked child starts its own workers
            _pool = _Pool(POOL_SIZE)
        return _pool


@atexit.register
def _close_pool() -> None:
    if _pool is not None and _pool.pid == os.getpid():
        _pool.close()


class SandboxedTemplate:
    """A jinja2 template from `origin` (a file and key, for messages), compiled in a worker within
    `compile_seconds`; ChatTemplateError when it does not compile."""

    def __init__(self, source: str, origin: str, *, compile_seconds: float = COMPILE_SECONDS):
        if not isinstance(source, str) or not source.strip():
            raise ChatTemplateError(f"{origin}: a chat template must be a non-empty string of jinja2 source")
        if len(source) > MAX_TEMPLATE_CHARS:
            raise ChatTemplateError(
                f"{origin}: the chat template is {len(source)} characters, more than the {MAX_TEMPLATE_CHARS} allowed"
            )
        self.source, self.origin, self.compile_seconds = source, origin, compile_seconds
        self._key = next(_keys)
        self._run(None, 64, 0.0)

    def render(self, context: dict, *, max_chars: int, seconds: float = RENDER_SECONDS) -> str:
        """The template rendered with `context`: at most `max_chars` characters, within `seconds`
        and a second per RENDER_BYTES_PER_SECOND of `context` (plus the compile allowance on a
        worker that has not compiled it yet)."""
        return self._run(context, max_chars, seconds)

    def _run(self, context: dict | None, max_chars: int, seconds: float) -> str:
        data = None
        if context is not None:
            try:
                data = pickle.dumps(context, protocol=pickle.HIGHEST_PROTOCOL)
            except (pickle.PicklingError, TypeError, AttributeError) as e:
                raise TypeError(f"the variables of a chat template must be plain data: {e}") from None
            seconds += len(data) / RENDER_BYTES_PER_SECOND
        pool = _shared_pool()
        worker = pool.acquire(self.origin)
        status, text, healthy = b"o", b"", False
        try:
            # A worker compiles the template first, on its own budget, so that a render's budget
            # is the render's alone (a hostile loop gets RENDER_SECONDS, not COMPILE_SECONDS more).
            if self._key not in worker.compiled:
                status, text = self._exchange(worker, None, 64, self.compile_seconds)
                if status == b"o":
                    worker.compiled.add(self._key)
            if status == b"o" and data is not None:
                status, text = self._exchange(worker, data, max_chars, seconds)
            healthy = True
        finally:
            pool.release(worker, healthy)
        text = text.decode("utf-8", "surrogatepass")
        if status != b"o":
            raise (RenderTooLong if status == b"l" else ChatTemplateError)(f"{self.origin}: {text}")
        return text

    def _exchange(self, worker: _Worker, data: bytes | None, max_chars: int, seconds: float) -> tuple[bytes, bytes]:
        """One request to `worker`: compile (`data` None) or render the pickled context `data`."""
        request = pickle.dumps((self._key, self.source, data, max_chars, seconds), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            return worker.exchange(request, time.monotonic() + seconds, 1 + 4 * max(max_chars, MAX_MESSAGE_CHARS))
        except TimeoutError:
            if data is None:
                problem = f"did not compile within {seconds:.2f} s"
            else:
                problem = (
                    f"did not finish rendering within {seconds:.2f} s (a loop that does not end, or work out of "
                    "all proportion to the conversation); the render was stopped"
                )
            raise ChatTemplateError(f"{self.origin}: the chat template {problem}") from None
        except OSError as e:
            raise ChatTemplateError(f"{self.origin}: the chat template's worker failed: {e}") from None


if __name__ == "__main__":
    _serve()
