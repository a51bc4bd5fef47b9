"""An OpenAI-compatible HTTP API over gpt.engine.Engine (FastAPI on uvicorn).

POST /v1/completions (prompt text or token ids; server-sent events with "stream": true),
GET /v1/models, GET /health, GET /metrics (Prometheus text). The engine's thread runs the model;
each request's events cross to the event loop through an asyncio queue, the loop woken once per
step's burst of events (EventRelay). A client that goes away has its request cancelled (its blocks
return to the pool at the next step); shutdown (SIGTERM, as uvicorn handles it) stops taking
connections, lets running requests finish, then stops the engine.
"""

import asyncio
import contextlib
import json
import os
import socket
import threading
import time
import uuid
from typing import Annotated

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from gpt.engine import Engine, QueueFullError, prometheus_text

# Seconds a client refused on a full queue is told to wait.
RETRY_AFTER_SECONDS = 1
# How often a waiting non-streaming request checks that its client is still there.
DISCONNECT_POLL_SECONDS = 0.25


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


class CompletionRequest(BaseModel):
    """The fields of OpenAI's completions request that this server implements (others are refused,
    so that a client never believes an option took effect when it did not)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    prompt: str | Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=0)] = 16
    temperature: Annotated[float, Field(ge=0.0)] = 1.0
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    top_k: Annotated[int, Field(ge=1)] | None = None
    seed: Annotated[int, Field(ge=0)] | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    n: Annotated[int, Field(ge=1, le=1)] = 1
    user: str | None = None


def _error(status: int, message: str, param: str | None = None, headers=None) -> JSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


def create_app(engine: Engine, model_name: str = "gpt", instance: str | None = None) -> FastAPI:
    """The app over a started engine; the engine is shut down (drained) when the app's lifespan ends.
    `instance` names this server in every completion's `X-GPT-Instance` header (default: host:pid),
    so a client behind a load balancer can tell the replicas apart."""
    instance = instance or f"{socket.gethostname()}:{os.getpid()}"

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await asyncio.to_thread(engine.shutdown, True)
        done = engine.metrics()
        print(
            f"[gpt] drained: {done.requests_finished} requests finished, {done.requests_cancelled} cancelled",
            flush=True,
        )

    app = FastAPI(title="gpt", lifespan=lifespan)
    tokenizer = engine.tokenizer
    relays: dict[asyncio.AbstractEventLoop, EventRelay] = {}  # one per event loop serving the app

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        first = exc.errors()[0]
        path = [str(part) for part in first["loc"] if part != "body"]
        field = path[0] if path else "body"  # the request's field; the message has the full path
        return JSONResponse(
            {
                "error": {
                    "message": f"{'.'.join(path) or field}: {first['msg']}",
                    "type": "invalid_request_error",
                    "param": field,
                    "code": 422,
                },
                "detail": json.loads(json.dumps(exc.errors(), default=str)),
            },
            status_code=422,
        )

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "gpt"}]}

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(prometheus_text(engine.metrics()), media_type="text/plain; version=0.0.4")

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request, response: Response):
        response.headers["X-GPT-Instance"] = instance
        if isinstance(body.prompt, str):
            if tokenizer is None:
                return _error(400, "this model has no tokenizer: send the prompt as token ids", "prompt")
            prompt = tokenizer.encode(body.prompt)
            if not prompt:
                return _error(400, "prompt must not be empty", "prompt")
        else:
            prompt = body.prompt
        loop = asyncio.get_running_loop()
        relay = relays.get(loop) or relays.setdefault(loop, EventRelay(loop))
        events: asyncio.Queue = asyncio.Queue()
        try:
            handle = engine.submit(
                prompt,
                body.max_tokens,
                temperature=body.temperature,
                top_k=body.top_k,
                top_p=body.top_p if body.top_p < 1.0 else None,
                seed=body.seed,
                stop_strings=[body.stop] if isinstance(body.stop, str) else body.stop,
                on_event=lambda event: relay.post(events, event),
            )
        except QueueFullError as e:
            return _error(503, str(e), None, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        except (ValueError, TypeError) as e:
            message = str(e)
            param = next((p for p in ("prompt", "max_tokens", "stop", "seed", "top_k", "top_p") if p in message), None)
            return _error(400, message, param)
        completion_id = f"cmpl-{uuid.uuid4().hex}"
        created = int(time.time())

        def choice(text, finish_reason, token_ids):
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "token_ids": token_ids}

        if body.stream:

            async def stream():
                try:
                    while True:
                        event = await events.get()
                        tokens = [event.token] if event.token is not None else []
                        chunk = {
                            "id": completion_id,
                            "object": "text_completion",
                            "created": created,
                            "model": model_name,
                            "choices": [choice(event.text, event.finish_reason, tokens)],
                        }
                        yield f"data: {json.dumps(chunk)}\n\n"
                        if event.finish_reason is not None:
                            yield "data: [DONE]\n\n"
                            return
                finally:
                    handle.cancel()  # a no-op once it has finished; frees a disconnected client's blocks

            return StreamingResponse(
                stream(),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-GPT-Instance": instance},
            )

        next_check = loop.time() + DISCONNECT_POLL_SECONDS
        while not handle.done:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(events.get(), DISCONNECT_POLL_SECONDS)
            if loop.time() >= next_check:
                next_check = loop.time() + DISCONNECT_POLL_SECONDS
                if await request.is_disconnected():
                    handle.cancel()
                    return _error(499, "client disconnected")
        if handle.finish_reason == "error":
            return JSONResponse({"error": {"message": handle.error, "type": "server_error", "code": 500}}, 500)
        return {
            "id": completion_id,
            "object": "text_completion",
            "created": created,
            "model": model_name,
            "choices": [choice(handle.text, handle.finish_reason, handle.tokens)],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(handle.tokens),
                "total_tokens": len(prompt) + len(handle.tokens),
            },
        }

    return app


def serve(engine: Engine, host: str, port: int, model_name: str = "gpt") -> None:
    """Runs the server until SIGINT/SIGTERM, then drains (uvicorn waits for open requests, then the
    engine stops) and exits by the signal, which uvicorn raises again once it has shut down."""
    import uvicorn

    uvicorn.run(create_app(engine, model_name), host=host, port=port, log_level="warning")
