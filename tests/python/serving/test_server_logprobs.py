"""logprobs, top_logprobs, echo, n and seed on the OpenAI-compatible server: every logprob against an
independent numpy log-softmax of the model's own forward() logits (greedy and temperature 0.7),
completions' and chat's shapes plain and streamed, echo scoring a prompt with max_tokens 0, n
choices from one prefill of the prompt (the engine's counters), seeded choices reproducible, bad
values naming the field, and the `openai` client against a real `python -m gpt serve`."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM

import gpt
from gpt.cli import EMBEDDED_MODEL
from gpt.engine import Engine
from gpt.engine.engine import choice_seed
from gpt.server import create_app

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
TOLERANCE = 1e-4
PROMPT = "The quick brown fox jumps over the lazy dog. "
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 256, 257, 258 after the 256 bytes
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
    " + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def reference_logprobs(model, tokens, temperature) -> np.ndarray:
    """log softmax(logits / temperature) of every position of forward(tokens), in float64; row i
    is the distribution of token i + 1."""
    logits = np.asarray(model.forward(tokens), dtype=np.float64)
    if temperature > 0:
        logits = logits / temperature
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def byte_token(b: int) -> str:
    """A byte model's token as OpenAI writes a token: its text, or its bytes when not UTF-8 alone."""
    return chr(b) if b < 0x80 else f"bytes:\\x{b:02x}"


def sse_events(response) -> list[dict]:
    payloads = []
    for line in response.iter_lines():
        if not line:
            continue
        assert line.startswith("data: "), line
        if line == "data: [DONE]":
            return payloads
        payloads.append(json.loads(line[len("data: ") :]))
    raise AssertionError("the stream ended without [DONE]")


def streamed(client, path, body) -> list[dict]:
    with client.stream("POST", path, json=body | {"stream": True}) as response:
        assert response.status_code == 200, response.read()
        return sse_events(response)


@pytest.fixture(scope="module")
def byte_model():
    return gpt.GPT.from_pretrained(EMBEDDED_MODEL)


@pytest.fixture(scope="module")
def byte_app(byte_model):
    """(the in-process app over the byte model, its engine)."""
    engine = Engine(byte_model)
    with TestClient(create_app(engine, "byte-gpt")) as client:
        yield client, engine


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    """A random Llama HF directory with a byte-level BPE tokenizer (no merges: a token per byte)
    and a ChatML template."""
    directory = str(tmp_path_factory.mktemp("chatml-llama"))
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": CHATML, "eos_token": "<|im_end|>", "bos_token": None}, f)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256 + len(SPECIALS),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        max_position_embeddings=256,
        bos_token_id=None,
        eos_token_id=None,  # answers run to max_tokens
        initializer_range=0.3,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).eval().save_pretrained(directory, safe_serialization=True)
    return directory


@pytest.fixture(scope="module")
def chat_model(chat_dir):
    return gpt.GPT.from_pretrained(chat_dir)


@pytest.fixture(scope="module")
def chat_app(chat_model, chat_dir):
    with TestClient(create_app(Engine(chat_model), "chatml", model_dir=chat_dir)) as client:
        yield client


def chat_prompt_ids(chat_dir) -> list[int]:
    text = f"<|im_start|>user\n{QUESTION[0]['content']}<|im_end|>\n<|im_start|>assistant\n"
    return Tokenizer.from_file(os.path.join(chat_dir, "tokenizer.json")).encode(text, add_special_tokens=False).ids


# -- completions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_completion_logprobs_are_the_models_log_softmax_plain_and_streamed(byte_app, byte_model, temperature):
    client, _ = byte_app
    body = dict(prompt=PROMPT, max_tokens=12, temperature=temperature, seed=3, logprobs=5)
    choice = client.post("/v1/completions", json=body).json()["choices"][0]
    tokens = choice["token_ids"]
    prompt = list(PROMPT.encode())
    want = reference_logprobs(byte_model, prompt + tokens, temperature)[len(prompt) - 1 :]
    logprobs = choice["logprobs"]
    assert set(logprobs) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert logprobs["tokens"] == [byte_token(t) for t in tokens]
    np.testing.assert_allclose(logprobs["token_logprobs"], [want[i, t] for i, t in enumerate(tokens)], atol=TOLERANCE)
    for i, (token, top) in enumerate(zip(tokens, logprobs["top_logprobs"], strict=True)):
        best = np.argsort(-want[i], kind="stable")[:5]
        listed = list(top.items())
        # The 5 most likely first, most likely first, then the chosen token when it is not among them.
        assert [k for k, _ in listed[:5]] == [byte_token(t) for t in best]
        np.testing.assert_allclose([v for _, v in listed[:5]], want[i, best], atol=TOLERANCE)
        assert [v for _, v in listed[:5]] == sorted((v for _, v in listed[:5]), reverse=True)
        assert byte_token(token) in top and len(top) == 5 + (token not in best)
    if temperature == 0:  # greedy: the chosen token is the most likely
        assert all(t == int(np.argmax(want[i])) for i, t in enumerate(tokens))
    assert logprobs["text_offset"] == [len(bytes(tokens[:i]).decode("utf-8", "replace")) for i in range(len(tokens))]
    # Streamed, each chunk carries its token's entry; together they are the plain answer's.
    events = streamed(client, "/v1/completions", body)
    pieces = [e["choices"][0]["logprobs"] for e in events]
    assert [t for p in pieces for t in p["tokens"]] == logprobs["tokens"]
    assert [v for p in pieces for v in p["token_logprobs"]] == logprobs["token_logprobs"]
    assert [d for p in pieces for d in p["top_logprobs"]] == logprobs["top_logprobs"]
    assert [o for p in pieces for o in p["text_offset"]] == logprobs["text_offset"]


def test_completion_without_logprobs_has_none(byte_app):
    client, _ = byte_app
    choice = client.post("/v1/completions", json=dict(prompt=PROMPT, max_tokens=3)).json()["choices"][0]
    assert choice["logprobs"] is None
    events = streamed(client, "/v1/completions", dict(prompt=PROMPT, max_tokens=3))
    assert all(e["choices"][0]["logprobs"] is None for e in events)


def test_echo_with_max_tokens_0_scores_the_prompt(byte_app, byte_model):
    """What lm-evaluation-harness sends for a loglikelihood: echo, logprobs, max_tokens 0."""
    client, _ = byte_app
    prompt = list(PROMPT.encode())
    want = reference_logprobs(byte_model, prompt, 0.0)
    body = dict(prompt=PROMPT, max_tokens=0, echo=True, logprobs=1, temperature=0)
    answer = client.post("/v1/completions", json=body).json()
    [choice] = answer["choices"]
    assert choice["text"] == PROMPT and choice["finish_reason"] == "length" and choice["token_ids"] == []
    logprobs = choice["logprobs"]
    assert logprobs["tokens"] == [byte_token(t) for t in prompt]
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None  # nothing predicts it
    np.testing.assert_allclose(
        logprobs["token_logprobs"][1:], [want[i - 1, t] for i, t in enumerate(prompt) if i], atol=TOLERANCE
    )
    for i in range(1, len(prompt)):
        assert byte_token(int(np.argmax(want[i - 1]))) == next(iter(logprobs["top_logprobs"][i]))
    assert logprobs["text_offset"] == list(range(len(prompt)))
    assert answer["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 0, "total_tokens": len(prompt)}
    # Streamed: the prompt's chunk, then the end.
    events = streamed(client, "/v1/completions", body)
    assert "".join(e["choices"][0]["text"] for e in events) == PROMPT
    assert events[0]["choices"][0]["logprobs"] == logprobs
    assert events[-1]["choices"][0]["finish_reason"] == "length"


def test_echo_with_a_completion_and_token_ids(byte_app, byte_model):
    client, _ = byte_app
    prompt = list(b"Once upon a time")
    body = dict(prompt=prompt, max_tokens=6, echo=True, logprobs=0, temperature=0.7, seed=9)
    choice = client.post("/v1/completions", json=body).json()["choices"][0]
    tokens = choice["token_ids"]
    assert choice["text"] == "Once upon a time" + bytes(tokens).decode("utf-8", "replace")
    want = reference_logprobs(byte_model, prompt + tokens, 0.7)
    everything = prompt + tokens
    logprobs = choice["logprobs"]
    assert logprobs["tokens"] == [byte_token(t) for t in everything]
    np.testing.assert_allclose(
        logprobs["token_logprobs"][1:], [want[i - 1, t] for i, t in enumerate(everything) if i], atol=TOLERANCE
    )
    assert logprobs["text_offset"][: len(prompt) + 1] == list(range(len(prompt) + 1))
    # logprobs 0: each dict holds only the chosen token.
    assert all(list(d) == [byte_token(t)] for d, t in zip(logprobs["top_logprobs"][1:], everything[1:], strict=True))
    # Echo without logprobs: the text only.
    plain = client.post("/v1/completions", json=dict(prompt="abc", max_tokens=2, echo=True)).json()["choices"][0]
    assert plain["text"].startswith("abc") and plain["logprobs"] is None
    events = streamed(client, "/v1/completions", dict(prompt="abc", max_tokens=2, echo=True))
    assert events[0]["choices"][0]["text"] == "abc"


# -- n and seed ----------------------------------------------------------------------------------------


def test_n_choices_from_one_prefill(byte_app):
    client, engine = byte_app
    prompt = "A prompt that no other test sends, 37 characters"
    before = engine.metrics()
    body = dict(prompt=prompt, max_tokens=10, temperature=1.0, seed=21, n=4)
    answer = client.post("/v1/completions", json=body).json()
    after = engine.metrics()
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2, 3]
    assert after.prefill_tokens - before.prefill_tokens == len(prompt)  # the prompt ran once
    assert after.requests_finished - before.requests_finished == 4
    assert after.generated_tokens - before.generated_tokens == 40
    assert answer["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 40, "total_tokens": len(prompt) + 40}
    texts = [c["text"] for c in answer["choices"]]
    assert len(set(texts)) > 1  # each choice draws its own tokens
    # Streamed: every choice's chunks, by index, with the same seed the same texts; each ends once.
    events = streamed(client, "/v1/completions", body)
    assert all(len(e["choices"]) == 1 for e in events)
    for index, text in enumerate(texts):
        mine = [e["choices"][0] for e in events if e["choices"][0]["index"] == index]
        assert "".join(c["text"] for c in mine) == text
        assert [c["finish_reason"] for c in mine].count("length") == 1 and mine[-1]["finish_reason"] == "length"
    # Greedy choices are all the same (as vLLM's are).
    greedy = client.post("/v1/completions", json=dict(prompt=prompt, max_tokens=8, temperature=0, n=3)).json()
    assert len({c["text"] for c in greedy["choices"]}) == 1 and len(greedy["choices"]) == 3


def test_n_chat_choices_with_logprobs_streamed(chat_app):
    body = dict(messages=QUESTION, max_tokens=6, temperature=1.0, seed=4, n=3, logprobs=True, top_logprobs=2)
    answer = chat_app.post("/v1/chat/completions", json=body).json()
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
    events = streamed(chat_app, "/v1/chat/completions", body)
    for choice in answer["choices"]:
        mine = [e["choices"][0] for e in events if e["choices"][0]["index"] == choice["index"]]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        assert "".join(c["delta"].get("content", "") for c in mine) == choice["message"]["content"]
        content = [entry for c in mine if c["logprobs"] for entry in c["logprobs"]["content"]]
        assert content == choice["logprobs"]["content"] and len(content) == 6
        assert mine[-1]["finish_reason"] == "length" and mine[-1]["delta"] == {}


def test_the_same_seed_gives_the_same_text_and_another_seed_other_text(byte_app):
    client, _ = byte_app

    def texts(seed, n=1):
        body = dict(prompt=PROMPT, max_tokens=32, temperature=1.0, seed=seed, n=n)
        return [c["text"] for c in client.post("/v1/completions", json=body).json()["choices"]]

    assert texts(5) == texts(5)
    assert texts(5, n=3) == texts(5, n=3)
    assert texts(5, n=3)[0] == texts(5)[0]  # choice 0 draws with the seed itself, choice i with (seed, i)
    assert texts(5) != texts(6)


def test_engine_choices_through_preemption_are_generates_with_their_seeds(byte_model):
    """n choices in a pool that holds one at a time: forked, copied on write, preempted and
    recomputed, each still draws exactly what model.generate draws with its seed."""
    prompt = list(b"Forked here")  # 11 tokens: the prompt ends inside a block of 4
    engine = Engine(byte_model, num_blocks=7, block_size=4, start=False)
    handles = engine.submit_choices(prompt, 4, 12, temperature=1.0, seed=7)
    while engine.step():
        pass
    for index, handle in enumerate(handles):
        assert handle.index == index and handle.finish_reason == "length"
        want = byte_model.generate(prompt, 12, temperature=1.0, seed=choice_seed(7, index), stop_at_eos=False)
        assert handle.tokens == want, index
    metrics = engine.metrics()
    assert metrics.preemptions > 0 and metrics.blocks_copied > 0  # the paths this test is about ran
    assert metrics.blocks_in_use == 0


def test_engine_choices_cancelled_before_and_after_the_fork(byte_model):
    engine = Engine(byte_model, start=False)
    first = engine.submit_choices(list(b"abc"), 3, 4)
    first[1].cancel()  # before the fork: the others go on without it
    second = engine.submit_choices(list(b"xyz"), 3, 4, prompt_logprobs=0)
    second[0].cancel()  # the choice the others fork from: they end with it
    while engine.step():
        pass
    assert [h.finish_reason for h in first] == ["length", "cancelled", "length"]
    assert [len(h.tokens) for h in first] == [4, 0, 4]
    assert [h.finish_reason for h in second] == ["cancelled"] * 3
    scored = engine.submit_choices(list(b"xyz"), 2, 0, prompt_logprobs=1)  # scored, nothing generated
    while engine.step():
        pass
    assert [h.finish_reason for h in scored] == ["length", "length"]
    assert all(h.prompt_logprobs[0] is None and len(h.prompt_logprobs) == 3 for h in scored)
    assert engine.metrics().blocks_in_use == 0


# -- chat ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_chat_logprobs_are_the_models_log_softmax(chat_app, chat_model, chat_dir, temperature):
    body = dict(messages=QUESTION, max_tokens=10, temperature=temperature, seed=8, logprobs=True, top_logprobs=4)
    answer = chat_app.post("/v1/chat/completions", json=body).json()
    [choice] = answer["choices"]
    content = choice["logprobs"]["content"]
    assert len(content) == 10
    prompt = chat_prompt_ids(chat_dir)
    # Each token's bytes, joined, are the answer's text; here a token is one byte (no merges).
    assert b"".join(bytes(e["bytes"]) for e in content).decode("utf-8", "replace") == choice["message"]["content"]
    tokenizer = Tokenizer.from_file(os.path.join(chat_dir, "tokenizer.json"))
    char_of = byte_level_chars()
    ids = [tokenizer.token_to_id(char_of[b]) for e in content for b in e["bytes"]]
    assert len(ids) == len(content)
    want = reference_logprobs(chat_model, prompt + ids, temperature)[len(prompt) - 1 :]
    for i, (entry, token) in enumerate(zip(content, ids, strict=True)):
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert abs(entry["logprob"] - want[i, token]) < TOLERANCE
        top = entry["top_logprobs"]
        assert len(top) == 4 and all(set(t) == {"token", "logprob", "bytes"} for t in top)
        values = [t["logprob"] for t in top]
        assert values == sorted(values, reverse=True)
        np.testing.assert_allclose(values, np.sort(want[i])[::-1][:4], atol=TOLERANCE)
        if want[i, token] >= np.sort(want[i])[::-1][3] + TOLERANCE:  # among the top 4: listed
            assert entry["token"] in [t["token"] for t in top]
        if temperature == 0:
            assert top[0]["token"] == entry["token"]
    # logprobs without top_logprobs: no alternatives; without logprobs: null. Seeded: unseeded, an
    # answer sometimes ended at its first token (one entry).
    body = dict(messages=QUESTION, max_tokens=2, logprobs=True, seed=8)
    bare = chat_app.post("/v1/chat/completions", json=body).json()
    assert [e["top_logprobs"] for e in bare["choices"][0]["logprobs"]["content"]] == [[], []]
    none = chat_app.post("/v1/chat/completions", json=dict(messages=QUESTION, max_tokens=2)).json()
    assert none["choices"][0]["logprobs"] is None


def byte_level_chars() -> dict[int, str]:
    """GPT-2's byte-level alphabet: the character that stands for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(others)}


# -- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/v1/completions", dict(prompt="hi", logprobs=6), 422, "logprobs"),
        ("/v1/completions", dict(prompt="hi", logprobs=-1), 422, "logprobs"),
        ("/v1/completions", dict(prompt="hi", logprobs=True), 422, "logprobs"),
        ("/v1/completions", dict(prompt="hi", echo="yes"), 422, "echo"),
        ("/v1/completions", dict(prompt="hi", n=0), 422, "n"),
        ("/v1/completions", dict(prompt="hi", n=17), 422, "n"),
        ("/v1/completions", dict(prompt="hi", n=1000), 422, "n"),
        ("/v1/completions", dict(prompt="hi", top_logprobs=2), 422, "top_logprobs"),
        ("/v1/chat/completions", dict(messages=QUESTION, top_logprobs=21), 422, "top_logprobs"),
        ("/v1/chat/completions", dict(messages=QUESTION, logprobs=True, top_logprobs=21), 422, "top_logprobs"),
        ("/v1/chat/completions", dict(messages=QUESTION, top_logprobs=2), 400, "top_logprobs"),
        ("/v1/chat/completions", dict(messages=QUESTION, logprobs=False, top_logprobs=2), 400, "top_logprobs"),
        ("/v1/chat/completions", dict(messages=QUESTION, logprobs=3), 422, "logprobs"),
        ("/v1/chat/completions", dict(messages=QUESTION, echo=True), 422, "echo"),
        ("/v1/chat/completions", dict(messages=QUESTION, n=0), 422, "n"),
        ("/v1/chat/completions", dict(messages=QUESTION, n=1000), 422, "n"),
    ],
)
def test_bad_values_name_the_field(chat_app, path, body, status, field):
    response = chat_app.post(path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == field and field in error["message"], error


# -- the openai client against a real server -------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(*flags):
    """A `python -m gpt serve` process on a free port; yields its base url."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gpt", "serve", "--port", str(port), *flags],
        env=dict(os.environ, PYTHONPATH=PACKAGE_ROOT),
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
        yield url
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def test_the_openai_client_against_gpt_serve(chat_dir, chat_model):
    import openai

    prompt = "Hello there, "
    prompt_ids = Tokenizer.from_file(os.path.join(chat_dir, "tokenizer.json")).encode(prompt).ids
    with server("--model", chat_dir) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        model = os.path.basename(chat_dir)
        # Completions: echo + logprobs scoring a prompt, then n seeded choices with logprobs.
        scored = client.completions.create(model=model, prompt=prompt, max_tokens=0, echo=True, logprobs=3)
        want = reference_logprobs(chat_model, prompt_ids, 1.0)
        [choice] = scored.choices
        assert choice.text == prompt and choice.logprobs.token_logprobs[0] is None
        np.testing.assert_allclose(
            choice.logprobs.token_logprobs[1:], [want[i - 1, t] for i, t in enumerate(prompt_ids) if i], atol=TOLERANCE
        )
        sampled = client.completions.create(
            model=model, prompt=prompt, max_tokens=8, n=2, seed=3, logprobs=2, temperature=0.7
        )
        again = client.completions.create(
            model=model, prompt=prompt, max_tokens=8, n=2, seed=3, logprobs=2, temperature=0.7
        )
        assert [c.index for c in sampled.choices] == [0, 1]
        assert [c.text for c in sampled.choices] == [c.text for c in again.choices]
        for c in sampled.choices:
            assert len(c.logprobs.token_logprobs) == 8 and all(len(d) in (2, 3) for d in c.logprobs.top_logprobs)
        # Chat: logprobs and top_logprobs, plain and streamed, greedy.
        chat = client.chat.completions.create(
            model=model, messages=QUESTION, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3
        )
        content = chat.choices[0].logprobs.content
        assert len(content) == 6 and all(len(e.top_logprobs) == 3 for e in content)
        assert all(e.top_logprobs[0].token == e.token for e in content)  # greedy: the most likely
        stream = client.chat.completions.create(
            model=model,
            messages=QUESTION,
            max_tokens=6,
            temperature=0,
            logprobs=True,
            top_logprobs=3,
            n=2,
            stream=True,
        )
        pieces = {0: [], 1: []}
        for chunk in stream:
            for c in chunk.choices:
                if c.logprobs is not None:
                    pieces[c.index] += [(e.token, e.logprob) for e in c.logprobs.content]
        assert pieces[0] == pieces[1] == [(e.token, e.logprob) for e in content]
        with pytest.raises(openai.UnprocessableEntityError, match="top_logprobs"):
            client.chat.completions.create(model=model, messages=QUESTION, logprobs=True, top_logprobs=21)
        with pytest.raises(openai.BadRequestError, match="top_logprobs"):
            client.chat.completions.create(model=model, messages=QUESTION, top_logprobs=2)
