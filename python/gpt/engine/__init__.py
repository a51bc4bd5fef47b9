"""The serving engine: continuous batching over a paged KV cache with prefix sharing (see engine.py)."""

from gpt.engine.engine import MAX_CHOICES, Engine
from gpt.engine.metrics import EngineMetrics, prometheus_text
from gpt.engine.requests import MAX_STOP_STRING_LENGTH, MAX_STOP_STRINGS, Event, QueueFullError, RequestHandle

__all__ = [
    "MAX_CHOICES",
    "MAX_STOP_STRINGS",
    "MAX_STOP_STRING_LENGTH",
    "Engine",
    "EngineMetrics",
    "Event",
    "QueueFullError",
    "RequestHandle",
    "prometheus_text",
]
