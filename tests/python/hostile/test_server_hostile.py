"""`python -m gpt serve` against clients that try to exhaust it (issues 29 and 43): oversized bodies
(413 without being read), a maximal prompt while /health is polled, half-open, slow and idle
connections (closed within their timeouts, the oldest idle one closed past max_connections), and big
prompts (bounded in characters before tokenizing, admitted against a memory budget). Malformed
requests are test_server_hostile_requests.py's."""

import asyncio
import contextlib
import json
import select
import threading
import time
import types

import httpx
import pytest

import gpt
from hostile_server import (
    DEFAULT_MAX_BODY,
    MiB,
    Server,
    assert_error,
    body_of,
    health_latencies_during,
    in_thread,
    read_until_closed,
    serve,
    status_of,
)


@pytest.fixture(scope="module")
def default():
    with serve() as server:
        yield server


@pytest.fixture(scope="module")
def tight():
    """Short timeouts, and a body limit that lets the issue's 30 MB prompt in."""
    flags = ["--max_body_bytes", str(32 * MiB), "--timeout_headers", "1", "--timeout_body", "5"]
    with serve(*flags, "--timeout_keep_alive", "1") as server:
        yield server


# -- the body: its size and its time -------------------------------------------------------------


def test_a_body_over_the_limit_is_refused_by_its_content_length_before_it_is_sent(default):
    with default.socket() as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: %d\r\n\r\n{"prompt": "' % (100 * MiB)
        )
        raw, _ = read_until_closed(sock, 10)  # answered and closed with 99.99 MiB never sent
    assert status_of(raw) == 413 and b"connection: close" in raw.lower()
    error = assert_error(body_of(raw), 413, None)
    assert f"max_body_bytes={DEFAULT_MAX_BODY}" in error["message"] and str(100 * MiB) in error["message"]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_100_mib_prompt_is_refused_without_being_buffered(default, chunked):
    """The reproducer: a 100 MiB prompt once took the server from 221 MB to 2.9 GB for 22 s."""
    head, tail = b'{"prompt": "', b'"}'

    def body():
        yield head
        for _ in range(100):
            yield b"a" * MiB
        yield tail

    content = body() if chunked else head + b"a" * (100 * MiB) + tail
    before, start = default.rss_mib(), time.monotonic()
    response = httpx.post(default.url + "/v1/completions", content=content, timeout=60)
    elapsed = time.monotonic() - start
    assert response.status_code == 413
    assert_error(response.content, 413, None)
    assert default.rss_mib() - before < 100, "the server buffered the body"
    assert elapsed < 10, f"refusing took {elapsed:.1f} s"
    assert httpx.get(default.url + "/health", timeout=10).status_code == 200


def test_a_body_at_the_limit_is_read(default):
    """The limit is inclusive: a body of exactly max_body_bytes is parsed (and its prompt, far
    longer than the model's block_size, refused by the engine with 400, not 413)."""
    body = b'{"prompt": [' + b"1," * ((DEFAULT_MAX_BODY - 15) // 2) + b"1]}"
    body += b" " * (DEFAULT_MAX_BODY - len(body))
    assert len(body) == DEFAULT_MAX_BODY
    response = httpx.post(default.url + "/v1/completions", content=body, timeout=60)
    assert response.status_code == 400
    assert "block_size" in assert_error(response.content, 400, "prompt")["message"]
    over = httpx.post(default.url + "/v1/completions", content=body + b" ", timeout=60)
    assert over.status_code == 413


def test_a_slow_body_gets_408(tight):
    with tight.socket() as sock:
        sock.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"prompt"')
        raw, elapsed = read_until_closed(sock, 30)
    assert status_of(raw) == 408 and elapsed < 10
    assert "timeout_body=5" in assert_error(body_of(raw), 408, None)["message"]


# -- the event loop stays free ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["text", "token ids"])
def test_health_answers_while_a_maximal_prompt_is_processed(default, kind):
    """A prompt that fills the default body limit is parsed, validated, tokenized and checked by
    the engine in worker threads. (The issue's bound is 100 ms; this asserts 1 s, a stall's order
    of magnitude, so that a loaded machine does not fail it.)"""
    if kind == "text":
        body = json.dumps({"prompt": "a" * (DEFAULT_MAX_BODY - 40)}).encode()
    else:
        body = json.dumps({"prompt": [7] * ((DEFAULT_MAX_BODY - 20) // 2)}, separators=(",", ":")).encode()
    assert DEFAULT_MAX_BODY - 64 < len(body) <= DEFAULT_MAX_BODY
    latencies, response = health_latencies_during(default, body)
    assert response.status_code == 400 and "block_size" in response.json()["error"]["message"]
    assert len(latencies) >= 3, "the request ended before /health could be asked during it"
    assert max(latencies) < 1.0, f"/health took {max(latencies) * 1000:.0f} ms"


def test_health_answers_while_a_30_mb_prompt_is_tokenized(tight):
    """The reproducer: while a 30 MB prompt was tokenized on the event loop, /health took 6.1 s.
    (With --max_body_bytes raised to let it in, it is refused by its characters before it is
    tokenized; parsing 30 MB of JSON holds the GIL about 0.2 s, hence 2 s here.)"""
    body = json.dumps({"prompt": "once upon a time " * (30_000_000 // 17)}).encode()
    latencies, response = health_latencies_during(tight, body)
    assert response.status_code == 400 and "block_size" in response.json()["error"]["message"]
    assert len(latencies) >= 3
    assert max(latencies) < 2.0, f"/health took {max(latencies) * 1000:.0f} ms"


# -- connections: the head's deadline, idle ones, too many ----------------------------------------


def test_a_connection_that_sends_nothing_is_closed(tight):
    with tight.socket() as sock:
        raw, elapsed = read_until_closed(sock, 30)
    assert raw == b"" and elapsed < 10  # nothing was asked, so nothing is answered


def test_a_slow_request_head_gets_408_and_is_closed(tight):
    """Slowloris: a byte of the head every 0.1 s, each before uvicorn's keep-alive timer would fire."""
    with tight.socket() as sock:
        start = time.monotonic()
        for byte in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            sock.sendall(bytes([byte]))
            if select.select([sock], [], [], 0.1)[0]:
                break  # answered: stop sending to a closed connection
        raw, _ = read_until_closed(sock, 30)
        elapsed = time.monotonic() - start
    assert status_of(raw) == 408 and elapsed < 10
    assert "timeout_headers=1" in assert_error(body_of(raw), 408, None)["message"]


def test_half_open_connections_are_all_closed_and_others_are_served(tight):
    """The reproducer: 1,200 half-open connections stayed open past 30 s."""
    sockets = [tight.socket() for _ in range(200)]
    try:
        for sock in sockets:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        assert httpx.get(tight.url + "/health", timeout=10).status_code == 200
        for sock in sockets:
            raw, elapsed = read_until_closed(sock, 30)
            assert status_of(raw) == 408 and elapsed < 10
    finally:
        for sock in sockets:
            sock.close()


def test_an_idle_keep_alive_connection_is_closed(tight):
    connection = tight.connect()
    connection.request("GET", "/health")
    assert connection.getresponse().read() == b'{"status":"ok"}'
    raw, elapsed = read_until_closed(connection.sock, 30)
    assert raw == b"" and elapsed < 10
    connection.close()


def test_a_request_head_over_64_kib_gets_431(default):
    with default.socket() as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (100 * 1024) + b"\r\n\r\n")
        raw, _ = read_until_closed(sock, 30)
    assert status_of(raw) == 431
    assert_error(body_of(raw), 431, None)
    assert httpx.get(default.url + "/health", timeout=10).status_code == 200


def test_past_max_connections_the_oldest_idle_one_makes_room_else_503():
    with serve("--max_connections", "4", "--timeout_headers", "60", "--timeout_body", "60") as server:
        idle = [server.socket() for _ in range(10)]
        for sock in idle:
            sock.sendall(b"GET /health HTTP/1.1\r\n")  # half a head each
        # Six were closed to let the last four in; those four are the open ones.
        closed = [read_until_closed(sock, 10)[0] == b"" for sock in idle[:6]]
        assert all(closed)
        for sock in idle[6:]:
            sock.settimeout(0.5)
            with pytest.raises(TimeoutError):
                sock.recv(1)
        # A client is served: the longest waiting of the four makes room for it.
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200
        for sock in idle:
            sock.close()
        # Four requests in flight (their heads in, their bodies coming): nobody idle to close, so
        # a fifth connection gets 503.
        busy = [server.socket() for _ in range(4)]
        for sock in busy:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        time.sleep(0.5)  # the server has read the heads
        with server.socket() as sock:
            raw, _ = read_until_closed(sock, 10)
        assert status_of(raw) == 503
        assert "max_connections=4" in assert_error(body_of(raw), 503, None)["message"]
        for sock in busy:
            sock.close()
        # Those gone, the server serves again.
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(server.url + "/health", timeout=10).status_code == 200:
                    break
            assert time.monotonic() < deadline
            time.sleep(0.1)


# -- big prompts: bounded before tokenizing, admitted against a memory budget (issue 43) ----------


class RecordingTokenizer(gpt.ByteTokenizer):
    """Bytes (so one token stands for at most one character), with a chat template, counting the
    characters it is asked to encode and, when `gate` is set, holding each encode until it opens."""

    chat_template = "{{ messages[0]['content'] * 100000 }}"
    end_of_generation = frozenset({0})
    bos_token = eos_token = ""

    def __init__(self):
        self.encoded: list[int] = []
        self.gate: threading.Event | None = None

    def encode(self, text: str) -> list[int]:
        self.encoded.append(len(text))
        if self.gate is not None:
            assert self.gate.wait(30), "the test never opened the gate"
        return super().encode(text)


class RefusingEngine:
    """An engine of block_size 16 that refuses every prompt as the real one refuses a long one."""

    model = types.SimpleNamespace(config=gpt.GPTConfig(n_layer=1, n_head=1, n_embd=8, vocab_size=256, block_size=16))

    def __init__(self):
        self.tokenizer = RecordingTokenizer()

    def submit(self, prompt, max_tokens, **kwargs):
        raise ValueError(f"{len(prompt)} prompt tokens + max_tokens={max_tokens} exceed block_size=16")

    def shutdown(self, drain=True):
        pass


def in_process(engine, limits=None) -> httpx.AsyncClient:
    from gpt.server import create_app

    transport = httpx.ASGITransport(app=create_app(engine, "recording", limits=limits))
    return httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60)


def test_a_prompt_past_the_context_in_characters_is_refused_before_it_is_tokenized():
    """Block_size 16 of a byte tokenizer holds at most 16 characters: 17 are refused unread by the
    tokenizer (a 2 MiB prompt once took its whole encoding to find out)."""
    engine = RefusingEngine()

    async def run():
        async with in_process(engine) as client:
            return await client.post("/v1/completions", json={"prompt": "a" * 17, "max_tokens": 1})

    response = asyncio.run(run())
    assert response.status_code == 400
    error = assert_error(response.content, 400, "prompt")
    assert "17 characters" in error["message"] and "block_size=16" in error["message"], error
    assert engine.tokenizer.encoded == []


def test_a_template_that_renders_past_the_context_is_refused_before_tokenizing():
    """The issue's amplifying templates: a 2-character message rendered 100,000 times is refused
    while it is rendered (gpt.chat's bound, which the server passes), before the tokenizer sees
    200,000 characters."""
    engine = RefusingEngine()

    async def run():
        async with in_process(engine) as client:
            return await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "ab"}]})

    response = asyncio.run(run())
    assert response.status_code == 400
    error = assert_error(response.content, 400, "messages")
    assert "characters" in error["message"], error
    assert engine.tokenizer.encoded == []


def test_requests_past_the_admission_budget_wait_their_turn_then_get_503(monkeypatch):
    """With admission_bytes=1 one request is admitted at a time: a second waits while the first is
    being tokenized, /health answering meanwhile, and gets 503 with Retry-After when its wait ends;
    once the first is done, the next is admitted."""
    from gpt.serving import ServerLimits, routes

    monkeypatch.setattr(routes, "ADMISSION_WAIT_SECONDS", 0.5)
    engine = RefusingEngine()
    engine.tokenizer.gate = threading.Event()

    async def run():
        async with in_process(engine, ServerLimits(admission_bytes=1)) as client:
            first = asyncio.ensure_future(client.post("/v1/completions", json={"prompt": "first"}))
            while not engine.tokenizer.encoded:  # the first is being tokenized
                await asyncio.sleep(0.01)
            second = await client.post("/v1/completions", json={"prompt": "second"})
            health = await client.get("/health")
            engine.tokenizer.gate.set()
            third = await client.post("/v1/completions", json={"prompt": "third"})
            return await first, second, health, third

    first, second, health, third = asyncio.run(run())
    assert second.status_code == 503 and second.headers["Retry-After"] == "1"
    assert "admission_bytes=1" in assert_error(second.content, 503, None)["message"]
    assert health.status_code == 200
    assert first.status_code == third.status_code == 400  # admitted, then refused by the engine
    assert engine.tokenizer.encoded == [len("first"), len("third")]


def test_the_admission_budget_lets_requests_in_in_arrival_order():
    from gpt.server import AdmissionBudget

    async def run():
        budget = AdmissionBudget(100)
        assert await budget.acquire(60, 1) == 60
        big = asyncio.ensure_future(budget.acquire(50, 5))  # does not fit beside the 60
        await asyncio.sleep(0)
        small = asyncio.ensure_future(budget.acquire(10, 5))  # fits, but arrived after the big one
        cancelled = asyncio.ensure_future(budget.acquire(30, 5))
        await asyncio.sleep(0.05)
        assert not big.done() and not small.done() and budget.in_use == 60
        cancelled.cancel()
        budget.release(60)
        assert await big == 50 and await small == 10 and budget.in_use == 60
        assert await budget.acquire(1000, 0.1) is None  # a whole budget's worth waits for the others
        budget.release(50)
        budget.release(10)
        assert await budget.acquire(1000, 0.1) == 100 and budget.in_use == 100  # alone, it gets in

    asyncio.run(run())


def byte_level_bpe(pre_tokenizer=None, **model_args):
    """A tiny byte-level BPE: the 256-character alphabet and one 5-character token."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {c: i for i, c in enumerate(sorted(alphabet))} | {"hello": 256}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o")]
    vocab |= {"he": 257, "ll": 258, "hell": 259}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, **model_args))
    tokenizer.pre_tokenizer = pre_tokenizer or pre_tokenizers.ByteLevel(add_prefix_space=False)
    return gpt.HFTokenizer(tokenizer)


def test_the_text_a_token_stands_for_is_bounded_only_where_no_character_can_vanish_unaccounted():
    from tokenizers import Tokenizer, models, pre_tokenizers

    from gpt.server import TokenReach, token_reach

    assert token_reach(gpt.ByteTokenizer()) == TokenReach(1)
    assert token_reach(byte_level_bpe()) == TokenReach(5)  # "hello"
    # Whitespace is dropped by these pre-tokenizers: a million spaces are no token at all.
    assert token_reach(byte_level_bpe(pre_tokenizers.WhitespaceSplit())) is None
    removed = pre_tokenizers.Sequence([pre_tokenizers.Split(" ", "removed"), pre_tokenizers.ByteLevel()])
    assert token_reach(byte_level_bpe(removed)) is None
    # Unknown characters fused into one unknown token, or dropped for want of one.
    for unknown in (dict(unk_token="<unk>", fuse_unk=True), {}):
        bpe = Tokenizer(models.BPE(vocab={"<unk>": 0, "a": 1}, merges=[], **unknown))
        assert token_reach(gpt.HFTokenizer(bpe)) is None
    assert token_reach(types.SimpleNamespace(encode=lambda text: [1])) is None


def smollm2_tokenizer():
    import gguf

    from gpt import gguf_file, gguf_tokenizer
    from gpt import models as installed

    path = installed.find("smollm2")
    return gguf_tokenizer.read_tokenizer(gguf_file._Metadata(gguf.GGUFReader(path), path), path, 49152)


def test_text_encoder_takes_the_batch_call_where_it_gives_encodes_ids():
    """SmolLM2's tokenizer through `encode_batch_fast` (which releases the GIL), ids equal to its
    `encode`, special tokens included; a wrapper that adds a BOS of its own keeps its `encode`; and
    SmolLM2's longest token (81 characters) bounds its prompts to 81 characters a token, the
    control characters it has no token for not counted."""
    from gpt.server import TokenReach, text_encoder, token_reach

    tokenizer = smollm2_tokenizer()
    encode = text_encoder(tokenizer)
    assert encode != tokenizer.encode
    text = "<|im_start|>user\nOnce upon a time, 3 bears ate 42 bowls of porridge. ünï 😀<|im_end|>\n" * 500
    assert encode(text) == tokenizer.encode(text)
    # Its vocabulary has no token for six ASCII control bytes, which it drops.
    reach = token_reach(tokenizer)
    assert reach == TokenReach(81, "\x04\x06\x13\x14\x16\x1d")
    assert tokenizer.encode(reach.dropped * 1000) == [] and reach.counted("a\x04b\x1d") == 2

    class WithBos(gpt.HFTokenizer):
        def encode(self, text):
            return [1] + super().encode(text)

    with_bos = WithBos(tokenizer.backend)
    assert text_encoder(with_bos) == with_bos.encode


class LongContextEngine(RefusingEngine):
    """SmolLM2's tokenizer over a context of 65,536 tokens, so that a maximal body's text prompt is
    within what the context could hold and is tokenized whole."""

    model = types.SimpleNamespace(
        config=gpt.GPTConfig(n_layer=1, n_head=1, n_embd=8, vocab_size=49152, block_size=65536)
    )

    def __init__(self):
        self.tokenizer = smollm2_tokenizer()


def test_health_answers_while_smollm2_tokenizes_a_maximal_prompt():
    """The reproducer: the SmolLM2 tokenizer's `encode` over a 1.9 MB prompt kept /health from
    answering for 3.7 s; through its batch call the loop answers within tens of ms. (The issue's
    bound is 100 ms; 1 s is asserted, so that a loaded machine does not fail it.)"""
    from gpt.server import ServerLimits, create_app

    limits = ServerLimits()
    with in_thread(create_app(LongContextEngine(), "smollm2", limits=limits), limits) as port:
        prompt = ("Once upon a time, there were 3 bears; they ate porridge. " * 40000)[:1_900_000]
        body = json.dumps({"prompt": prompt, "max_tokens": 1}).encode()
        server = Server(port, None, None)  # health_latencies_during needs only its url and connect()
        latencies, response = health_latencies_during(server, body)
    assert response.status_code == 400 and "533334 prompt tokens" in response.json()["error"]["message"]
    assert len(latencies) >= 3
    assert max(latencies) < 1.0, f"/health took {max(latencies) * 1000:.0f} ms"


def test_the_admission_budget_bounds_the_memory_of_concurrent_smollm2_prompts():
    """Six prompts of 330,000 characters at once (each within what SmolLM2's context of 4096 tokens
    of at most 81 characters could hold, so each is tokenized whole, 90,000 tokens, then refused):
    with --admission_bytes 64 MiB they are tokenized one at a time (each is estimated at 63 MB),
    and the server grows by one prompt's peak, not six (+230 MB when all six ran at once)."""
    body = json.dumps({"prompt": ("Once upon a time, there were 3 bears; they ate porridge. " * 6000)[:330_000]})
    with serve("--model", "smollm2", "--admission_bytes", str(64 * MiB)) as server:
        before = server.rss_mib()
        peak, responses = before, []

        def post():
            responses.append(httpx.post(server.url + "/v1/completions", content=body, timeout=120))

        posters = [threading.Thread(target=post) for _ in range(6)]
        for poster in posters:
            poster.start()
        while any(poster.is_alive() for poster in posters):
            peak = max(peak, server.rss_mib())
            time.sleep(0.01)
    statuses = sorted(response.status_code for response in responses)
    assert statuses.count(400) >= 2 and set(statuses) <= {400, 503}, statuses  # 503: waited past its turn
    for response in responses:
        expected = "block_size=4096" if response.status_code == 400 else "admission_bytes"
        assert expected in response.json()["error"]["message"]
    # The figure docs/SERVING.md quotes (pytest -s -k admission_budget_bounds).
    print(f"\nsix 330,000-character prompts at once: {statuses}, the server grew by {peak - before:.0f} MiB")
    assert peak - before < 120, f"the server grew by {peak - before:.0f} MiB"
