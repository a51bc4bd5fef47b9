"""The OpenAI-compatible HTTP API over gpt.engine.Engine (FastAPI on uvicorn), in four modules:
protocol (request models and answer shapes), tokens (prompt text into ids, bounded), guards
(limits on what one client can take) and routes (the endpoints, create_app and serve).
docs/SERVING.md describes the API and its limits; gpt.server re-exports the names below."""

from gpt.serving.guards import (
    MAX_HEAD_BYTES,
    AdmissionBudget,
    BoundedBody,
    LastResort,
    ServerLimits,
    guarded_protocol,
    trim_heap,
)
from gpt.serving.protocol import ChatCompletionRequest, ChatMessage, CompletionRequest
from gpt.serving.routes import EventRelay, create_app, serve
from gpt.serving.tokens import TokenReach, text_encoder, token_reach

__all__ = [
    "MAX_HEAD_BYTES",
    "AdmissionBudget",
    "BoundedBody",
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "EventRelay",
    "LastResort",
    "ServerLimits",
    "TokenReach",
    "create_app",
    "guarded_protocol",
    "serve",
    "text_encoder",
    "token_reach",
    "trim_heap",
]
