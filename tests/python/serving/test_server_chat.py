"""`python -m gpt serve`'s /v1/chat/completions over HTTP: a small random Llama HF directory with
a ChatML template and byte-level tokenizer, its answers against model.generate on the
conversation rendered here with transformers' own template renderer and tokenized with
`tokenizers` directly (not gpt.chat), plain and streamed, stopping at the end-of-turn token; the
same strict validation as /v1/completions; and SmolLM2 answering "Paris"."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest
import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils.chat_template_utils import render_jinja_template

import gpt
from gpt import gguf_file, gguf_tokenizer
from gpt import models as installed

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
CONTEXT = 512
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 256, 257, 258 after the 256 bytes
IM_END = 258
# SmolLM2's template (the one its GGUF file holds), with its default system message.
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "and 3+3? ünï"},
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(*flags, startup_seconds=120):
    """A `gpt serve` process on a free port; yields its base url."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    process = subprocess.Popen(
        [sys.executable, "-m", "gpt", "serve", "--port", str(port), *flags],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_seconds
        while True:
            assert process.poll() is None, f"server exited: {process.stdout.read()}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"server did not come up in {startup_seconds} s"
            time.sleep(0.2)
        yield url
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


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


def rendered_ids(directory, messages):
    """The conversation's prompt tokens, made without gpt: transformers' template renderer and the
    directory's tokenizer.json through `tokenizers` (special tokens parsed, nothing added)."""
    text = render_jinja_template(conversations=[messages], chat_template=CHATML, add_generation_prompt=True)[0][0]
    return Tokenizer.from_file(os.path.join(directory, "tokenizer.json")).encode(text, add_special_tokens=False).ids


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A random LlamaForCausalLM (weights large enough that greedy text wanders) with a byte-level
    BPE tokenizer, ChatML's special tokens and template; its end of turn is <|im_end|> and, through
    generation_config.json, a token greedy generation reaches at its 4th step or later on
    QUESTION, so that the answer ends there. Returns (directory, that token, its step)."""
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
        max_position_embeddings=CONTEXT,
        bos_token_id=None,
        eos_token_id=IM_END,
        initializer_range=0.3,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).eval().save_pretrained(directory, safe_serialization=True)
    model = gpt.GPT.from_pretrained(directory)
    tokens = model.generate(rendered_ids(directory, QUESTION), 16, stop_at_eos=False)
    k = next(k for k in range(3, 16) if tokens[k] not in tokens[:k] and tokens[k] != IM_END)
    with open(os.path.join(directory, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": tokens[k]}, f)
    return directory, tokens[k], k


@pytest.fixture(scope="module")
def model(checkpoint):
    return gpt.GPT.from_pretrained(checkpoint[0])


@pytest.fixture(scope="module")
def url(checkpoint):
    with server("--model", checkpoint[0]) as base:
        yield base


def chat(url, **body):
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=120)


def test_the_model_ends_at_its_eos_and_end_of_turn(checkpoint, model):
    _, end, k = checkpoint
    assert model.end_of_generation == {end, IM_END}  # generation_config.json's and config.json's
    ids = rendered_ids(checkpoint[0], QUESTION)
    assert len(model.generate(ids, 16)) == k
    assert len(model.generate(ids, 16, stop_at_eos=False)) == 16


def test_answer_is_generate_on_the_rendered_conversation_plain_and_streamed(checkpoint, url, model):
    directory, _, k = checkpoint
    ids = rendered_ids(directory, QUESTION)
    want = model.generate(ids, CONTEXT - len(ids))  # ends at the end token, after k tokens
    assert len(want) == k
    response = chat(url, messages=QUESTION, temperature=0)  # max_tokens: the rest of the context
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["object"] == "chat.completion" and answer["id"].startswith("chatcmpl-")
    assert answer["model"] == os.path.basename(directory)
    [choice] = answer["choices"]
    assert choice["message"] == {"role": "assistant", "content": model.tokenizer.decode(want)}
    assert choice["finish_reason"] == "stop"
    assert answer["usage"] == {"prompt_tokens": len(ids), "completion_tokens": k, "total_tokens": len(ids) + k}
    body = dict(messages=QUESTION, temperature=0, stream=True)
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as streamed:
        assert streamed.status_code == 200
        assert streamed.headers["content-type"].startswith("text/event-stream")
        events = sse_events(streamed)
    assert {e["object"] for e in events} == {"chat.completion.chunk"}
    assert len({e["id"] for e in events}) == 1
    deltas = [e["choices"][0]["delta"] for e in events]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[-1] == {} and events[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(e["choices"][0]["finish_reason"] is None for e in events[:-1])
    assert "".join(d.get("content", "") for d in deltas) == choice["message"]["content"]


def test_a_conversation_with_system_and_assistant_turns_and_sampling(checkpoint, url, model):
    ids = rendered_ids(checkpoint[0], CONVERSATION)
    for max_tokens, sampling in ((6, {}), (20, dict(temperature=0.9, top_k=30, seed=5))):
        want = model.generate(ids, max_tokens, **sampling)
        body = dict(messages=CONVERSATION, max_tokens=max_tokens, temperature=0) | sampling
        answer = chat(url, **body).json()
        assert answer["choices"][0]["message"]["content"] == model.tokenizer.decode(want)
        assert answer["choices"][0]["finish_reason"] == ("length" if len(want) == max_tokens else "stop")
        assert answer["usage"]["prompt_tokens"] == len(ids)
    # max_completion_tokens, OpenAI's newer name, is max_tokens.
    answer = chat(url, messages=CONVERSATION, max_completion_tokens=3, temperature=0).json()
    assert answer["usage"]["completion_tokens"] <= 3
    assert answer["choices"][0]["message"]["content"] == model.tokenizer.decode(model.generate(ids, 3))


def test_stop_strings_cut_the_answer(checkpoint, url, model):
    ids = rendered_ids(checkpoint[0], CONVERSATION)
    text = model.tokenizer.decode(model.generate(ids, 20, stop_at_eos=False))
    stop = next(text[i : i + 2] for i in range(3, len(text) - 2) if "\ufffd" not in text[i : i + 2])
    answer = chat(url, messages=CONVERSATION, max_tokens=20, temperature=0, stop=stop).json()
    assert answer["choices"][0]["message"]["content"] == text[: text.find(stop)]
    assert answer["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (dict(messages=[{"role": "tool", "content": "x"}]), 422, "messages"),
        (dict(messages=[{"role": "user", "content": [{"type": "text", "text": "x"}]}]), 422, "messages"),
        (dict(messages=[{"role": "user", "content": None}]), 422, "messages"),
        (dict(messages=[{"role": "user", "content": "x", "name": "me"}]), 422, "messages"),
        (dict(messages=[{"role": "user"}]), 422, "messages"),
        (dict(messages=[]), 422, "messages"),
        (dict(messages="hi"), 422, "messages"),
        (dict(max_tokens=3), 422, "messages"),
        (dict(messages=QUESTION * 1025), 422, "messages"),
        (dict(messages=QUESTION, temperature="0"), 422, "temperature"),
        (dict(messages=QUESTION, max_tokens=-1), 422, "max_tokens"),
        (dict(messages=QUESTION, max_completion_tokens=2.0), 422, "max_completion_tokens"),
        (dict(messages=QUESTION, top_p=0), 422, "top_p"),
        (dict(messages=QUESTION, n=17), 422, "n"),
        (dict(messages=QUESTION, stop=["a"] * 5), 422, "stop"),
        (dict(messages=QUESTION, logprobs=1), 422, "logprobs"),
        (dict(messages=QUESTION, prompt="hi"), 422, "prompt"),
        (dict(messages=QUESTION, max_tokens=2, max_completion_tokens=2), 400, "max_completion_tokens"),
        (dict(messages=QUESTION, max_tokens=CONTEXT), 400, "messages"),  # with the conversation, past the context
        (dict(messages=[{"role": "user", "content": "x" * CONTEXT}]), 400, "messages"),
    ],
)
def test_bad_requests_name_the_field(url, body, status, field):
    response = chat(url, **body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == field and field in error["message"]
    assert error["type"] == "invalid_request_error" and error["code"] == status


def test_an_unknown_model_is_404(url):
    response = chat(url, model="gpt-4", messages=QUESTION)
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"


def test_smollm2_answers_paris():
    """The real model through the whole path: its GGUF file's template, <|im_end|> ending the turn."""
    path = installed.find("smollm2")
    import gguf

    tokenizer = gguf_tokenizer.read_tokenizer(gguf_file._Metadata(gguf.GGUFReader(path), path), path, 49152)
    prompt = render_jinja_template(
        conversations=[QUESTION], chat_template=tokenizer.chat_template, add_generation_prompt=True
    )[0][0]
    # In f32, the file's exact values (the default runs its q4_1 blocks with int8 activations, as
    # llama.cpp does, whose first token on this question is "L": test_smollm2, docs/USAGE.md).
    with server("--model", "smollm2", "--weights", "f32") as base:
        response = httpx.post(
            base + "/v1/chat/completions", json=dict(messages=QUESTION, temperature=0, max_tokens=48), timeout=900
        )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert "Paris" in answer["choices"][0]["message"]["content"], answer
    assert answer["choices"][0]["finish_reason"] == "stop"  # at <|im_end|>, before max_tokens
    assert answer["usage"]["prompt_tokens"] == len(tokenizer.encode(prompt, add_special_tokens=False))


def test_a_body_over_the_limit_is_refused_unread(url):
    big = [{"role": "user", "content": "x" * (2 * 2**20)}]  # the default max_body_bytes is 2 MiB
    response = chat(url, messages=big)
    assert response.status_code == 413 and "max_body_bytes" in response.json()["error"]["message"]


def test_a_template_that_refuses_the_conversation_is_a_400_naming_messages(model, tmp_path):
    """The app in-process over a directory whose template raises (Mistral's rule: user and
    assistant alternate, starting with the user)."""
    from fastapi.testclient import TestClient

    from gpt.engine import Engine
    from gpt.server import create_app

    alternating = (
        "{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
        "{% endif %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    )
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": alternating, "eos_token": "<|im_end|>"})
    )
    with TestClient(create_app(Engine(model), "alternating", model_dir=str(tmp_path))) as client:
        refused = client.post("/v1/chat/completions", json=dict(messages=[{"role": "assistant", "content": "x"}]))
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["param"] == "messages" and "Conversation roles must alternate" in error["message"]
        body = dict(messages=[{"role": "user", "content": "x"}], max_tokens=2, temperature=0)
        answered = client.post("/v1/chat/completions", json=body)
        assert answered.status_code == 200, answered.text
        ids = model.tokenizer.backend.encode("[user]x", add_special_tokens=False).ids
        assert answered.json()["usage"]["prompt_tokens"] == len(ids)
        # The OpenAPI document holds the schema a chat request's messages refer to.
        document = client.get("/openapi.json").json()
        schema = document["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]
        assert schema["schema"]["properties"]["messages"]["items"] == {"$ref": "#/components/schemas/ChatMessage"}
        properties = {"role", "content", "tool_calls", "tool_call_id"}
        assert set(document["components"]["schemas"]["ChatMessage"]["properties"]) == properties
