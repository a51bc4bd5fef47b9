"""The HTTP API's data: OpenAI's request models (strict pydantic, validated in a worker thread) and
the shapes of the answers (completion and chat objects, whole or as stream chunks). No app here."""

import dataclasses
from typing import Annotated, Any, Literal

import pydantic_core
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from gpt import tool_calls
from gpt.engine import MAX_CHOICES, MAX_STOP_STRING_LENGTH
from gpt.logprobs import (
    MAX_COMPLETION_LOGPROBS,
    MAX_TOP_LOGPROBS,
    TokenStrings,
    chat_content,
    completion_logprobs,
    text_offsets,
)
from gpt.tool_calls import MAX_TOOLS

# `stop`: up to 4 sequences, as OpenAI takes (the engine would take MAX_STOP_STRINGS), each of at
# most the engine's MAX_STOP_STRING_LENGTH characters.
MAX_STOP = 4
# `messages` of a chat request at most; their total size is bounded by the body's (max_body_bytes),
# and the rendered conversation's tokens by the model's context.
MAX_MESSAGES = 1024


def _prompt_kind(value) -> str | None:
    return "text" if isinstance(value, str) else "token_ids" if isinstance(value, list) else None


def _one_or_many(value):
    return [value] if isinstance(value, str) else value


# Tags of the unions below: validation errors carry them in their location, messages do not.
UNION_TAGS = (
    "text",
    "token_ids",
    *(f"type={kind}" for kind in ("text", "json_object", "json_schema")),
    "choice=mode",
    "choice=function",
)


# The sampling fields both endpoints take, alike.
_ModelName = Annotated[str, Field(max_length=256)] | None
_MaxTokens = Annotated[int, Field(ge=0)]
_Temperature = Annotated[float, Field(ge=0.0)]
_TopP = Annotated[float, Field(gt=0.0, le=1.0)]
_TopK = Annotated[int, Field(ge=1)] | None
_Seed = Annotated[int, Field(ge=0)] | None
_Stop = (
    Annotated[
        list[Annotated[str, Field(min_length=1, max_length=MAX_STOP_STRING_LENGTH)]],
        Field(max_length=MAX_STOP),
        BeforeValidator(_one_or_many, json_schema_input_type=str | list[str]),
    ]
    | None
)
# Choices per request: the engine's MAX_CHOICES (16), forked from one prefill of the prompt.
_N = Annotated[int, Field(ge=1, le=MAX_CHOICES)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class _TextFormat(_Strict):
    type: Literal["text"]


class _JsonObjectFormat(_Strict):
    type: Literal["json_object"]


class JsonSchemaSpec(_Strict):
    """`response_format.json_schema`: the schema the answer is decoded under (gpt.structured_output),
    strict or not (decoding follows it either way)."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
    description: str | None = None
    schema_: Annotated[dict[str, Any], Field(alias="schema")]
    strict: bool | None = None


class _JsonSchemaFormat(_Strict):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


def _format_kind(value) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else None
    return f"type={kind}" if kind in ("text", "json_object", "json_schema") else None


# `response_format`, OpenAI's: plain text, any JSON object, or JSON that a schema accepts. Tagged
# "type=..." so that an error's location (gpt.serving.routes.invalid) drops the tag, not a field of the same name.
_ResponseFormat = (
    Annotated[
        Annotated[_TextFormat, Tag("type=text")]
        | Annotated[_JsonObjectFormat, Tag("type=json_object")]
        | Annotated[_JsonSchemaFormat, Tag("type=json_schema")],
        Discriminator(
            _format_kind,
            custom_error_type="response_format_type",
            custom_error_message='type must be "text", "json_object" or "json_schema"',
        ),
    ]
    | None
)


class FunctionSpec(_Strict):
    """A tool's function: its name, what it does and its arguments' JSON schema (`parameters`)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolSpec(_Strict):
    type: Literal["function"]
    function: FunctionSpec


class _FunctionName(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: _FunctionName


def _tool_choice_kind(value) -> str | None:
    return "choice=mode" if isinstance(value, str) else "choice=function" if isinstance(value, dict) else None


# `tool_choice`: a mode, or the function to call. Tagged so that an error's location reads
# "tool_choice", not the union member's name (gpt.serving.routes.invalid drops the tags).
_ToolChoice = (
    Annotated[
        Annotated[Literal["none", "auto", "required"], Tag("choice=mode")]
        | Annotated[NamedToolChoice, Tag("choice=function")],
        Discriminator(
            _tool_choice_kind,
            custom_error_type="tool_choice_type",
            custom_error_message='must be "none", "auto", "required" or {"type": "function", "function": {"name"}}',
        ),
    ]
    | None
)


class ToolCallFunction(_Strict):
    name: str
    arguments: str  # JSON text, as OpenAI's API carries it


class MessageToolCall(_Strict):
    id: str
    type: Literal["function"]
    function: ToolCallFunction


class CompletionRequest(BaseModel):
    """The fields of OpenAI's completions request that this server implements (others are refused,
    so that a client never believes an option took effect when it did not). Strict: "3" is not a
    number nor "yes" a boolean, and NaN or Infinity is no number at all."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    model: _ModelName = None
    prompt: Annotated[
        Annotated[str, Tag("text")]
        | Annotated[list[Annotated[int, Field(ge=0, le=2**63 - 1)]], Field(min_length=1), Tag("token_ids")],
        Discriminator(
            _prompt_kind,
            custom_error_type="prompt_type",
            custom_error_message="prompt must be a string or a list of token ids",
        ),
    ]
    max_tokens: _MaxTokens = 16
    temperature: _Temperature = 1.0
    top_p: _TopP = 1.0
    top_k: _TopK = None
    seed: _Seed = None
    stop: _Stop = None
    stream: bool = False
    n: _N = 1
    user: str | None = None
    # The most likely alternatives listed with each token's logprob (0 to 5, as OpenAI's).
    logprobs: Annotated[int, Field(ge=0, le=MAX_COMPLETION_LOGPROBS)] | None = None
    # The prompt's text before the completion's, with its tokens' logprobs when `logprobs` is given.
    echo: bool = False
    response_format: _ResponseFormat = None


class ChatMessage(BaseModel):
    """One message of a conversation: its text content (no content parts or names), an assistant's
    `tool_calls` (its content may then be null), or a tool's answer to the call `tool_call_id`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: Annotated[list[MessageToolCall], Field(max_length=MAX_TOOLS)] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _fields_of_its_role(self):
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs its content (a string)")
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f"tool_calls are an assistant's, not a {self.role} message's")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("a tool message, and only a tool message, has the tool_call_id it answers")
        return self


class ChatCompletionRequest(BaseModel):
    """The fields of OpenAI's chat completions request that this server implements, as strict as
    CompletionRequest. `max_tokens` or its newer name `max_completion_tokens` (default: the rest of
    the model's context)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    model: _ModelName = None
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
    max_tokens: _MaxTokens | None = None
    max_completion_tokens: _MaxTokens | None = None
    temperature: _Temperature = 1.0
    top_p: _TopP = 1.0
    top_k: _TopK = None
    seed: _Seed = None
    stop: _Stop = None
    stream: bool = False
    n: _N = 1
    user: str | None = None
    logprobs: bool | None = None
    # The most likely alternatives listed with each token's logprob (0 to 20, as OpenAI's); needs
    # `logprobs: true`.
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    response_format: _ResponseFormat = None
    # Functions the model may call (rendered by the chat template), and whether it must: "auto"
    # when there are tools, a call to one forced by "required" or by its name (gpt.tool_calls).
    tools: Annotated[list[ToolSpec], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: _ToolChoice = None
    parallel_tool_calls: bool | None = None


def tool_choice_of(body: ChatCompletionRequest):
    """A chat request's tool_choice as gpt.tool_calls takes it: "none", "auto", "required" or
    {"type": "function", "function": {"name": ...}}; OpenAI's default is "auto" with tools, "none"
    without."""
    choice = body.tool_choice
    if choice is None:
        return "auto" if body.tools else "none"
    return choice.model_dump() if isinstance(choice, NamedToolChoice) else choice


def parse_request(raw: bytes, kind: type[BaseModel]) -> BaseModel:
    """Runs in a worker thread. Parsing first and validating the parsed objects is two GIL holds of
    about 25 and 40 ms for a 2 MiB list of ids where `model_validate_json` is one of about 140."""
    return kind.model_validate(pydantic_core.from_json(raw))


def response_format_schema(response_format) -> tuple[str, Any] | None:
    """(the name an error gives it, the JSON schema) that a response_format decodes the answer
    under: True for any JSON object; None for plain text or none given."""
    if isinstance(response_format, _JsonObjectFormat):
        return "response_format", True
    if isinstance(response_format, _JsonSchemaFormat):
        return "response_format.json_schema.schema", response_format.json_schema.schema_
    return None


def logprobs_asked(body: CompletionRequest | ChatCompletionRequest) -> int | None:
    """Alternatives listed in each token's logprobs entry; None: no logprobs."""
    if isinstance(body, ChatCompletionRequest):
        return (body.top_logprobs or 0) if body.logprobs else None
    return body.logprobs


def error_body(status: int, message: str, param: str | None = None, code=None, kind=None) -> dict:
    """Every error's shape, `{"error": {"message", "type", "param", "code"}}` (OpenAI's)."""
    kind = kind or ("invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status if code is None else code}}


@dataclasses.dataclass(frozen=True)
class Answering:
    """What a request asks of its answer's shape: `n` choices; each token's logprobs entry
    (`logprobs`, written with `strings`); completions' `echo` of the prompt (its text, and its
    tokens for their logprobs)."""

    n: int = 1
    logprobs: bool = False
    strings: TokenStrings | None = None
    echo: str | None = None
    prompt: tuple[int, ...] = ()
    # A chat with tools: its tool_choice (gpt.tool_calls), the answer's calls parsed out of its text.
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool = True


class CompletionShape:
    """OpenAI's text_completion objects, each choice with its `token_ids` too (the completion's)."""

    prefix = "cmpl"

    def __init__(self, completion_id: str, created: int, model: str, answering: Answering):
        self._head = {"id": completion_id, "object": "text_completion", "created": created, "model": model}
        self._answering = answering
        self._lengths = [0] * answering.n  # characters of each choice's text streamed so far

    @staticmethod
    def _choice(index, text, finish_reason, token_ids, logprobs=None):
        choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
        return choice | {"token_ids": token_ids}

    def _chunk(self, *choice) -> dict:
        return self._head | {"choices": [self._choice(*choice)]}

    def _prompt_logprobs(self, entries) -> dict:
        prompt, strings = list(self._answering.prompt), self._answering.strings
        return completion_logprobs(prompt, list(entries), text_offsets(strings.tokenizer, prompt), strings)

    def opening(self) -> list[dict]:
        """The echoed prompt's text first, when it has no logprobs to wait for."""
        echo = self._answering.echo
        if echo is None or self._answering.logprobs:
            return []
        self._lengths = [len(echo)] * self._answering.n
        return [self._chunk(index, echo, None, []) for index in range(self._answering.n)]

    def chunks(self, event) -> list[dict]:
        """One chunk per event (text "" while a character or a possible stop string is open); the
        echoed prompt's text with its logprobs when they come (`prompt_logprobs`)."""
        index, answering = event.index, self._answering
        if event.prompt_logprobs is not None:
            self._lengths[index] = len(answering.echo or "")
            return [self._chunk(index, answering.echo or "", None, [], self._prompt_logprobs(event.prompt_logprobs))]
        tokens = [event.token] if event.token is not None else []
        logprobs = None
        if answering.logprobs:
            entries = [event.logprob] if event.logprob is not None else []
            logprobs = completion_logprobs(tokens, entries, [self._lengths[index]] * len(tokens), answering.strings)
        self._lengths[index] += len(event.text)
        return [self._chunk(index, event.text, event.finish_reason, tokens, logprobs)]

    def whole(self, handles) -> dict:
        answering, choices = self._answering, []
        echo = answering.echo or ""
        for handle in handles:
            logprobs = None
            if answering.logprobs:
                offsets = [len(echo) + offset for offset in handle.text_offsets]
                logprobs = completion_logprobs(handle.tokens, handle.logprobs, offsets, answering.strings)
                if handle.prompt_logprobs is not None:
                    logprobs = {
                        key: value + logprobs[key]
                        for key, value in self._prompt_logprobs(handle.prompt_logprobs).items()
                    }
            text = echo + handle.text
            choices.append(self._choice(handle.index, text, handle.finish_reason, handle.tokens, logprobs))
        return self._head | {"choices": choices}


class ChatShape:
    """OpenAI's chat.completion object, and its stream of chat.completion.chunk deltas: for each
    choice, the role first, then each piece of text (with its tokens' logprobs when asked), then
    an empty delta with the finish reason."""

    prefix = "chatcmpl"

    def __init__(self, completion_id: str, created: int, model: str, answering: Answering):
        self._id, self._created, self._model = completion_id, created, model
        self._answering = answering
        # With tools, each choice's text passes through a parser that holds back what may be a call.
        self._tool_streams = None
        if answering.tool_choice is not None:
            forced = answering.tool_choice if answering.tool_choice not in ("auto", "none") else None
            self._tool_streams = [tool_calls.ToolCallStream(forced) for _ in range(answering.n)]

    def _calls(self, calls: list, finish_reason):
        """The calls to answer with (the first only without parallel_tool_calls), and the finish
        reason: "tool_calls" when there are any."""
        calls = calls if self._answering.parallel_tool_calls else calls[:1]
        return calls, "tool_calls" if calls and finish_reason in ("stop", "length") else finish_reason

    def _tool_text(self, event):
        """(the content to send, the finish reason, the calls) of an event: with tools, the text
        held back while it may be a call, and the calls parsed out of it at the end."""
        if self._tool_streams is None:
            return event.text, event.finish_reason, []
        stream = self._tool_streams[event.index]
        text = stream.feed(event.text)
        if event.finish_reason is None:
            return text, None, []
        rest, calls = stream.finish()
        calls, finish_reason = self._calls(calls, event.finish_reason)
        return text + rest, finish_reason, calls

    def _object(self, kind: str, choices: list[dict]) -> dict:
        return {"id": self._id, "object": kind, "created": self._created, "model": self._model, "choices": choices}

    def _chunk(self, index: int, delta: dict, finish_reason=None, logprobs=None) -> dict:
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        return self._object("chat.completion.chunk", [choice])

    def opening(self) -> list[dict]:
        return [self._chunk(index, {"role": "assistant", "content": ""}) for index in range(self._answering.n)]

    def chunks(self, event) -> list[dict]:
        out = []
        text, finish_reason, calls = self._tool_text(event)
        if self._answering.logprobs and event.logprob is not None:
            content = chat_content([event.logprob], self._answering.strings)
            out.append(self._chunk(event.index, {"content": text}, logprobs={"content": content}))
        elif text:
            out.append(self._chunk(event.index, {"content": text}))
        if calls:
            out.append(self._chunk(event.index, {"tool_calls": [call.openai(i) for i, call in enumerate(calls)]}))
        if finish_reason is not None:
            out.append(self._chunk(event.index, {}, finish_reason))
        return out

    def whole(self, handles) -> dict:
        choices = []
        for handle in handles:
            message = {"role": "assistant", "content": handle.text}
            finish_reason = handle.finish_reason
            if self._answering.tool_choice is not None:
                content, calls = tool_calls.answer(handle.text, self._answering.tool_choice)
                calls, finish_reason = self._calls(calls, finish_reason)
                message = {"role": "assistant", "content": content if calls else handle.text}
                if calls:
                    message["tool_calls"] = [call.openai() for call in calls]
            logprobs = None
            if self._answering.logprobs:
                logprobs = {"content": chat_content(handle.logprobs, self._answering.strings)}
            choices.append(
                {"index": handle.index, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}
            )
        return self._object("chat.completion", choices)
