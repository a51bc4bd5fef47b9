"""Tool calls in chat: the JSON schema a forced call is decoded under, and the model's text parsed
into OpenAI's `tool_calls`, in the two formats that chat templates teach their models, as vLLM's
tool parsers read them:

- Hermes (Qwen2.5, Hermes 2/3, the `hermes` parser): `<tool_call>{"name": ..., "arguments": {...}}
  </tool_call>`, one block per call, after any text (the message's content);
- Llama 3.x (the `llama3_json` parser): the whole answer is the call's JSON, `{"name": ...,
  "parameters": {...}}` (or "arguments"), optionally after `<|python_tag|>`, several separated
  by ";".

A call forced by `tool_choice` is decoded under a grammar (gpt.structured_output), as vLLM does
it: a named function's answer is its arguments object (`parameters`' schema), and "required"'s is
a JSON array of `{"name", "parameters"}` objects, one of the tools' each. The answer is then the
call, whatever format the template taught."""

import dataclasses
import json
import uuid

HERMES_START, HERMES_END = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
# Tools one request may declare at most (OpenAI's limit).
MAX_TOOLS = 128


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One call: the function's name and its arguments as JSON text (OpenAI's `arguments`)."""

    name: str
    arguments: str
    id: str = dataclasses.field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def openai(self, index: int | None = None) -> dict:
        """OpenAI's tool_calls entry (a streamed delta's has its `index` too)."""
        entry = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return entry if index is None else {"index": index} | entry


def check_choice(tools: list[dict] | None, tool_choice) -> None:
    """ValueError naming what is wrong with `tools` (OpenAI's [{"type": "function", "function":
    {"name", "description", "parameters"}}]) and `tool_choice` ("none", "auto", "required" or
    {"type": "function", "function": {"name": ...}}) together: a choice without tools, a named
    function that is not among them, two tools of one name."""
    names = [tool["function"]["name"] for tool in tools or ()]
    if len(set(names)) != len(names):
        duplicate = next(name for name in names if names.count(name) > 1)
        raise ValueError(f"tools: two tools are named {duplicate!r}")
    if tool_choice in (None, "none", "auto"):
        return
    if not tools:
        raise ValueError("tool_choice: a call is required, but the request has no tools")
    if isinstance(tool_choice, dict) and tool_choice["function"]["name"] not in names:
        raise ValueError(
            f"tool_choice: the function {tool_choice['function']['name']!r} is not among the tools ({', '.join(names)})"
        )


def _parameters(tool: dict) -> dict:
    """A tool's parameters schema (any JSON object when it has none)."""
    parameters = tool["function"].get("parameters")
    return parameters if parameters is not None else {"type": "object"}


def forced_schema(tools: list[dict], tool_choice, parallel: bool = True) -> dict | None:
    """The JSON schema the answer is decoded under when `tool_choice` forces a call (None when it
    does not): the named function's parameters, or for "required" an array of calls (one at most
    when not `parallel`) each {"name": one of the tools, "parameters": its parameters}."""
    if isinstance(tool_choice, dict):
        name = tool_choice["function"]["name"]
        return _parameters(next(tool for tool in tools if tool["function"]["name"] == name))
    if tool_choice != "required":
        return None
    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": tool["function"]["name"]}, "parameters": _parameters(tool)},
            "required": ["name", "parameters"],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    schema = {"type": "array", "minItems": 1, "items": calls[0] if len(calls) == 1 else {"anyOf": calls}}
    if not parallel:
        schema["maxItems"] = 1
    return schema


def parse_forced(text: str, tool_choice) -> list[ToolCall] | None:
    """The calls of an answer decoded under forced_schema (None when it is not complete JSON: the
    answer ran out of tokens)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(tool_choice, dict):
        return [ToolCall(tool_choice["function"]["name"], _dumps(value))] if isinstance(value, dict) else None
    if not isinstance(value, list):
        return None
    calls = [_call(item) for item in value]
    return None if any(call is None for call in calls) else calls


def parse(text: str) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of an answer that may call tools: Hermes blocks, else Llama 3's JSON; with
    no call (or one whose JSON does not parse, as vLLM's parsers treat it), the text is all content.
    Content that is only whitespace is None."""
    if HERMES_START in text:
        calls = []
        rest = text[text.index(HERMES_START) :]
        while rest.startswith(HERMES_START):
            body = rest[len(HERMES_START) :]
            end = body.find(HERMES_END)
            inside, rest = (body, "") if end < 0 else (body[:end], body[end + len(HERMES_END) :])
            call = _call(_loads(inside))
            if call is None:
                return _content(text), []
            calls.append(call)
            rest = rest.lstrip()
        if calls:
            return _content(text[: text.index(HERMES_START)]), calls
        return _content(text), []
    calls = _llama_calls(text)
    return (None, calls) if calls else (_content(text), [])


def _llama_calls(text: str) -> list[ToolCall]:
    """Llama 3's calls: the whole text is one or more call objects (after an optional python tag),
    separated by ";"; [] when it is anything else."""
    body = text.strip()
    if body.startswith(PYTHON_TAG):
        body = body[len(PYTHON_TAG) :].lstrip()
    if not body.startswith("{"):
        return []
    decoder, calls, position = json.JSONDecoder(), [], 0
    while position < len(body):
        try:
            value, position = decoder.raw_decode(body, position)
        except ValueError:
            return []
        call = _call(value)
        if call is None:
            return []
        calls.append(call)
        while position < len(body) and body[position] in " \t\r\n;":
            position += 1
    return calls


def _loads(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def _call(value) -> ToolCall | None:
    """A call object {"name": str, "arguments" or "parameters": object} as a ToolCall (None when it
    is not one)."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        arguments = _loads(arguments)
    if not isinstance(arguments, dict):
        return None
    return ToolCall(value["name"], _dumps(arguments))


def _dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def _content(text: str) -> str | None:
    return text if text.strip() else None


class ToolCallStream:
    """An answer streamed while it may call tools: `feed(text)` returns the text that is surely
    content (none of a call), `finish()` the rest of the content and the calls. Text is held back
    from a Hermes `<tool_call>` on (and while the text so far could be the start of one), and
    whole while the answer could be a Llama 3 call (it starts with "{" or the python tag)."""

    def __init__(self, forced=None):
        self._forced = forced  # a tool_choice that forces a call: nothing is content
        self._text = ""
        self._sent = 0  # characters handed out as content

    def feed(self, text: str) -> str:
        self._text += text
        if self._forced is not None:
            return ""
        start = self._text.lstrip()
        if not start or start.startswith("{") or PYTHON_TAG.startswith(start[: len(PYTHON_TAG)]):
            return ""  # a Llama 3 call, perhaps: nothing is sure yet
        end = self._text.find(HERMES_START)
        if end < 0:  # hold back a tail that may be the start of a <tool_call>
            end = len(self._text)
            for keep in range(min(len(HERMES_START) - 1, len(self._text)), 0, -1):
                if HERMES_START.startswith(self._text[-keep:]):
                    end -= keep
                    break
        piece = self._text[self._sent : max(end, self._sent)]
        self._sent += len(piece)
        return piece

    def finish(self) -> tuple[str, list[ToolCall]]:
        """(the content not handed out yet, the calls) once the answer is complete."""
        if self._forced is not None:
            calls = parse_forced(self._text, self._forced)
            return ("", calls) if calls else (self._text, [])
        content, calls = parse(self._text)
        if not calls:
            return self._text[self._sent :], []
        return (content or "")[self._sent :], calls


def answer(text: str, tool_choice) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of a whole answer given `tool_choice` (a forced call's answer is its JSON;
    one that did not complete stays content)."""
    if tool_choice == "required" or isinstance(tool_choice, dict):
        calls = parse_forced(text, tool_choice)
        return (None, calls) if calls else (text, [])
    return parse(text)


def template_messages(messages: list[dict]) -> list[dict]:
    """Messages as chat templates expect them (transformers' convention, which vLLM follows): an
    assistant's tool call arguments as an object, not the JSON text OpenAI's API carries."""
    out = []
    for message in messages:
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                arguments = call["function"]["arguments"]
                parsed = _loads(arguments) if isinstance(arguments, str) else arguments
                function = call["function"] | {"arguments": parsed if isinstance(parsed, dict) else arguments}
                calls.append(call | {"function": function})
            message = message | {"tool_calls": calls}
        out.append(message)
    return out
