"""Tool calls (gpt.tool_calls) on the small random Qwen2.5-like model of qwen_like.py: tools and tool
messages render through its template as transformers renders them, the model's calls are parsed
in Hermes and Llama 3 formats (whole and streamed), a named or required tool_choice yields calls
whose arguments validate against the tool's parameters, and refused or malformed tool fields
name the field."""

import json
import os
import shutil

import jsonschema
import pytest
from fastapi.testclient import TestClient

import gpt
from gpt import tool_calls
from gpt.engine import Engine
from gpt.server import create_app
from qwen_like import QUESTION, TIME, WEATHER, model_directory, prompt_ids, serve, sse


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
