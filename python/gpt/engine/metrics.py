"""The engine's metrics, and their Prometheus text exposition."""

import dataclasses

# The fields that are counts of events since the engine started: Engine keeps them as counters of
# these names; the others are the engine's state when asked.
COUNTED = (
    "prompt_tokens",
    "admitted_tokens",
    "prefix_hit_tokens",
    "prefill_tokens",
    "generated_tokens",
    "steps",
    "requests_submitted",
    "requests_finished",
    "requests_cancelled",
    "requests_rejected",
    "drafted_tokens",
    "accepted_tokens",
    "verify_steps",
)


@dataclasses.dataclass(frozen=True)
class EngineMetrics:
    waiting: int  # requests queued for admission
    running: int  # sequences in the batch
    blocks_total: int
    blocks_in_use: int  # held by a sequence
    blocks_cached: int  # held by none, still naming a prefix (reused or evicted on demand)
    prompt_tokens: int  # of every submitted request
    admitted_tokens: int  # prompt tokens at admission (re-admissions after preemption included)
    prefix_hit_tokens: int  # of those, found in the prefix cache and not computed
    prefill_tokens: int  # prompt tokens actually computed (chunks and recomputes)
    generated_tokens: int
    steps: int
    preemptions: int
    blocks_copied: int  # copy-on-write: a shared block copied before a sequence wrote into it
    requests_submitted: int
    requests_finished: int
    requests_cancelled: int
    requests_rejected: int
    tokens_per_second: float  # generated tokens over the last 10 seconds
    # Speculative decoding (Engine(speculative=...)): tokens drafted, those of them accepted
    # (each a token that cost no step of its own), and the sequences' verifications that checked them.
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    verify_steps: int = 0

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_hit_tokens / self.admitted_tokens if self.admitted_tokens else 0.0

    @property
    def draft_acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0


# name, help, type, and the EngineMetrics field (or property) it reads.
_EXPOSED = (
    ("gpt_queue_length", "Requests waiting for admission.", "gauge", "waiting"),
    ("gpt_running_sequences", "Sequences in the running batch.", "gauge", "running"),
    ("gpt_kv_blocks_total", "Blocks in the KV pool.", "gauge", "blocks_total"),
    ("gpt_kv_blocks_in_use", "KV blocks held by a sequence.", "gauge", "blocks_in_use"),
    ("gpt_kv_blocks_cached", "Free KV blocks that still hold a cached prefix.", "gauge", "blocks_cached"),
    ("gpt_prefix_cache_hit_rate", "Admitted prompt tokens found in the prefix cache.", "gauge", "prefix_hit_rate"),
    ("gpt_prompt_tokens_total", "Prompt tokens submitted.", "counter", "prompt_tokens"),
    ("gpt_prefix_hit_tokens_total", "Prompt tokens served from the prefix cache.", "counter", "prefix_hit_tokens"),
    ("gpt_prefill_tokens_total", "Prompt tokens computed.", "counter", "prefill_tokens"),
    ("gpt_generated_tokens_total", "Tokens generated.", "counter", "generated_tokens"),
    ("gpt_steps_total", "Batched steps run.", "counter", "steps"),
    ("gpt_preemptions_total", "Sequences preempted (recomputed later).", "counter", "preemptions"),
    ("gpt_kv_blocks_copied_total", "Shared KV blocks copied on write.", "counter", "blocks_copied"),
    ("gpt_requests_submitted_total", "Requests accepted.", "counter", "requests_submitted"),
    ("gpt_requests_finished_total", "Requests that ended (length, stop or error).", "counter", "requests_finished"),
    ("gpt_requests_cancelled_total", "Requests cancelled.", "counter", "requests_cancelled"),
    ("gpt_requests_rejected_total", "Requests refused on a full queue.", "counter", "requests_rejected"),
    ("gpt_speculative_drafted_tokens_total", "Tokens drafted by speculative decoding.", "counter", "drafted_tokens"),
    ("gpt_speculative_accepted_tokens_total", "Drafted tokens accepted.", "counter", "accepted_tokens"),
    ("gpt_speculative_verify_steps_total", "Drafts verified (a sequence's rows in a step).", "counter", "verify_steps"),
    ("gpt_generation_tokens_per_second", "Generated tokens per second, last 10 s.", "gauge", "tokens_per_second"),
)


def prometheus_text(metrics: EngineMetrics) -> str:
    lines = []
    for name, help_text, kind, field in _EXPOSED:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {getattr(metrics, field)}"]
    return "\n".join(lines) + "\n"


def parse_prometheus_text(text: str) -> dict[str, float]:
    """name -> value of the samples in `text` (no labels), for tools and tests."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split()
            values[name] = float(value)
    return values
