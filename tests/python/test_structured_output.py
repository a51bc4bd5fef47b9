"""JSON-schema-constrained decoding (gpt.structured_output) and tool calls (gpt.tool_calls): a small
random Llama with a byte-level tokenizer (its text is garbage, the hard case for a grammar) answers
100 of 100 times with JSON that validates against nested, array, enum, bounded and required-field
schemas, through model.generate, the engine and the server's response_format (both endpoints,
plain and streamed); refused schemas are 400s naming the field; tools render through a
Qwen2.5-style template and the model's calls are parsed in Hermes and Llama 3 formats; a named
tool_choice yields a call to that function. SmolLM2 answers json_object with an object."""

import json
import os
import shutil

import jsonschema
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils.chat_template_utils import render_jinja_template

import gpt
from gpt import models as installed
from gpt import structured_output, tool_calls
from gpt.engine import Engine
from gpt.server import create_app

CONTEXT = 2048
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 256, 257, 258 after the 256 bytes
TOOL_TOKENS = ("<tool_call>", "</tool_call>")  # 259, 260: added, not special, as in Qwen2.5's vocabulary
IM_END = 258
# Qwen2.5's chat template (Qwen/Qwen2.5-7B-Instruct tokenizer_config.json), trimmed: tools in the
# system turn, an assistant's tool_calls as <tool_call> blocks, tool answers as <tool_response>.
QWEN25 = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %}"
    '{{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n'
    'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}'
    '{%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}'
    '{{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments '
    'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, '
    '\\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}'
    "{%- else %}{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}{%- endif %}"
    "{%- for message in messages %}"
    '{%- if (message.role == "user") or (message.role == "system" and not loop.first) '
    'or (message.role == "assistant" and not message.tool_calls) %}'
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    '{%- elif message.role == "assistant" %}'
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}{{- tool_call.name }}{{- \'", "arguments": \' }}'
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    '{%- elif message.role == "tool" %}'
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

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
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 16},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 14}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    """A random LlamaForCausalLM with a byte-level BPE tokenizer, ChatML's special tokens, Qwen2.5's
    <tool_call> tokens and its (trimmed) template; its end of turn is <|im_end|>."""
    directory = str(tmp_path_factory.mktemp("qwen-like"))
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": QWEN25, "eos_token": "<|im_end|>", "bos_token": None}, f)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256 + len(SPECIALS) + len(TOOL_TOKENS),
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
    return directory


@pytest.fixture(scope="module")
def model(directory):
    return gpt.GPT.from_pretrained(directory)


@pytest.fixture(scope="module")
def client(model, directory):
    engine = Engine(model, num_blocks=4 * CONTEXT // 16)
    with TestClient(create_app(engine, "qwen-like", model_dir=directory)) as client:
        yield client


def prompt_ids(directory, messages, **variables):
    """The conversation's tokens, made without gpt: transformers' renderer and `tokenizers`."""
    rendered = render_jinja_template(
        conversations=[messages], chat_template=QWEN25, add_generation_prompt=True, **variables
    )[0][0]
    return Tokenizer.from_file(os.path.join(directory, "tokenizer.json")).encode(rendered, add_special_tokens=False).ids


def valid(text: str, schema) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


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


def sse(response) -> list[dict]:
    events = [line[len("data: ") :] for line in response.iter_lines() if line]
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]


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


# -- tool calls ----------------------------------------------------------------------------------


def test_hermes_calls_are_parsed_out_of_the_text():
    text = (
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"zone": 1}}\n</tool_call>'
    )
    content, calls = tool_calls.parse(text)
    assert content == "Let me check.\n"
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris", "unit": "celsius"}),
        ("get_time", {"zone": 1}),
    ]
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") for c in calls)
    # An unclosed last block (the answer ended at its end of turn) is still a call.
    _, calls = tool_calls.parse('<tool_call>\n{"name": "get_time", "arguments": {"zone": -3}}\n')
    assert [(c.name, c.arguments) for c in calls] == [("get_time", '{"zone": -3}')]
    # A block whose JSON does not parse leaves the whole answer as content, as vLLM's parser does.
    broken = 'x <tool_call>{"name": "get_time", "arguments": {"zone": </tool_call>'
    assert tool_calls.parse(broken) == (broken, [])
    assert tool_calls.parse("Just text.") == ("Just text.", [])


def test_llama3_json_calls_are_parsed():
    content, calls = tool_calls.parse('<|python_tag|>{"name": "get_time", "parameters": {"zone": 2}}')
    assert content is None and [(c.name, c.arguments) for c in calls] == [("get_time", '{"zone": 2}')]
    _, calls = tool_calls.parse(
        '{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "celsius"}}; '
        '{"name": "get_time", "arguments": "{\\"zone\\": 1}"}'
    )
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Oslo", "unit": "celsius"}),
        ("get_time", {"zone": 1}),
    ]
    # JSON that is no call is an answer.
    assert tool_calls.parse('{"city": "Oslo"}') == ('{"city": "Oslo"}', [])


def test_a_streamed_answer_holds_back_only_what_may_be_a_call():
    text = 'Checking.\n<tool_call>\n{"name": "get_time", "arguments": {"zone": 5}}\n</tool_call>'
    stream = tool_calls.ToolCallStream()
    sent = "".join(stream.feed(c) for c in text)
    rest, calls = stream.finish()
    assert sent + rest == "Checking.\n" and [(c.name, c.arguments) for c in calls] == [("get_time", '{"zone": 5}')]
    stream = tool_calls.ToolCallStream()
    assert "".join(stream.feed(c) for c in "a <tool") == "a "  # "<tool" may begin a call
    assert stream.feed("box>") == "<toolbox>" and stream.finish() == ("", [])
    stream = tool_calls.ToolCallStream()
    assert stream.feed('{"name": "get_time", "parameters": {"zone": 5}}') == ""  # a Llama 3 call, perhaps
    assert stream.finish()[1][0].name == "get_time"


def test_tools_and_tool_messages_render_through_the_template(client, directory):
    """A conversation with tools, an assistant's tool_calls and a tool's answer is rendered as
    transformers renders it (arguments as an object), with tool_choice "none" without the tools."""
    messages = QUESTION + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "22 degrees"},
    ]
    rendered_messages = messages[:1] + [
        {"role": "assistant", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "22 degrees"},
    ]
    for tool_choice, variables in (("auto", {"tools": [WEATHER]}), ("none", {})):
        body = dict(messages=messages, tools=[WEATHER], tool_choice=tool_choice, max_tokens=1, temperature=0)
        answer = client.post("/v1/chat/completions", json=body).json()
        assert answer["usage"]["prompt_tokens"] == len(prompt_ids(directory, rendered_messages, **variables)), answer
    # Today's checks of messages still hold: a tool message needs its call's id, content is needed.
    for bad, fragment in (
        ({"role": "tool", "content": "x"}, "only a tool message, has the tool_call_id"),
        ({"role": "user"}, "a user message needs its content"),
        ({"role": "user", "content": "x", "tool_calls": []}, "tool_calls are an assistant's"),
    ):
        response = client.post("/v1/chat/completions", json=dict(messages=[bad]))
        assert response.status_code == 422 and fragment in response.json()["error"]["message"]


def call_arguments(call, tool):
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == tool["function"]["name"]
    arguments = json.loads(call["function"]["arguments"])
    jsonschema.validate(arguments, tool["function"]["parameters"])
    return arguments


def test_a_named_tool_choice_yields_a_call_to_that_function_plain_and_streamed(client):
    for seed in range(4):
        choice = {"type": "function", "function": {"name": "get_weather"}}
        body = dict(messages=QUESTION, tools=[TIME, WEATHER], tool_choice=choice, temperature=1.0, seed=seed)
        answer = client.post("/v1/chat/completions", json=body).json()
        [result] = answer["choices"]
        assert result["finish_reason"] == "tool_calls" and result["message"]["content"] is None, answer
        [call] = result["message"]["tool_calls"]
        arguments = call_arguments(call, WEATHER)
        with client.stream("POST", "/v1/chat/completions", json=body | {"stream": True}) as streamed:
            chunks = sse(streamed)
        deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
        assert "".join(d.get("content") or "" for d in deltas) == ""  # the call is no content
        [streamed_call] = [call for d in deltas for call in d.get("tool_calls", ())]
        assert streamed_call["index"] == 0 and call_arguments(streamed_call, WEATHER) == arguments
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_required_tool_choice_yields_calls_to_the_tools(client):
    for seed in range(4):
        body = dict(messages=QUESTION, tools=[TIME, WEATHER], tool_choice="required", temperature=1.0, seed=seed)
        body["parallel_tool_calls"] = False
        [result] = client.post("/v1/chat/completions", json=body).json()["choices"]
        assert result["finish_reason"] == "tool_calls", result
        [call] = result["message"]["tool_calls"]
        call_arguments(call, {"get_time": TIME, "get_weather": WEATHER}[call["function"]["name"]])


@pytest.mark.parametrize(
    "fields, param, fragment",
    [
        (dict(tool_choice="required"), "tool_choice", "a call is required, but the request has no tools"),
        (
            dict(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}),
            "tool_choice",
            "the function 'nope' is not among the tools (get_weather)",
        ),
        (dict(tools=[WEATHER, WEATHER]), "tools", "two tools are named 'get_weather'"),
        (
            dict(tools=[WEATHER], tool_choice="required", response_format={"type": "json_object"}),
            "response_format",
            "both constrain the answer",
        ),
        (
            dict(
                tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "strin"}}}],
                tool_choice="required",
            ),
            "tools",
            "tools: the forced call's parameters is refused by the grammar library",
        ),
    ],
)
def test_refused_tools_name_the_field(client, fields, param, fragment):
    response = client.post("/v1/chat/completions", json=dict(messages=QUESTION) | fields)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param and fragment in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "fields, param, fragment",
    [
        (dict(tool_choice="maybe"), "tool_choice", "tool_choice: Input should be 'none', 'auto' or 'required'"),
        (dict(tool_choice=3), "tool_choice", 'tool_choice: must be "none", "auto", "required" or {"type": "function"'),
        (dict(tools=[{"type": "function", "function": {"name": "a b"}}]), "tools", "tools.0.function.name"),
        (dict(tools=[WEATHER] * 129), "tools", "tools: List should have at most 128 items"),
    ],
)
def test_malformed_tool_fields_are_422_naming_the_field(client, fields, param, fragment):
    response = client.post("/v1/chat/completions", json=dict(messages=QUESTION) | fields)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["param"] == param and fragment in response.json()["error"]["message"]


def test_tools_need_a_template_that_renders_them(tmp_path, model, directory):
    """SmolLM2's ChatML template has no tools: a request with tools is refused, not answered blind."""
    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("tokenizer.json", "config.json", "model.safetensors"):
        shutil.copy(os.path.join(directory, name), plain / name)
    template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    (plain / "tokenizer_config.json").write_text(json.dumps({"chat_template": template, "eos_token": "<|im_end|>"}))
    with TestClient(create_app(Engine(model), "plain", model_dir=str(plain))) as plain_client:
        response = plain_client.post("/v1/chat/completions", json=dict(messages=QUESTION, tools=[WEATHER]))
    assert response.status_code == 400 and response.json()["error"]["param"] == "tools"
    assert "does not render tools" in response.json()["error"]["message"]


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
