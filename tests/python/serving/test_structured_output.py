"""JSON-schema-constrained decoding (gpt.structured_output): a small random Llama with a byte-level
tokenizer (qwen_like.py; its text is garbage, the hard case for a grammar) answers 100 of 100
times with JSON that validates against nested, array, enum, bounded and required-field schemas,
through model.generate, the engine, the server's response_format (both endpoints, plain and
streamed), the command line and the `openai` client; refused schemas are 400s naming the field.
SmolLM2 answers json_object with an object. Tool calls: test_structured_output_tools.py."""

import json
import os

import jsonschema
import numpy as np
import pytest
from fastapi.testclient import TestClient

import gpt
from gpt import models as installed
from gpt import structured_output
from gpt.engine import Engine
from gpt.server import create_app
from qwen_like import CONTEXT, IM_END, QUESTION, TIME, WEATHER, model_directory, prompt_ids, serve, sse, valid

NESTED = {
    "type": "object",
    "properties": {
        "user": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 12},
                "id": {"type": "integer", "minimum": 1, "maximum": 999},
            },
            "required": ["name", "id"],
            "additionalProperties": False,
        },
        "active": {"type": "boolean"},
    },
    "required": ["user", "active"],
    "additionalProperties": False,
}
ARRAYS = {
    "type": "object",
    "properties": {
        "scores": {
            "type": "array",
            "items": {"type": "integer", "minimum": -50, "maximum": 50},
            "minItems": 1,
            "maxItems": 5,
        },
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
    },
    "required": ["scores", "tags"],
    "additionalProperties": False,
}
ENUMS = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "size": {"type": "string", "enum": ["S", "M", "L"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 10},
    },
    "required": ["color", "size", "count"],
    "additionalProperties": False,
}
ORDER = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                    "qty": {"type": "integer", "minimum": 1, "maximum": 99},
                },
                "required": ["sku", "qty"],
                "additionalProperties": False,
            },
            "maxItems": 3,
        },
        "note": {"type": "string", "maxLength": 20},
    },
    "required": ["items"],
    "additionalProperties": False,
}
SCHEMAS = [NESTED, ARRAYS, ENUMS, ORDER]


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    return model_directory(str(tmp_path_factory.mktemp("qwen-like")))


@pytest.fixture(scope="module")
def model(directory):
    return gpt.GPT.from_pretrained(directory)


@pytest.fixture(scope="module")
def client(model, directory):
    with serve(model, directory) as client:
        yield client


# -- model.generate -----------------------------------------------------------------------------


def test_100_of_100_sampled_answers_validate_against_their_schemas(model, directory):
    """Garbage text constrained: 25 sampled answers for each of four schemas, all JSON that the
    schema accepts, and each ends when its JSON is complete (before max_new_tokens)."""
    ids = prompt_ids(directory, QUESTION)
    free = model.tokenizer.decode(model.generate(ids, 40, temperature=1.0, seed=0, stop_at_eos=False))
    assert not valid(free, NESTED)  # unconstrained, the model writes no JSON
    results = []
    for schema in SCHEMAS:
        for seed in range(25):
            tokens = model.generate(ids, 1000, temperature=1.0, seed=seed, json_schema=schema)
            results.append((len(tokens) < 1000, valid(model.tokenizer.decode(tokens), schema)))
    assert results == [(True, True)] * 100


def test_greedy_and_any_object(model, directory):
    ids = prompt_ids(directory, QUESTION)
    tokens = model.generate(ids, 1000, json_schema=ENUMS)
    assert valid(model.tokenizer.decode(tokens), ENUMS)
    assert model.generate(ids, 1000, json_schema=ENUMS) == tokens  # greedy: the same answer again
    # Any JSON object: its text is an object as far as it goes (keys and strings are unbounded).
    text = model.tokenizer.decode(model.generate(ids, 30, json_schema=True))
    assert text.lstrip().startswith("{")


def test_the_mask_allows_exactly_the_grammars_tokens(model):
    grammar = structured_output.json_schema_grammar(
        model.tokenizer, ENUMS, vocab_size=model.config.vocab_size, end_ids={IM_END}
    )
    constraint = grammar.start()
    [brace, close, x] = (model.tokenizer.encode(c)[0] for c in "{}x")
    logits = np.zeros(model.config.vocab_size, np.float32)
    allowed = np.isfinite(constraint.mask(logits))
    assert allowed[brace] and not allowed[x] and not allowed[IM_END]
    for token in model.tokenizer.encode('{"color":"red","size":"M","count":1'):
        assert not constraint.advance(token)
    assert constraint.advance(close)  # complete: nothing but the end may follow
    assert list(np.flatnonzero(np.isfinite(constraint.mask(logits)))) == [IM_END]
    constraint.rollback(1)  # the engine undoes a step's token so
    assert np.isfinite(constraint.mask(logits))[close]
    with pytest.raises(ValueError, match="does not continue the JSON"):
        constraint.advance(x)


@pytest.mark.parametrize(
    "schema, fragment",
    [
        ([1, 2], "json_schema must be a JSON schema (a JSON object, a dict) or True for any JSON object, got list"),
        ({"type": "strin"}, "json_schema is refused by the grammar library (llguidance): Invalid type: strin"),
        ({"not": {"type": "string"}}, 'Unimplemented keys: ["not"]'),
        ({"properties": {"a": {"$ref": "#/nowhere"}}}, "Pointer '/nowhere' does not exist"),
        ({"minimum": float("nan")}, "json_schema is not JSON"),
        ({"properties": {f"p{i}": {"type": "string"} for i in range(3000)}}, "more than MAX_SCHEMA_CHARS=32768"),
        ({"items": json.loads("[" * 40 + "]" * 40)}, "MAX_SCHEMA_DEPTH=32"),
    ],
)
def test_refused_schemas_name_the_problem(model, schema, fragment):
    with pytest.raises(ValueError) as refused:
        model.generate([1, 2], 4, json_schema=schema)
    assert fragment in str(refused.value)


def test_json_schema_with_speculative_decoding_or_without_a_tokenizer_is_refused(model):
    with pytest.raises(ValueError, match="json_schema and speculative cannot be combined"):
        model.generate([1, 2, 3], 4, json_schema=ENUMS, speculative="ngram")
    config = gpt.GPTConfig(vocab_size=300, n_layer=1, n_head=2, n_embd=16, block_size=32)
    with pytest.raises(ValueError, match="json_schema needs the model's tokenizer"):
        gpt.GPT.random(config).generate([1, 2], 4, json_schema=ENUMS)


def test_the_byte_level_model_without_end_tokens_ends_when_the_json_is_complete():
    from gpt.cli import EMBEDDED_MODEL

    model = gpt.GPT.from_pretrained(EMBEDDED_MODEL)  # bytes, no tokenizer.json, no EOS
    assert model.tokenizer is None and not model.end_of_generation
    for seed in range(5):
        tokens = model.generate(list(b"Data: "), 240, temperature=1.0, seed=seed, json_schema=ENUMS)
        assert len(tokens) < 240 and valid(bytes(tokens).decode("utf-8"), ENUMS)


# -- the engine ---------------------------------------------------------------------------------


def test_engine_requests_and_choices_each_follow_the_grammar(model, directory):
    ids = prompt_ids(directory, QUESTION)
    grammar = structured_output.json_schema_grammar(
        model.tokenizer, ORDER, vocab_size=model.config.vocab_size, end_ids={IM_END}
    )
    engine = Engine(model, num_blocks=4 * CONTEXT // 16)
    try:
        handles = [engine.submit(ids, 1000, temperature=1.0, seed=s, stop=[IM_END], grammar=grammar) for s in range(6)]
        handles += engine.submit_choices(ids, 4, 1000, temperature=1.0, seed=9, stop=[IM_END], grammar=grammar)
        for handle in handles:
            handle.result(timeout=300)
            assert handle.finish_reason == "stop" and valid(handle.text, ORDER), handle.text
        # Greedy, the engine gives what model.generate gives.
        handle = engine.submit(ids, 1000, stop=[IM_END], grammar=grammar)
        assert handle.result(timeout=300) == model.generate(ids, 1000, json_schema=ORDER)
        with pytest.raises(TypeError, match="grammar must be a gpt.structured_output.Grammar"):
            engine.submit(ids, 4, grammar=ORDER)
    finally:
        engine.shutdown(drain=False)


def test_a_grammar_that_cannot_go_on_fails_its_request_alone(model, directory, monkeypatch):
    """A parser limit reached mid-answer (StructuredOutputError) ends that request with "error"
    and the reason; the engine and the other requests go on."""
    ids = prompt_ids(directory, QUESTION)
    grammar = structured_output.json_schema_grammar(
        model.tokenizer, ENUMS, vocab_size=model.config.vocab_size, end_ids={IM_END}
    )
    mask = structured_output.JsonConstraint.mask

    def failing_mask(self, logits):
        if self.tokens == 3:
            raise structured_output.StructuredOutputError("the JSON grammar cannot go on: step fuel")
        return mask(self, logits)

    monkeypatch.setattr(structured_output.JsonConstraint, "mask", failing_mask)
    engine = Engine(model, num_blocks=4 * CONTEXT // 16)
    try:
        failing = engine.submit(ids, 1000, stop=[IM_END], grammar=grammar)
        free = engine.submit(ids, 8, stop=[IM_END])
        assert failing.wait(300) and free.result(timeout=300)
        assert failing.finish_reason == "error" and "step fuel" in failing.error and len(failing.tokens) == 3
        assert free.finish_reason in ("length", "stop")
    finally:
        engine.shutdown(drain=False)


# -- the server: response_format -----------------------------------------------------------------


def schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}


@pytest.mark.parametrize("schema", [NESTED, ORDER])
def test_chat_response_format_json_schema_plain_and_streamed(client, schema):
    for seed in range(3):
        body = dict(messages=QUESTION, temperature=1.0, seed=seed, response_format=schema_format(schema))
        answer = client.post("/v1/chat/completions", json=body).json()
        [choice] = answer["choices"]
        assert choice["finish_reason"] == "stop" and valid(choice["message"]["content"], schema), answer
        with client.stream("POST", "/v1/chat/completions", json=body | {"stream": True}) as streamed:
            chunks = sse(streamed)
        text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks)
        assert text == choice["message"]["content"]
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_completions_response_format_plain_and_streamed(client, directory):
    body = dict(prompt="Order: ", max_tokens=1000, temperature=1.0, seed=3, response_format=schema_format(ORDER))
    answer = client.post("/v1/completions", json=body).json()
    [choice] = answer["choices"]
    assert choice["finish_reason"] == "stop" and valid(choice["text"], ORDER), answer
    with client.stream("POST", "/v1/completions", json=body | {"stream": True}) as streamed:
        chunks = sse(streamed)
    assert "".join(chunk["choices"][0]["text"] for chunk in chunks) == choice["text"]
    # json_object: an object, as far as max_tokens lets it go; "text" is no constraint at all.
    answer = client.post(
        "/v1/completions", json=dict(prompt="x", max_tokens=20, temperature=0, response_format={"type": "json_object"})
    ).json()
    assert answer["choices"][0]["text"].lstrip().startswith("{")
    free = client.post("/v1/completions", json=dict(prompt="x", max_tokens=20, temperature=0)).json()
    text = client.post(
        "/v1/completions", json=dict(prompt="x", max_tokens=20, temperature=0, response_format={"type": "text"})
    ).json()
    assert text["choices"][0]["text"] == free["choices"][0]["text"]


@pytest.mark.parametrize(
    "response_format, status, fragment",
    [
        (schema_format({"not": {}}), 400, "response_format.json_schema.schema is refused by the grammar library"),
        (schema_format({"type": "strin"}), 400, "Invalid type: strin"),
        (schema_format({"$ref": "#/definitions/missing"}), 400, "does not exist"),
        (schema_format({"enum": ["x" * 40000]}), 400, "more than MAX_SCHEMA_CHARS=32768"),
        (
            {"type": "json_schema", "json_schema": {"name": "a", "schema": [1]}},
            422,
            "response_format.json_schema.schema",
        ),
        ({"type": "json_schema", "json_schema": {"name": "a"}}, 422, "response_format.json_schema.schema"),
        (
            {"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}},
            422,
            "response_format.json_schema.name",
        ),
        ({"type": "yaml"}, 422, "response_format"),
    ],
)
def test_refused_response_formats_name_the_field(client, response_format, status, fragment):
    for path, body in (
        ("/v1/chat/completions", dict(messages=QUESTION)),
        ("/v1/completions", dict(prompt="x")),
    ):
        response = client.post(path, json=body | {"response_format": response_format})
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert error["param"] == "response_format" and fragment in error["message"], error


# -- SmolLM2 -------------------------------------------------------------------------------------


def test_smollm2_answers_json_object_with_an_object():
    try:
        path = installed.find("smollm2")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    model = gpt.GPT.from_gguf(path)
    engine = Engine(model, num_blocks=64)
    messages = [{"role": "user", "content": "Describe a cat as JSON with keys name, color and age."}]
    with TestClient(create_app(engine, "smollm2")) as client:
        body = dict(messages=messages, max_tokens=200, temperature=0, response_format={"type": "json_object"})
        [choice] = client.post("/v1/chat/completions", json=body).json()["choices"]
    assert choice["finish_reason"] == "stop"
    assert isinstance(json.loads(choice["message"]["content"]), dict), choice


# -- the command line ----------------------------------------------------------------------------


def test_cli_generate_json_schema_file(tmp_path):
    """`python -m gpt generate --json-schema FILE` prints the prompt and JSON that the file's schema
    accepts; a file that is no schema is one error line naming it."""
    import subprocess
    import sys

    package_root = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
    env = dict(os.environ, PYTHONPATH=package_root)

    def run(*flags):
        command = [sys.executable, "-m", "gpt", "generate", "--prompt", "Data: ", "--max_new_tokens", "240", *flags]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)

    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(ENUMS))
    result = run("--json-schema", str(schema), "--seed", "1")
    assert result.returncode == 0, result.stderr
    text = result.stdout.split("\n[gpt] ")[0]
    assert text.startswith("Data: ") and valid(text[len("Data: ") :], ENUMS), result.stdout
    for content, fragment in (
        ("[1]", "must hold a JSON schema (a JSON object) or true, got list"),
        ("{oops", "is not JSON"),
        ('{"not": {}}', 'json_schema is refused by the grammar library (llguidance): Unimplemented keys: ["not"]'),
    ):
        schema.write_text(content)
        result = run("--json-schema", str(schema))
        assert result.returncode == 2 and result.stderr.startswith("gpt: error: "), result.stderr
        assert fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1


# -- the openai client ---------------------------------------------------------------------------


def test_the_openai_client_sends_response_format_and_tools(client):
    """The `openai` client (pinned) speaks these fields as its users write them: a pydantic-made
    json_schema response format, streamed and not, and a named tool choice, parsed into its objects."""
    import openai

    api = openai.OpenAI(base_url=str(client.base_url) + "/v1", api_key="none", http_client=client, max_retries=0)
    response_format = {"type": "json_schema", "json_schema": {"name": "order", "schema": ORDER, "strict": True}}
    completion = api.chat.completions.create(
        model="qwen-like", messages=QUESTION, temperature=1.0, seed=4, response_format=response_format
    )
    assert completion.choices[0].finish_reason == "stop" and valid(completion.choices[0].message.content, ORDER)
    stream = api.chat.completions.create(
        model="qwen-like", messages=QUESTION, temperature=1.0, seed=4, response_format=response_format, stream=True
    )
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream) == completion.choices[0].message.content
    text = api.completions.create(
        model="qwen-like", prompt="Order: ", max_tokens=1000, seed=2, extra_body={"response_format": response_format}
    )
    assert valid(text.choices[0].text, ORDER)
    completion = api.chat.completions.create(
        model="qwen-like",
        messages=QUESTION,
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        seed=1,
    )
    [call] = completion.choices[0].message.tool_calls
    assert completion.choices[0].finish_reason == "tool_calls" and call.function.name == "get_time"
    jsonschema.validate(json.loads(call.function.arguments), TIME["function"]["parameters"])
    # The call goes back in the conversation, with the tool's answer, as the client sends it.
    follow_up = QUESTION + [completion.choices[0].message.model_dump(exclude_none=True)]
    follow_up.append({"role": "tool", "tool_call_id": call.id, "content": "12:00"})
    answer = api.chat.completions.create(model="qwen-like", messages=follow_up, tools=[WEATHER, TIME], max_tokens=4)
    assert answer.usage.prompt_tokens > completion.usage.prompt_tokens
