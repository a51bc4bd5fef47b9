"""`python -m gpt serve` as a real server process, spoken to over HTTP with httpx: completions
(plain and streamed) against the model's own generate(), field-naming 422s, 503 + Retry-After on a
full queue, a disconnected client's blocks coming back, and SIGTERM draining running requests."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

import gpt
from gpt.cli import EMBEDDED_MODEL
from gpt.engine.metrics import parse_prometheus_text

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/python: the helper modules


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(*flags):
    """A `gpt serve` process on a free port (the embedded model); yields (base url, process)."""
    port = free_port()
    # Until the model has its compiled paged step, the numpy one stands in (same command line).
    entry = ["-m", "gpt"] if hasattr(gpt.GPT, "step_batch") else [os.path.join(HERE, "serve_reference.py")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, HERE]))
    process = subprocess.Popen(
        [sys.executable, *entry, "serve", "--port", str(port), *flags],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, f"server exited: {process.stdout.read()}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, "server did not come up in 120 s"
            time.sleep(0.2)
        yield url, process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


@pytest.fixture(scope="module")
def model():
    return gpt.GPT.from_pretrained(EMBEDDED_MODEL)


@pytest.fixture(scope="module")
def url():
    with server() as (base, _):
        yield base


def metrics(url):
    return parse_prometheus_text(httpx.get(url + "/metrics", timeout=10).text)


def sse_events(response):
    """The JSON payloads of a server-sent-event stream, up to [DONE] (which must come)."""
    payloads = []
    for line in response.iter_lines():
        if not line:
            continue
        assert line.startswith("data: "), line
        if line == "data: [DONE]":
            return payloads
        payloads.append(json.loads(line[len("data: ") :]))
    raise AssertionError("the stream ended without [DONE]")


def test_models_and_health(url):
    assert httpx.get(url + "/health").json() == {"status": "ok"}
    assert [m["id"] for m in httpx.get(url + "/v1/models").json()["data"]] == ["byte-gpt"]


def test_completion_matches_generate_plain_and_streamed(url, model):
    prompt = "Once upon a time"
    ids = list(prompt.encode())
    want = model.generate(ids, 24)
    body = dict(prompt=prompt, max_tokens=24, temperature=0)
    plain = httpx.post(url + "/v1/completions", json=body, timeout=60).json()
    assert plain["choices"][0]["token_ids"] == want
    assert plain["choices"][0]["text"] == bytes(want).decode("utf-8", errors="replace")
    assert plain["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 24, "total_tokens": len(ids) + 24}
    with httpx.stream("POST", url + "/v1/completions", json=body | dict(stream=True), timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    assert [t for e in events for t in e["choices"][0]["token_ids"]] == want
    assert "".join(e["choices"][0]["text"] for e in events) == plain["choices"][0]["text"]
    assert events[-1]["choices"][0]["finish_reason"] == "length"
    # Token ids in, a seed: the same tokens as generate() with that seed.
    seeded = dict(prompt=ids, max_tokens=16, temperature=0.8, top_k=20, seed=11)
    got = httpx.post(url + "/v1/completions", json=seeded, timeout=60).json()["choices"][0]["token_ids"]
    assert got == model.generate(ids, 16, temperature=0.8, top_k=20, seed=11)


def test_stop_string_cuts_the_text(url, model):
    ids = list(b"Once upon a time")
    text = bytes(model.generate(ids, 30)).decode("utf-8", errors="replace")
    stop = text[8:11]
    body = dict(prompt=ids, max_tokens=30, temperature=0, stop=[stop], stream=True)
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as response:
        events = sse_events(response)
    assert "".join(e["choices"][0]["text"] for e in events) == text[: text.find(stop)]
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (dict(prompt="hi", max_tokens=-1), 422, "max_tokens"),
        (dict(prompt="hi", top_p=1.5), 422, "top_p"),
        (dict(prompt="hi", temperature="hot"), 422, "temperature"),
        (dict(max_tokens=3), 422, "prompt"),
        (dict(prompt="hi", best_of=3), 422, "best_of"),
        (dict(prompt=[5, -1], max_tokens=3), 422, "prompt"),
        (dict(prompt=[300], max_tokens=3), 400, "prompt"),
    ],
)
def test_bad_requests_name_the_field(url, body, status, field):
    response = httpx.post(url + "/v1/completions", json=body, timeout=30)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["param"] == field and field in error["message"]


def test_chat_needs_a_chat_template(url):
    """The embedded byte-level model is a base model: /v1/chat/completions says so, in the error
    shape, after validating the body as strictly as a model that can chat would."""
    body = dict(messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    response = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": "the model 'byte-gpt' has no chat template (a base model): use /v1/completions",
        "type": "invalid_request_error",
        "param": "messages",
        "code": 400,
    }
    invalid = httpx.post(url + "/v1/chat/completions", json=body | dict(top_k=0), timeout=30)
    assert invalid.status_code == 422 and invalid.json()["error"]["param"] == "top_k"


def test_disconnected_client_is_cancelled_and_its_blocks_freed(url):
    before = metrics(url)
    body = dict(prompt="The", max_tokens=250, temperature=0, stream=True)
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")  # running: leave after the first token
    deadline = time.monotonic() + 20
    while True:
        now = metrics(url)
        if now["gpt_requests_cancelled_total"] > before["gpt_requests_cancelled_total"]:
            break
        assert time.monotonic() < deadline, f"the disconnected request was not cancelled: {now}"
        time.sleep(0.1)
    assert now["gpt_running_sequences"] == 0 and now["gpt_kv_blocks_in_use"] == 0
    assert now["gpt_generated_tokens_total"] - before["gpt_generated_tokens_total"] < 250
    # The same for a plain (not streamed) request whose client gives up waiting.
    with pytest.raises(httpx.TimeoutException):
        httpx.post(url + "/v1/completions", json=body | dict(stream=False), timeout=0.2)
    while metrics(url)["gpt_requests_cancelled_total"] < now["gpt_requests_cancelled_total"] + 1:
        assert time.monotonic() < deadline + 20, "the plain request of a client that left was not cancelled"
        time.sleep(0.1)
    assert metrics(url)["gpt_kv_blocks_in_use"] == 0


def test_full_queue_gets_503_with_retry_after_and_sigterm_drains():
    with server("--max_running", "1", "--max_queue", "1") as (base, process):
        body = dict(prompt="Once", max_tokens=250, temperature=0, stream=True)
        with httpx.stream("POST", base + "/v1/completions", json=body, timeout=60) as running:
            running_lines = running.iter_lines()
            first = next(running_lines)  # admitted and running: the one slot is taken
            assert first.startswith("data: ")
            with httpx.stream("POST", base + "/v1/completions", json=body | dict(max_tokens=5), timeout=60) as queued:
                refused = httpx.post(base + "/v1/completions", json=body, timeout=30)
                assert refused.status_code == 503
                assert int(refused.headers["Retry-After"]) >= 1
                assert "max_queue=1" in refused.json()["error"]["message"]
                # SIGTERM: no new connections, but both accepted requests run to their end.
                process.send_signal(signal.SIGTERM)
                rest = [line for line in running_lines if line]
                assert rest[-1] == "data: [DONE]"
                events = [json.loads(first[6:])] + [json.loads(line[6:]) for line in rest[:-1]]
                assert sum(len(e["choices"][0]["token_ids"]) for e in events) == 250
                assert sse_events(queued)[-1]["choices"][0]["finish_reason"] == "length"
        # uvicorn exits by raising the signal again once it has shut down.
        assert process.wait(30) in (0, -signal.SIGTERM)
        assert "[gpt] drained: 2 requests finished, 0 cancelled" in process.stdout.read()


def test_event_relay_wakes_the_loop_once_per_burst():
    """A burst of events posted before the loop runs is one wakeup, delivered in order; the next
    burst is another. (A loop that stands still: the wakeups are counted, not raced.)"""
    import queue

    from gpt.server import EventRelay

    class StillLoop:
        def __init__(self):
            self.scheduled = []

        def call_soon_threadsafe(self, callback):
            self.scheduled.append(callback)

    loop = StillLoop()
    relay = EventRelay(loop)
    queues = [queue.SimpleQueue() for _ in range(16)]
    for burst in range(3):
        for index, q in enumerate(queues):
            relay.post(q, (index, burst))
        assert len(loop.scheduled) == burst + 1, "one wakeup per burst"
        loop.scheduled[-1]()  # the loop runs: the whole burst is delivered
        assert [q.get_nowait() for q in queues] == [(index, burst) for index in range(16)]
        assert all(q.empty() for q in queues)


def test_event_relay_delivers_everything_in_order_across_threads():
    """Events posted from another thread while the loop runs (drains interleaving with posts)
    all reach their queues, each queue's in posting order."""
    import asyncio
    import threading

    from gpt.server import EventRelay

    async def run():
        relay = EventRelay(asyncio.get_running_loop())
        queues = [asyncio.Queue() for _ in range(16)]

        def engine():  # a step emits one event per sequence, back to back
            for step in range(50):
                for index, q in enumerate(queues):
                    relay.post(q, (index, step))
                time.sleep(0.001)

        thread = threading.Thread(target=engine)
        thread.start()
        received = [[await asyncio.wait_for(q.get(), 10) for _ in range(50)] for q in queues]
        thread.join()
        return received

    assert asyncio.run(run()) == [[(index, step) for step in range(50)] for index in range(16)]
