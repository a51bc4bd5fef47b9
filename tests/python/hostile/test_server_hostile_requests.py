"""`python -m gpt serve` against requests of a wrong shape (issue 29's variants): malformed bodies
(NaN, Infinity, surrogates, strings for numbers, unbounded `stop`), an unknown model, huge numbers,
unknown routes and an exception inside the server, each answered in the documented error shape on a
connection that goes on serving."""

import http.client
import types

import httpx
import pytest

import gpt
from hostile_server import assert_error, in_thread, serve


@pytest.fixture(scope="module")
def default():
    with serve() as server:
        yield server


# -- malformed bodies: 4xx in the documented shape, and the connection goes on ---------------------

SURROGATE = b'{"prompt": "\\ud800", "max_tokens": 1}'
MALFORMED = [
    # (body, status, param), the body as sent
    (b'{"prompt": "hi", "temperature": NaN}', 422, "temperature"),
    (b'{"prompt": "hi", "temperature": Infinity}', 422, "temperature"),
    (b'{"prompt": "hi", "temperature": 1e400}', 422, "temperature"),
    (b'{"prompt": "hi", "top_p": -Infinity}', 422, "top_p"),
    (b'{"prompt": "hi", "top_p": NaN}', 422, "top_p"),
    (b'{"prompt": NaN}', 422, "prompt"),
    (b'{"prompt": [1, NaN]}', 422, "prompt"),
    (b'{"prompt": Infinity, "max_tokens": 1}', 422, "prompt"),
    (SURROGATE, 400, None),
    (b'{"prompt": "\\udc00"}', 400, None),
    (b'{"prompt": "a\\ud800\\u0041"}', 400, None),
    (b'{"prompt": "hi", "stop": "\\ud83d"}', 400, None),
    (b'{"prompt": "\xed\xa0\x80"}', 400, None),  # a surrogate in UTF-8 bytes
    (b'{"prompt": "\xff"}', 400, None),
    (b'{"prompt": "hi", "max_tokens": "3"}', 422, "max_tokens"),
    (b'{"prompt": "hi", "max_tokens": 3.0}', 422, "max_tokens"),
    (b'{"prompt": "hi", "max_tokens": true}', 422, "max_tokens"),
    (b'{"prompt": "hi", "stream": "yes"}', 422, "stream"),
    (b'{"prompt": "hi", "stream": 1}', 422, "stream"),
    (b'{"prompt": "hi", "temperature": "0.5"}', 422, "temperature"),
    (b'{"prompt": "hi", "seed": "1"}', 422, "seed"),
    (b'{"prompt": "hi", "top_k": 2.5}', 422, "top_k"),
    (b'{"prompt": "hi", "n": 17}', 422, "n"),
    (b'{"prompt": [1, true]}', 422, "prompt"),
    (b'{"prompt": []}', 422, "prompt"),
    (b'{"prompt": [[1]]}', 422, "prompt"),
    (b'{"prompt": {}}', 422, "prompt"),
    (b'{"prompt": [18446744073709551616]}', 422, "prompt"),
    (b'{"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}', 422, "stop"),
    (b'{"prompt": "hi", "stop": ["' + b"x" * 257 + b'"]}', 422, "stop"),
    (b'{"prompt": "hi", "stop": ""}', 422, "stop"),
    (b'{"prompt": "hi", "stop": [1]}', 422, "stop"),
    (b'{"prompt": "hi", "stop": [' + b'"s",' * 100_000 + b'"s"]}', 422, "stop"),
    (b'{"prompt": "hi", "model": "' + b"m" * 300 + b'"}', 422, "model"),
    (b'{"prompt": "hi", "max_tokens": ' + b"9" * 5000 + b"}", 400, None),
    (b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, None),
    (b'{"prompt": "hi"', 400, None),
    (b'{"prompt": "hi"} trailing', 400, None),
    (b"", 400, None),
    (b"[]", 422, None),
    (b'"prompt"', 422, None),
]


@pytest.mark.parametrize(("body", "status", "param"), MALFORMED, ids=[f"{i}" for i in range(len(MALFORMED))])
def test_malformed_bodies_get_4xx_in_the_documented_shape_on_a_live_connection(default, body, status, param):
    connection = default.connect()
    try:
        connection.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == status, response.read()
        assert_error(response.read(), status, param)
        sock = connection.sock
        assert sock is not None, "the server closed the connection"
        connection.request("GET", "/health")  # on the same connection (http.client would reconnect)
        assert connection.getresponse().read() == b'{"status":"ok"}' and connection.sock is sock
    finally:
        connection.close()


def test_an_unknown_model_is_404_model_not_found(default):
    response = httpx.post(default.url + "/v1/completions", json=dict(prompt="hi", model="gpt-4"), timeout=30)
    assert response.status_code == 404
    error = assert_error(response.content, 404, "model", code="model_not_found")
    assert "gpt-4" in error["message"] and "byte-gpt" in error["message"]
    # The model /v1/models lists, or none at all, is served.
    for extra in ({"model": "byte-gpt"}, {}):
        ok = httpx.post(default.url + "/v1/completions", json=dict(prompt="hi", max_tokens=2) | extra, timeout=30)
        assert ok.status_code == 200 and len(ok.json()["choices"][0]["token_ids"]) == 2


def test_huge_numbers_are_refused_or_served_never_500(default):
    """Integers past int64 where the schema takes any integer >= 0: the engine refuses or serves."""
    cases = [(dict(max_tokens=10**30), 400), (dict(seed=2**200, max_tokens=2), 200), (dict(top_k=10**30), 200)]
    for extra, status in cases:
        response = httpx.post(default.url + "/v1/completions", json=dict(prompt="hi", max_tokens=2) | extra, timeout=30)
        assert response.status_code == status, (extra, response.text)


def test_unknown_routes_and_methods_use_the_documented_shape(default):
    missing = httpx.get(default.url + "/v2/nothing", timeout=10)
    assert missing.status_code == 404 and assert_error(missing.content, 404, None)
    wrong = httpx.get(default.url + "/v1/completions", timeout=10)
    assert wrong.status_code == 405 and assert_error(wrong.content, 405, None)


# -- an error inside the server: 500 in the documented shape, the connection kept ---------------------


class FailingEngine:
    """An engine whose every submit fails as a bug would."""

    tokenizer = gpt.ByteTokenizer()
    model = types.SimpleNamespace(config=gpt.GPTConfig(n_layer=1, n_head=1, n_embd=8, vocab_size=256, block_size=16))

    def submit(self, *args, **kwargs):
        raise RuntimeError("a bug")

    def shutdown(self, drain=True):
        pass

    def metrics(self):
        return types.SimpleNamespace(requests_finished=0, requests_cancelled=0)


def test_an_exception_in_the_server_is_a_500_in_the_documented_shape_on_a_live_connection():
    from gpt.server import ServerLimits, create_app

    limits = ServerLimits()
    with in_thread(create_app(FailingEngine(), "failing", limits=limits), limits) as port:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(2):  # the second on the same connection
            connection.request("POST", "/v1/completions", body=b'{"prompt": "hi"}')
            response = connection.getresponse()
            assert response.status == 500
            error = assert_error(response.read(), 500, None)
            assert "RuntimeError" in error["message"]
            sock = connection.sock
            connection.request("GET", "/health")
            assert connection.getresponse().read() == b'{"status":"ok"}' and connection.sock is sock
        connection.close()
