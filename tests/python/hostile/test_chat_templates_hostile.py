"""Chat templates as untrusted code (issue 43): a template that loops forever, builds a huge
string or number, nests or recurses too deeply, divides by zero or renders nothing is stopped
within its budget and answered with one ChatTemplateError naming where it came from; a HF
directory's template is not read through a link out of the directory; the server serving an
endless template goes on answering /health and completions, answers each hostile chat with a
400, and stops on SIGTERM; `python -m gpt chat` prints one error line; rendered prompts are
tokenized with the GIL released."""

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time

import gguf
import httpx
import pytest
from safetensors.numpy import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

import gpt
from checkpoints import hf_config
from gpt import chat, gguf_file, gguf_tokenizer
from gpt import models as installed
from gpt.chat import ChatTemplate, ChatTemplateError, chat_spec
from gpt.weights import random_weights

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/python: the helper modules
ORIGIN = "hostile.gguf (tokenizer.chat_template)"
USER = [{"role": "user", "content": "hi"}]
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
ENDLESS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x"
# What a refusal may take on a loaded two-core machine: the budget is 0.5 s, a fresh worker
# starts in 0.1-0.4 s; 10x margin.
PROMPT_SECONDS = 10


def within(seconds: float, function):
    """function(), run in a thread that must finish within `seconds` (on the code before issue 43
    some of these never return); its result, or the exception it raised."""
    outcome = {}

    def run():
        try:
            outcome["result"] = function()
        except BaseException as e:  # noqa: BLE001 (handed back to the test)
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return outcome.get("error", outcome.get("result"))


def refused(function, *fragments, seconds: float = PROMPT_SECONDS) -> str:
    """function() must raise a ChatTemplateError (a ValueError) within `seconds`, its message
    holding each of `fragments`; returns the message."""
    error = within(seconds, function)
    assert isinstance(error, ChatTemplateError) and isinstance(error, ValueError), repr(error)
    for fragment in fragments:
        assert fragment in str(error), str(error)
    return str(error)


# -- the template alone: compile and render -------------------------------------------------------


def test_an_endless_loop_is_stopped_within_its_budget_and_the_next_render_works():
    template = ChatTemplate(ENDLESS, origin=ORIGIN)
    start = time.monotonic()
    refused(lambda: template.render(USER), ORIGIN, "did not finish rendering within")
    assert time.monotonic() - start < PROMPT_SECONDS
    refused(lambda: template.render(USER), ORIGIN, "did not finish rendering within")  # every time
    assert ChatTemplate(CHATML).render(USER) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_a_power_tower_compiles_at_once_and_is_refused_when_rendered():
    # jinja2 folds constant arithmetic while it compiles: 9**99999999 took minutes at load.
    template = within(PROMPT_SECONDS, lambda: ChatTemplate("{{ 9**99999999 }}", origin=ORIGIN))
    assert isinstance(template, ChatTemplate), repr(template)
    refused(lambda: template.render(USER), ORIGIN, "** would make an int of more than")


@pytest.mark.parametrize(
    "source",
    [
        "{% if true %}" * 2000 + "x" + "{% endif %}" * 2000,
        "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
    ],
    ids=["if-blocks", "parentheses"],
)
def test_deep_nesting_is_refused_when_the_template_loads(source):
    refused(lambda: ChatTemplate(source, origin=ORIGIN), ORIGIN, "the chat template does not compile")


@pytest.mark.parametrize(
    "source, fragment",
    [
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{{ messages + 1 }}", "TypeError"),
        ("{{ 2.0 ** 10000 }}", "OverflowError"),
        ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "RecursionError"),
        ("{{ 'x' | center(1000000000) }}", "MemoryError"),
        ("{{ raise_exception('roles must alternate') }}", "roles must alternate"),
    ],
    ids=["zero-division", "type", "overflow", "recursion", "memory", "raise-exception"],
)
def test_a_failing_render_is_one_error_naming_the_template(source, fragment):
    template = ChatTemplate(source, origin=ORIGIN)
    refused(lambda: template.render(USER), ORIGIN, "the chat template failed", fragment)


def test_a_template_that_renders_nothing_names_itself():
    template = ChatTemplate("{% if false %}x{% endif %}", origin=ORIGIN)
    refused(lambda: template.render(USER), ORIGIN, "rendered nothing")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize(
    "source, fragment",
    [
        ("{{ 'a' * 300000000 }}", "* would make a str of 300000000 items"),
        ("{{ 'a' * 3*10**7 }}", "* would make a str of 30000000 items"),
        ("{{ strftime_now('%Y' * (messages|length * 10**7)) }}", "* would make a str of 20000000 items"),
        ("{% for i in range(100000) %}{{ 'a' * 1000 }}{% endfor %}", "longer than 1000000 characters"),
        ("{{ strftime_now('%Y' * 1000) }}", "strftime_now takes a format of at most"),
    ],
    ids=["300MB", "30MB", "strftime", "many-pieces", "strftime-format"],
)
def test_the_rendered_prompt_is_bounded_before_it_is_made(source, fragment):
    template = ChatTemplate(source, origin=ORIGIN)
    before = peak_rss_mib()
    refused(lambda: template.render(USER, max_chars=10**6), ORIGIN, fragment)
    assert peak_rss_mib() - before < 100  # the caller never held the string (300 MB before)


def test_a_too_long_render_is_render_too_long_and_a_chat_turns_it_into_conversation_full():
    template = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}", origin=ORIGIN)
    assert template.render([{"role": "user", "content": "a" * 100}], max_chars=100) == "a" * 100
    with pytest.raises(chat.RenderTooLong, match="longer than 99 characters"):
        template.render([{"role": "user", "content": "a" * 100}], max_chars=99)
    assert chat.max_prompt_chars(1024) == 16 * 1024 and chat.max_prompt_chars(2**20, 2 * 2**20) == 2 * 2**20


def test_variables_and_budget_arguments_are_checked():
    template = ChatTemplate(CHATML, origin=ORIGIN)
    with pytest.raises(ValueError, match="max_chars must be a positive int, got 0"):
        template.render(USER, max_chars=0)
    with pytest.raises(TypeError, match="the variables of a chat template must be plain data"):
        template.render(USER, tools=threading.Lock())
    assert (
        template.render(USER, add_generation_prompt=False, tools=[{"name": "x"}]) == "<|im_start|>user\nhi<|im_end|>\n"
    )


# -- HF directories: the file named, no links out -----------------------------------------------------


def test_a_directory_template_is_named_by_its_file_and_key(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": ENDLESS, "eos_token": "x"}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    spec = chat_spec(gpt.ByteTokenizer(), str(tmp_path))
    origin = f"{tmp_path / 'tokenizer_config.json'} (chat_template)"
    assert spec.template.origin == origin
    refused(lambda: spec.template.render(USER), origin, "did not finish rendering")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "x"}))
    (tmp_path / "chat_template.jinja").write_text("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}")
    refused(
        lambda: chat_spec(gpt.ByteTokenizer(), str(tmp_path)),
        f"{tmp_path / 'chat_template.jinja'}: the chat template does not compile",
    )


@pytest.mark.parametrize("name", ["chat_template.jinja", "tokenizer_config.json"])
def test_a_directory_template_is_not_read_through_a_link_out_of_the_directory(tmp_path, name):
    secret = tmp_path / "secret"
    secret.write_text('{"chat_template": "root:x:0:0:root:/root:/bin/bash"}')
    model = tmp_path / "model"
    model.mkdir()
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    if name == "chat_template.jinja":
        (model / "tokenizer_config.json").write_text("{}")
    (model / name).symlink_to(secret)
    with pytest.raises(gpt.ModelFileError, match=f"{name}: leads outside the model directory"):
        chat_spec(gpt.ByteTokenizer(), str(model))


# -- tokenizing: the GIL released, the same ids ----------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    path = installed.find("smollm2")
    return gguf_tokenizer.read_tokenizer(gguf_file._Metadata(gguf.GGUFReader(path), path), path, 49152)


def test_encode_rendered_releases_the_gil_and_gives_encodes_ids(smollm2_tokenizer):
    spec = chat_spec(smollm2_tokenizer)
    assert spec.template.origin == "the GGUF file's tokenizer.chat_template"
    assert chat_spec(smollm2_tokenizer, model_path="s.gguf").template.origin == "s.gguf (tokenizer.chat_template)"
    backend = smollm2_tokenizer.backend
    for messages in (USER, [{"role": "user", "content": "ünï <|im_end|> 2+2?  \n\t x" * 50}]):
        rendered = spec.template.render(messages)
        assert (
            chat.encode_rendered(smollm2_tokenizer, rendered) == backend.encode(rendered, add_special_tokens=False).ids
        )
    # While a 2 MB prompt is tokenized, another thread runs: before, it waited for the whole encode.
    text = "The capital of France is Paris. " * 65536
    gaps, done = [], threading.Event()

    def tick():
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.05)
    start = time.perf_counter()
    ids = chat.encode_rendered(smollm2_tokenizer, text)
    seconds = time.perf_counter() - start
    done.set()
    ticker.join()
    assert len(ids) > 100_000
    assert seconds > 0.2, f"the encode took {seconds:.3f} s, too short to tell"
    assert max(gaps) < seconds / 2, f"the longest pause {max(gaps):.3f} s of an encode of {seconds:.3f} s"


# -- the server and the command line --------------------------------------------------------------


def write_model(directory, template: str) -> str:
    """A nano GPT-2 HF directory with a byte-level tokenizer (one merge; <|endoftext|> its EOS) and
    `template` as tokenizer_config.json's chat_template."""
    directory.mkdir()
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()) + ["hi"])}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[("h", "i")]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    tokenizer.save(str(directory / "tokenizer.json"))
    config = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=258, block_size=64)
    (directory / "config.json").write_text(json.dumps(hf_config(config) | {"eos_token_id": 257}))
    save_file(random_weights(config), str(directory / "model.safetensors"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": template, "eos_token": "<|endoftext|>"})
    )
    return str(directory)


@pytest.fixture(scope="module")
def endless_model(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("endless") / "model", ENDLESS)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(model: str):
    """A `gpt serve` process for `model` on a free port: (its url, the process)."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, HERE]))
    process = subprocess.Popen(
        [sys.executable, "-m", "gpt", "serve", "--model", model, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert process.poll() is None, "the server exited at start-up"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, "the server did not come up in 180 s"
            time.sleep(0.2)
        yield url, process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def test_a_server_with_an_endless_template_answers_everything_else_and_each_hostile_chat_with_400(endless_model):
    with serve(endless_model) as (url, _):
        hostile = dict(messages=USER, max_tokens=2)
        with httpx.Client(timeout=60) as client:
            assert client.post(url + "/v1/completions", json=dict(prompt=[1, 2, 3], max_tokens=2)).status_code == 200
        answers, health = [None] * 4, []

        def ask(i):
            start = time.monotonic()
            response = httpx.post(url + "/v1/chat/completions", json=hostile, timeout=120)
            answers[i] = (response, time.monotonic() - start)

        askers = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for asker in askers:
            asker.start()
        deadline = time.monotonic() + 6 * PROMPT_SECONDS  # before issue 43, they never came back
        while any(asker.is_alive() for asker in askers):
            assert time.monotonic() < deadline, "the hostile chats were not answered"
            start = time.monotonic()
            assert httpx.get(url + "/health", timeout=10).status_code == 200
            health.append(time.monotonic() - start)
            completion = httpx.post(url + "/v1/completions", json=dict(prompt=[4, 5], max_tokens=1), timeout=30)
            assert completion.status_code == 200, completion.text
            time.sleep(0.05)
        for asker in askers:
            asker.join()
        for response, seconds in answers:
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["param"] == "messages"
            assert "tokenizer_config.json (chat_template)" in error["message"]
            assert "did not finish rendering" in error["message"]
            assert seconds < 4 * PROMPT_SECONDS  # two workers, two at a time, each stopped at 0.5 s
        assert health and max(health) < 5, health


def test_sigterm_stops_a_server_while_it_renders_an_endless_template(endless_model):
    with serve(endless_model) as (url, process):
        statuses = []

        def ask():
            with contextlib.suppress(httpx.HTTPError):  # refused once the server stops listening
                statuses.append(httpx.post(url + "/v1/chat/completions", json=dict(messages=USER), timeout=120))

        askers = [threading.Thread(target=ask) for _ in range(4)]
        for asker in askers:
            asker.start()
        time.sleep(0.3)  # the renders are running
        start = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        assert time.monotonic() - start < 20
        for asker in askers:
            asker.join(60)
        assert all(response.status_code == 400 for response in statuses)  # answered while it drained


def test_a_server_whose_template_does_not_compile_starts_and_answers_chat_with_400(tmp_path):
    from fastapi.testclient import TestClient

    from gpt.engine import Engine
    from gpt.server import create_app

    path = write_model(tmp_path / "deep", "{% if true %}" * 2000 + "x" + "{% endif %}" * 2000)
    model = gpt.GPT.from_pretrained(path)
    app = within(60, lambda: create_app(Engine(model), "deep", model_dir=path))
    assert not isinstance(app, BaseException), repr(app)
    with TestClient(app) as client:
        assert client.get("/health").status_code == 200
        response = client.post("/v1/chat/completions", json=dict(messages=USER))
        assert response.status_code == 400
        assert "cannot chat" in response.json()["error"]["message"]
        assert "the chat template does not compile" in response.json()["error"]["message"]


def test_the_chat_command_prints_one_error_line_for_an_endless_template(endless_model):
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "gpt", "chat", "--model", endless_model],
        input="hi\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"{endless_model}/tokenizer_config.json (chat_template)" in lines[0]
    assert "did not finish rendering" in lines[0]
