"""The endpoints over one engine (Routes: its tokenizer, chat template, limits and admission budget),
the app that routes to them (create_app) and the process that serves it (serve)."""

import asyncio
import contextlib
import dataclasses
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpt import chat, structured_output, tool_calls
from gpt.engine import Engine, QueueFullError, prometheus_text
from gpt.logprobs import TokenStrings
from gpt.serving.guards import (
    MAX_HEAD_BYTES,
    AdmissionBudget,
    BoundedBody,
    LastResort,
    ServerLimits,
    file_room,
    guarded_protocol,
    trim_heap,
)
from gpt.serving.protocol import (
    UNION_TAGS,
    Answering,
    ChatCompletionRequest,
    ChatShape,
    CompletionRequest,
    CompletionShape,
    error_body,
    logprobs_asked,
    parse_request,
    response_format_schema,
    tool_choice_of,
)
from gpt.serving.tokens import text_encoder, token_array, token_reach

# Seconds a client refused on a full queue is told to wait.
RETRY_AFTER_SECONDS = 1
# How often a waiting non-streaming request checks that its client is still there.
DISCONNECT_POLL_SECONDS = 0.25
# A request that does not fit ServerLimits.admission_bytes waits this long for its turn, then gets
# 503 with Retry-After (as on a full queue).
ADMISSION_WAIT_SECONDS = 10.0
# The peak memory of admitting a request (admission_cost): per byte of its body (the body itself,
# pydantic_core's parse and the validated request: a 2 MiB list of token ids is a million Python
# ints) and per character of the prompt it tokenizes (HF tokenizers' pre-tokenized pieces with
# their byte alignments, and the BPE words). Measured in docs/SERVING.md ("Memory").
ADMISSION_BYTES_PER_BODY_BYTE = 32
ADMISSION_BYTES_PER_PROMPT_CHAR = 160
# An admission whose estimated cost reaches this hands what it freed back to the system (trim_heap).
TRIM_AFTER_BYTES = 16 * 2**20


class EventRelay:
    """Hands the engine's events to the event loop, waking it once per burst, not once per event.

    A step emits an event for each of its sequences, back to back on the engine's thread. Waking
    the loop for each (`call_soon_threadsafe`: a write to its self-pipe, which lets the loop's
    thread take the GIL) would interleave the loop's work on the stream responses with the
    engine's sampling of the rest of the step, so the step's Python part would wait on the
    responses. Here the first event of a burst schedules one drain and the rest are appended, so
    the loop delivers them while the next step's compiled code runs (the GIL released).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Queue, object]] = []

    def post(self, queue: asyncio.Queue, event) -> None:
        """From any thread: `queue.put_nowait(event)` on the loop, in posting order."""
        with self._lock:
            self._pending.append((queue, event))
            if len(self._pending) > 1:
                return  # a drain is already scheduled and will take this one too
        self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for queue, event in pending:
            queue.put_nowait(event)


def error(status: int, message: str, param: str | None = None, headers=None, code=None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


def invalid(errors: list[dict]) -> JSONResponse:
    """422 naming the first invalid field. The input is never echoed: it may be NaN, which JSON
    cannot carry, or megabytes long."""
    first = errors[0]
    path = [str(part) for part in first["loc"] if part not in ("body", *UNION_TAGS)]
    param = path[0] if path else None
    message = f"{'.'.join(path)}: {first['msg']}" if path else "the body must be a JSON object"
    return error(422, message, param)


class Refused(Exception):
    """A request refused while it is admitted: the error response it gets."""

    def __init__(self, status: int, message: str, param: str | None = None, headers=None, code=None):
        super().__init__(message)
        self.response = error(status, message, param, headers=headers, code=code)


class Invalid(Refused):
    """A request that its model does not validate: 422 naming the first invalid field."""

    def __init__(self, errors: list[dict]):
        Exception.__init__(self, "the request is invalid")
        self.response = invalid(errors)


@dataclasses.dataclass
class _Admitted:
    """A request submitted to the engine: the request (its prompt freed), its choices' handles, its
    prompt's length in tokens and what its answer's shape needs."""

    body: CompletionRequest | ChatCompletionRequest
    handles: list
    prompt_tokens: int
    answering: Answering


def _chat_template(tokenizer, model_name: str, model_dir: str | None):
    """(the model's chat.ChatSpec, None), or (None, why /v1/chat/completions answers 400)."""
    if tokenizer is None:
        return None, f"the model {model_name!r} has no tokenizer, so it has no chat template"
    try:
        return chat.chat_spec(tokenizer, model_dir), None
    except chat.NoChatTemplate:
        return None, f"the model {model_name!r} has no chat template (a base model): use /v1/completions"
    except ValueError as e:
        return None, f"the model {model_name!r} cannot chat: {e}"


class Routes:
    """The endpoints over a started engine, and what they share: its tokenizer and chat template,
    the limits, the admission budget and an EventRelay per event loop serving the app. A request is
    parsed, validated, tokenized and submitted in a worker thread (admit); the loop only waits for
    its events (respond)."""

    def __init__(self, engine: Engine, model_name: str, instance: str, limits: ServerLimits, model_dir: str | None):
        self.engine, self.model_name, self.instance, self.limits = engine, model_name, instance, limits
        self.tokenizer = tokenizer = engine.tokenizer
        self.relays: dict[asyncio.AbstractEventLoop, EventRelay] = {}  # one per event loop serving the app
        config = engine.model.config
        self.block_size, self.vocab_size = config.block_size, config.vocab_size
        # The tokens that end every request (the model's EOS: GPT.end_of_generation); a chat's also
        # end at its template's end of turn. An id past the vocabulary (a config.json's, say) can
        # never be sampled, so cannot end anything.
        self.eos = frozenset(getattr(engine.model, "end_of_generation", ()))
        self.chat_spec, self.no_chat = _chat_template(tokenizer, model_name, model_dir)
        chat_ends = self.chat_spec.end_ids if self.chat_spec else frozenset()
        self.chat_end_ids = frozenset(i for i in chat_ends | self.eos if i < self.vocab_size)
        # The longest completion prompt tokenized, checked before tokenizing: the body limit in
        # characters, or the characters that the model's context provably holds (block_size tokens
        # of the tokenizer's longest: token_reach), whichever is less. (A chat's rendered prompt has
        # gpt.chat's bound, chat.max_prompt_chars, applied while it renders: chat_prompt.)
        self.reach = reach = token_reach(tokenizer) if tokenizer is not None else None
        self.max_prompt_chars = limits.max_body_bytes
        if reach:
            self.max_prompt_chars = min(limits.max_body_bytes, self.block_size * reach.chars)
        self.encode_text = text_encoder(tokenizer) if tokenizer is not None else None
        self.token_strings = TokenStrings(tokenizer)  # the text and bytes of tokens in logprobs, cached
        self.budget = AdmissionBudget(limits.admission_bytes)

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        yield
        await asyncio.to_thread(self.engine.shutdown, True)
        done = self.engine.metrics()
        print(
            f"[gpt] drained: {done.requests_finished} requests finished, {done.requests_cancelled} cancelled",
            flush=True,
        )

    # -- endpoints (no docstrings: FastAPI would put them in the OpenAPI document)

    async def invalid_request(self, request: Request, exc: RequestValidationError):
        return invalid(exc.errors())

    async def http_error(self, request: Request, exc: StarletteHTTPException):
        return error(exc.status_code, str(exc.detail), headers=exc.headers)

    async def health(self):
        return {"status": "ok"}

    async def models(self):
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "gpt"}]}

    async def metrics(self):
        return PlainTextResponse(prometheus_text(self.engine.metrics()), media_type="text/plain; version=0.0.4")

    async def completions(self, request: Request, response: Response):
        return await self.respond(request, response, CompletionRequest, CompletionShape)

    async def chat_completions(self, request: Request, response: Response):
        return await self.respond(request, response, ChatCompletionRequest, ChatShape)

    # -- admission: in a worker thread

    def prompt_too_long(self, prompt: str) -> str | None:
        """What is wrong with a prompt of this many characters, if anything."""
        reach, most = self.reach, self.max_prompt_chars
        if len(prompt) <= most or reach is None or (counted := reach.counted(prompt)) <= most:
            return None
        return (
            f"prompt is {counted} characters, more than the model's context can hold: block_size={self.block_size} "
            f"tokens of at most {reach.chars} characters each ({most} characters)"
        )

    def admission_cost(self, body_bytes: int, kind: type[BaseModel]) -> int:
        """The estimated peak memory of admitting a request: its body's, and its prompt's
        tokenizing: a completion's text is at most the body long (characters its tokenizer drops
        are not refused before tokenizing), a chat's rendered conversation at most
        chat.max_prompt_chars whatever the body (a template may repeat a message)."""
        if self.tokenizer is None:
            prompt_chars = 0
        elif kind is ChatCompletionRequest:
            prompt_chars = chat.max_prompt_chars(self.block_size, self.limits.max_body_bytes)
        else:
            prompt_chars = body_bytes
        return ADMISSION_BYTES_PER_BODY_BYTE * body_bytes + ADMISSION_BYTES_PER_PROMPT_CHAR * prompt_chars

    def completion_prompt(self, body: CompletionRequest):
        """(the prompt's ids, max_tokens, the ids that end it)."""
        if not isinstance(body.prompt, str):
            return body.prompt, body.max_tokens, self.eos
        if self.tokenizer is None:
            raise Refused(400, "this model has no tokenizer: send the prompt as token ids", "prompt")
        if too_long := self.prompt_too_long(body.prompt):
            raise Refused(400, too_long, "prompt")
        try:
            ids = self.encode_text(body.prompt)
        except ValueError as e:  # UnicodeError included
            raise Refused(400, f"prompt cannot be tokenized: {e}", "prompt") from None
        if not len(ids):
            raise Refused(400, "prompt must not be empty", "prompt")
        return ids, body.max_tokens, self.eos

    def chat_prompt(self, body: ChatCompletionRequest):
        """(the rendered conversation's ids, max_tokens, the ids that end it)."""
        if self.chat_spec is None:
            raise Refused(400, self.no_chat, "messages")
        if body.max_tokens is not None and body.max_completion_tokens is not None:
            raise Refused(400, "give max_tokens or max_completion_tokens, not both", "max_completion_tokens")
        messages = tool_calls.template_messages([m.model_dump(exclude_none=True) for m in body.messages])
        tools = [tool.model_dump(exclude_none=True) for tool in body.tools or ()]
        try:
            tool_calls.check_choice(tools, tool_choice_of(body))
        except ValueError as e:  # the message starts with the field: tools or tool_choice
            raise Refused(400, str(e), str(e).split(":")[0]) from None
        # The template renders the tools as transformers' apply_chat_template(tools=...) has it
        # render them; "none" leaves them out, so that the model cannot call what it cannot see.
        template = self.chat_spec.template
        tools_variable = {"tools": tools} if tools and body.tool_choice != "none" else {}
        if tools_variable and "tools" not in template.source:
            raise Refused(400, f"tools: the chat template ({template.origin}) does not render tools", "tools")
        # The rendered prompt is bounded like a body: the body limit, or the context in tokens
        # (chat.MAX_CHARS_PER_TOKEN a token), whichever comes first, before it is tokenized.
        max_chars = chat.max_prompt_chars(self.block_size, self.limits.max_body_bytes)
        try:
            rendered = template.render(messages, add_generation_prompt=True, max_chars=max_chars, **tools_variable)
            ids = chat.prompt_ids(self.tokenizer, self.chat_spec, rendered)
        except ValueError as e:  # chat.ChatTemplateError (naming the template: failed, overran), tokenizing
            raise Refused(400, f"messages: {e}", "messages") from None
        max_tokens = body.max_tokens if body.max_tokens is not None else body.max_completion_tokens
        if max_tokens is None:  # the rest of the context (past it, the engine names the prompt's length)
            max_tokens = max(self.block_size - len(ids), 1)
        return ids, max_tokens, self.chat_end_ids

    def output_grammar(self, body, end_ids: frozenset[int]):
        """The grammar a request's answer is decoded under (gpt.structured_output): its
        response_format's JSON, or the call its tool_choice forces (gpt.tool_calls.forced_schema);
        None for free text."""
        asked = response_format_schema(body.response_format)
        forced = None
        if isinstance(body, ChatCompletionRequest) and body.tools and tool_choice_of(body) not in ("none", "auto"):
            tools = [tool.model_dump(exclude_none=True) for tool in body.tools]
            forced = tool_calls.forced_schema(tools, tool_choice_of(body), body.parallel_tool_calls is not False)
        if forced is not None and asked is not None:
            message = "response_format and a tool_choice that forces a call both constrain the answer: give one"
            raise Refused(400, message, "response_format")
        if forced is not None:
            param, name, schema = "tools", "tools: the forced call's parameters", forced
        elif asked is not None:
            param, (name, schema) = "response_format", asked
        else:
            return None
        if self.tokenizer is None:
            raise Refused(400, f"{param} needs the model's tokenizer, and this model has none", param)
        try:
            return structured_output.json_schema_grammar(
                self.tokenizer, schema, vocab_size=self.vocab_size, end_ids=end_ids, name=name
            )
        except ValueError as e:
            raise Refused(400, str(e), param) from None

    def parse(self, raw: bytes, kind: type[BaseModel]):
        """The request of `kind` in `raw`, validated, for this server's model."""
        try:
            body = parse_request(raw, kind)
        except ValidationError as e:
            raise Invalid(e.errors(include_url=False, include_input=False)) from None
        except ValueError as e:  # pydantic_core.from_json: the body is no JSON
            hint = " (a UTF-16 surrogate needs its pair)" if "surrogate" in str(e) or "hex escape" in str(e) else ""
            raise Refused(400, f"the body is not valid JSON: {e}{hint}") from None
        if body.model is not None and body.model != (served := self.model_name):
            message = f"the model {body.model!r} does not exist: this server serves {served!r} (GET /v1/models)"
            raise Refused(404, message, "model", code="model_not_found")
        if isinstance(body, ChatCompletionRequest) and body.top_logprobs is not None and not body.logprobs:
            raise Refused(400, "top_logprobs needs logprobs: true", "top_logprobs")
        return body

    def answering(self, body, ids, prompt, logprobs: int | None) -> Answering:
        """What the answer's shape needs of the request: an echoed prompt (its text, and its tokens
        when their logprobs are asked too), the logprobs' token strings, a chat's tools."""
        echo = None
        if isinstance(body, CompletionRequest) and body.echo:
            tokenizer = self.tokenizer
            echo = body.prompt if isinstance(body.prompt, str) else tokenizer.decode(ids) if tokenizer else ""
        answering = Answering(
            body.n,
            logprobs is not None,
            self.token_strings if logprobs is not None else None,
            echo,
            tuple(prompt.tolist()) if logprobs is not None and echo is not None else (),
        )
        if isinstance(body, ChatCompletionRequest) and body.tools and tool_choice_of(body) != "none":
            # The answer may call them (gpt.tool_calls).
            calls = dict(tool_choice=tool_choice_of(body), parallel_tool_calls=body.parallel_tool_calls is not False)
            answering = dataclasses.replace(answering, **calls)
        return answering

    def submit(self, body, prompt, max_tokens: int, sampling: dict) -> list:
        """The request's choices submitted to the engine: their handles."""
        try:
            if body.n == 1:
                return [self.engine.submit(prompt, max_tokens, **sampling)]
            return self.engine.submit_choices(prompt, body.n, max_tokens, **sampling)  # from one prefill
        except QueueFullError as e:
            raise Refused(503, str(e), None, headers={"Retry-After": str(RETRY_AFTER_SECONDS)}) from None
        except (ValueError, TypeError) as e:
            message = str(e)
            param = next((p for p in ("prompt", "max_tokens", "stop", "seed", "top_k", "top_p") if p in message), None)
            if isinstance(body, ChatCompletionRequest) and param == "prompt":  # the rendered conversation
                param, message = "messages", f"messages, rendered with the chat template: {message}"
            raise Refused(400, message, param) from None

    def admit(self, raw: bytes, on_event, kind: type[BaseModel]) -> _Admitted | Response:
        """Parses and validates a request of `kind`, makes its prompt's tokens and submits it to the
        engine; or the error response. Runs in a worker thread, since each step takes time in
        proportion to the body (the loop would not answer /health meanwhile), and what they build
        is freed here too (the list of a 30 MB prompt's ids takes 0.1 s to free)."""
        try:
            body = self.parse(raw, kind)
            is_chat = isinstance(body, ChatCompletionRequest)
            ids, max_tokens, stop_ids = self.chat_prompt(body) if is_chat else self.completion_prompt(body)
            prompt = token_array(ids)
            logprobs = logprobs_asked(body)
            answering = self.answering(body, ids, prompt, logprobs)
            grammar = self.output_grammar(body, stop_ids)
            del ids
            # The request's own ids (or messages) are freed here.
            body = body.model_copy(update={"messages": []} if is_chat else {"prompt": []})
            sampling = dict(
                temperature=body.temperature,
                top_k=body.top_k,
                top_p=body.top_p if body.top_p < 1.0 else None,
                seed=body.seed,
                stop=stop_ids,
                stop_strings=body.stop,
                on_event=on_event,
                logprobs=logprobs,
                prompt_logprobs=logprobs if answering.echo is not None else None,  # an echoed prompt's are scored
                grammar=grammar,
            )
            handles = self.submit(body, prompt, max_tokens, sampling)
        except Refused as refused:
            return refused.response
        return _Admitted(body, handles, len(prompt), answering)

    def admit_and_trim(self, raw: bytes, on_event, kind: type[BaseModel], cost: int):
        """admit(), then, for a large request, what it freed handed back to the system."""
        admitted = self.admit(raw, on_event, kind)
        if cost >= TRIM_AFTER_BYTES:
            trim_heap()
        return admitted

    # -- answering: on the event loop

    async def respond(self, request: Request, response: Response, kind: type[BaseModel], shape):
        """A request of `kind` (completion or chat) answered in `shape`'s objects, plain or streamed."""
        response.headers["X-GPT-Instance"] = self.instance
        loop = asyncio.get_running_loop()
        relay = self.relays.get(loop) or self.relays.setdefault(loop, EventRelay(loop))
        events: asyncio.Queue = asyncio.Queue()
        raw = await request.body()
        cost = await self.budget.acquire(self.admission_cost(len(raw), kind), ADMISSION_WAIT_SECONDS)
        if cost is None:
            message = (
                f"the server is busy admitting other requests (admission_bytes={self.limits.admission_bytes} of "
                f"memory in use): try again"
            )
            return error(503, message, None, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        # The budget comes back when the worker is done, even if this handler is cancelled before.
        work = asyncio.ensure_future(
            asyncio.to_thread(self.admit_and_trim, raw, lambda event: relay.post(events, event), kind, cost)
        )
        work.add_done_callback(lambda _: self.budget.release(cost))
        del raw
        admitted = await work
        if isinstance(admitted, Response):
            return admitted
        answer = shape(f"{shape.prefix}-{uuid.uuid4().hex}", int(time.time()), self.model_name, admitted.answering)
        if admitted.body.stream:
            return StreamingResponse(
                self.stream(answer, admitted.handles, events),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-GPT-Instance": self.instance},
            )
        return await self.answer_whole(request, answer, admitted, events)

    @staticmethod
    async def stream(answer, handles: list, events: asyncio.Queue):
        """Server-sent events: `answer`'s chunks as the choices' events come, then [DONE]."""
        try:
            for chunk in answer.opening():
                yield f"data: {json.dumps(chunk)}\n\n"
            running = len(handles)  # choices not finished yet, each ending with one event
            while running:
                event = await events.get()
                for chunk in answer.chunks(event):
                    yield f"data: {json.dumps(chunk)}\n\n"
                running -= event.finish_reason is not None
            yield "data: [DONE]\n\n"
        finally:
            for handle in handles:  # a no-op once it has finished; frees a disconnected client's blocks
                handle.cancel()

    @staticmethod
    async def answer_whole(request: Request, answer, admitted: _Admitted, events: asyncio.Queue):
        """The whole answer once every choice is done, with its usage; the choices cancelled when
        the client goes away first (checked every DISCONNECT_POLL_SECONDS)."""
        handles, loop = admitted.handles, asyncio.get_running_loop()
        next_check = loop.time() + DISCONNECT_POLL_SECONDS
        while not all(handle.done for handle in handles):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(events.get(), DISCONNECT_POLL_SECONDS)
            if loop.time() >= next_check:
                next_check = loop.time() + DISCONNECT_POLL_SECONDS
                if await request.is_disconnected():
                    for handle in handles:
                        handle.cancel()
                    return error(499, "client disconnected")
        if failed := next((handle for handle in handles if handle.finish_reason == "error"), None):
            return error(500, failed.error)
        prompt_tokens, completion_tokens = admitted.prompt_tokens, sum(len(handle.tokens) for handle in handles)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        return answer.whole(handles) | {"usage": usage}


def _documented_bodies(app: FastAPI) -> Callable[[type[BaseModel]], dict]:
    """The body is parsed in a worker thread (FastAPI would parse it on the event loop), so the
    schemas are given to the OpenAPI document by hand: returns the `openapi_extra` of a route that
    takes a request of a kind, whose referred schemas (ChatMessage) go among the document's
    components."""
    referred: dict[str, dict] = {}

    def request_body(kind: type[BaseModel]) -> dict:
        schema = kind.model_json_schema(ref_template="#/components/schemas/{model}")
        referred.update(schema.pop("$defs", {}))
        return {"requestBody": {"content": {"application/json": {"schema": schema}}, "required": True}}

    default_openapi = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            default_openapi().setdefault("components", {}).setdefault("schemas", {}).update(referred)
        return app.openapi_schema

    app.openapi = openapi
    return request_body


def create_app(
    engine: Engine,
    model_name: str = "gpt",
    instance: str | None = None,
    limits: ServerLimits | None = None,
    model_dir: str | None = None,
) -> FastAPI:
    """The app over a started engine; the engine is shut down (drained) when the app's lifespan ends.
    `instance` names this server in every completion's `X-GPT-Instance` header (default: host:pid),
    so a client behind a load balancer can tell the replicas apart. The app applies `limits`'
    body size and body timeout; the connection limits are the HTTP protocol's (`serve`). The chat
    template is the tokenizer's (a GGUF file's), else `model_dir`'s (a HF directory's
    tokenizer_config.json or chat_template.jinja: gpt.chat.chat_spec); without one,
    /v1/chat/completions answers 400."""
    instance = instance or f"{socket.gethostname()}:{os.getpid()}"
    limits = limits or ServerLimits()
    routes = Routes(engine, model_name, instance, limits, model_dir)
    app = FastAPI(title="gpt", lifespan=routes.lifespan)
    # Added last, LastResort is the outer one: it also catches what BoundedBody raises.
    app.add_middleware(BoundedBody, max_bytes=limits.max_body_bytes, timeout=limits.timeout_body)
    app.add_middleware(LastResort)
    app.add_exception_handler(RequestValidationError, routes.invalid_request)
    app.add_exception_handler(StarletteHTTPException, routes.http_error)
    app.get("/health")(routes.health)
    app.get("/v1/models")(routes.models)
    app.get("/metrics")(routes.metrics)
    request_body = _documented_bodies(app)
    app.post("/v1/completions", openapi_extra=request_body(CompletionRequest))(routes.completions)
    app.post("/v1/chat/completions", openapi_extra=request_body(ChatCompletionRequest))(routes.chat_completions)
    return app


def serve(
    engine: Engine,
    host: str,
    port: int,
    model_name: str = "gpt",
    limits: ServerLimits | None = None,
    model_dir: str | None = None,
) -> None:
    """Runs the server until SIGINT/SIGTERM, then drains (uvicorn waits for open requests, then the
    engine stops) and exits by the signal, which uvicorn raises again once it has shut down.
    `model_dir`: the HF directory the model came from, for its chat template (create_app)."""
    import uvicorn

    limits = limits or ServerLimits()
    room = file_room(limits.max_connections)
    if room < limits.max_connections:
        print(f"[gpt] max_connections={limits.max_connections} lowered to {room}: ulimit -n is too low", flush=True)
        limits = dataclasses.replace(limits, max_connections=room)
    uvicorn.run(
        create_app(engine, model_name, limits=limits, model_dir=model_dir),
        host=host,
        port=port,
        log_level="warning",
        http=guarded_protocol(limits),
        timeout_keep_alive=limits.timeout_keep_alive,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
    )
