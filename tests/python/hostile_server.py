"""A `gpt serve` process or an in-thread uvicorn server to attack, and the checks the hostile-server
tests share: the documented error shape, raw HTTP responses, /health polled during a request."""

import asyncio
import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx

import gpt

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 2**20
DEFAULT_MAX_BODY = 2 * MiB  # gpt.server.ServerLimits' default, which the `default` server keeps


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, port: int, process: subprocess.Popen, log):
        self.port, self.process, self.log = port, process, log
        self.url = f"http://127.0.0.1:{port}"

    def rss_mib(self) -> float:
        with open(f"/proc/{self.process.pid}/status") as f:
            return int(f.read().split("VmRSS:")[1].split()[0]) / 1024

    def connect(self, timeout: float = 30) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def socket(self, timeout: float = 30) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)


@contextlib.contextmanager
def serve(*flags):
    """A `gpt serve` process (the embedded model) on a free port, its output in a file (a pipe
    nobody reads would fill up and stop it)."""
    port = free_port()
    # Until the model has its compiled paged step, the numpy one stands in (same command line).
    entry = ["-m", "gpt"] if hasattr(gpt.GPT, "step_batch") else [os.path.join(HERE, "serve_reference.py")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, HERE]))
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [sys.executable, *entry, "serve", "--port", str(port), *flags], env=env, stdout=log, stderr=log
        )
        server = Server(port, process, log)
        try:
            deadline = time.monotonic() + 120
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    raise AssertionError(f"server exited: {log.read()}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(server.url + "/health", timeout=1).status_code == 200:
                        break
                assert time.monotonic() < deadline, "server did not come up in 120 s"
                time.sleep(0.2)
            yield server
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(10)


@contextlib.contextmanager
def in_thread(app, limits):
    """`app` served by uvicorn with the server's guarded protocol in a daemon thread of this
    process, on a free port; yields the port."""
    import uvicorn

    from gpt.server import guarded_protocol

    port = free_port()
    config = uvicorn.Config(app, port=port, http=guarded_protocol(limits), log_level="critical")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "the in-process server did not start"
            time.sleep(0.05)
        yield port
    finally:
        server.should_exit = True
        thread.join(30)


def assert_error(response_body: bytes, status: int, param: str | None, code=None):
    """The documented shape: {"error": {"message", "type", "param", "code"}}, naming `param`."""
    error = json.loads(response_body)["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["type"] == ("invalid_request_error" if status < 500 else "server_error")
    assert error["code"] == (status if code is None else code)
    assert error["param"] == param, error
    assert error["message"] and (param is None or param in error["message"]), error
    return error


def read_until_closed(sock: socket.socket, limit: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when that was."""
    start, data = time.monotonic(), b""
    sock.settimeout(limit)
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data, time.monotonic() - start


def status_of(raw: bytes) -> int:
    assert raw.startswith(b"HTTP/1.1 "), f"no HTTP response, got {raw[:80]!r}"
    return int(raw.split(b" ", 2)[1])


def body_of(raw: bytes) -> bytes:
    return raw.split(b"\r\n\r\n", 1)[1]


def health_latencies_during(server: Server, body: bytes) -> tuple[list[float], httpx.Response]:
    """GET /health back to back on one connection while `body` is posted and processed."""
    result = {}

    def post():
        result["response"] = httpx.post(server.url + "/v1/completions", content=body, timeout=120)

    latencies = []
    poster = threading.Thread(target=post)
    connection = server.connect()
    try:
        poster.start()
        while poster.is_alive():
            start = time.monotonic()
            connection.request("GET", "/health")
            assert connection.getresponse().read() == b'{"status":"ok"}'
            latencies.append(time.monotonic() - start)
    finally:
        poster.join()
        connection.close()
    # The figure docs/SERVING.md quotes (pytest -s -k health).
    longest = max(latencies, default=0) * 1000
    print(f"\n/health during a {len(body) / MiB:.1f} MiB request: {len(latencies)} answers, longest {longest:.0f} ms")
    return latencies, result["response"]
