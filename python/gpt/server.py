"""An OpenAI-compatible HTTP API over gpt.engine.Engine (FastAPI on uvicorn).

POST /v1/completions (prompt text or token ids; server-sent events with "stream": true),
POST /v1/chat/completions (messages rendered with the model's chat template, gpt.chat), GET
/v1/models, GET /health, GET /metrics (Prometheus text). Both end a request at the model's EOS
(and a chat at its template's end of turn). The engine's thread runs the model; each request's
events cross to the event loop through an asyncio queue, the loop woken once per step's burst of
events (EventRelay). A client that goes away has its request cancelled (its blocks
return to the pool at the next step); shutdown (SIGTERM, as uvicorn handles it) stops taking
connections, lets running requests finish, then stops the engine.

No client can stall it: a request's body is bounded (413) and must arrive in time (408); a
connection must send its request head within a deadline, and beyond `max_connections` the oldest
idle one makes room (GuardedHttpProtocol); parsing, validation, tokenization and submission run in
worker threads, so /health answers while a maximal prompt is being tokenized (through the
tokenizer's GIL-releasing batch call: text_encoder); a prompt longer than the model's context
could hold is refused before it is tokenized (token_reach); the requests being admitted share a
memory budget (AdmissionBudget: the rest wait their turn, or get 503); and every error,
whatever the body holds, is answered in one shape, `{"error": {"message", "type", "param",
"code"}}`, on a connection that stays open unless the body was left unread.

The code is the package gpt.serving (docs/SERVING.md, "Code layout"); this module keeps the names
that `gpt serve`, gpt.serve_ray, tools and tests import from it.
"""

from gpt import serving
from gpt.serving import *  # noqa: F403 (the names gpt.serving exports, listed there once)

__all__ = serving.__all__
