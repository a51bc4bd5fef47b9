"""A sequence's next token from its step's logits, and what it does to its request.

Sampled (or a drafted token accepted or replaced), masked by a grammar, checked against stops and
max_tokens, scored for logprobs; computed without changing the engine, so a failed step can be undone.
"""

import functools

import numpy as np

from gpt.engine.requests import TextTracker
from gpt.engine.scheduler import Sequence
from gpt.engine.speculation import verify
from gpt.logprobs import token_logprob
from gpt.sampling import sample
from gpt.speculative import accepts
from gpt.structured_output import StructuredOutputError


def outcome(
    seq: Sequence,
    logits: np.ndarray,
    rng,
    tracker: TextTracker,
    undo: list,
    proposed: int | None = None,
    produced: int = 0,
) -> tuple:
    """The next token of `seq` and what it does to the request, computed without changing the
    engine (only the RNG and the text tracker advance, with their old states added to `undo`):
    (seq, token or None for a stop token, its text, the rest of the text when the request
    ends, the finish reason or None, the logits to keep or None, the token's logprob entry or None).
    `proposed`: a drafted token, kept with the probability the standard accept/reject rule
    gives it (greedy: when it is the argmax), else replaced by a draw from what remains.
    `produced`: tokens of this step's earlier outcomes for `seq` (speculative rows)."""
    handle, params = seq.handle, seq.handle.params
    kept = np.array(logits, copy=True) if handle.logits is not None else None
    if params.temperature > 0:  # greedy sampling does not touch the RNG
        bit_generator = rng.bit_generator
        undo.append(functools.partial(setattr, bit_generator, "state", bit_generator.state))
    constraint, allowed_logits = seq.constraint, logits
    if constraint is not None:  # a grammar's mask applies to sampling (logprobs are the model's own)
        try:
            allowed_logits = constraint.mask(logits)
        except StructuredOutputError as e:  # ends this request; the text is the error (Engine._apply)
            return seq, None, str(e), "", "error", kept, None
    if proposed is None:
        token = sample(allowed_logits, params.temperature, params.top_k, params.top_p, rng)
    else:
        _, token = accepts(allowed_logits, proposed, params.temperature, params.top_k, params.top_p, rng)
    undo.append(functools.partial(tracker.restore, tracker.save()))
    if token in params.stop_ids or (constraint is not None and token in constraint.end_ids):
        return seq, None, "", tracker.flush(), "stop", kept, None
    complete = False
    if constraint is not None:
        complete = constraint.advance(token)  # the JSON is complete: the request ends with it
        undo.append(constraint.rollback)
    # Only for a request that asks: a log-softmax over the vocabulary per token.
    entry = None
    if params.logprobs is not None:
        entry = token_logprob(logits, params.temperature, token, params.logprobs)
    text, stopped = tracker.add(token)
    reason = "stop" if stopped or complete else "length" if seq.generated + produced + 1 == params.max_tokens else None
    return seq, token, text, tracker.flush() if reason else "", reason, kept, entry


def step_outcomes(plan, drafted, logits, first_rows, rngs, trackers, forks, undo) -> tuple[list, dict]:
    """The outcome() of every token a step's logits give (a speculating sequence's verified
    rows, a sequence whose last pending token ran, the choices forking from it), and how many
    drafted tokens each speculating sequence had accepted."""
    outcomes, accepted = [], {}
    for index, (seq, count) in enumerate(plan.work):
        row, rng, tracker = first_rows[index], rngs[index], trackers[index]
        if seq in drafted:
            of_seq = functools.partial(outcome, seq, rng=rng, tracker=tracker, undo=undo)
            accepted[seq], verified = verify(seq, drafted[seq], logits[row:], of_seq)
            outcomes += verified
        elif seq.pending == count:  # else its last pending token has not run: nothing to sample yet
            outcomes.append(outcome(seq, logits[row], rng, tracker, undo))
            outcomes += [outcome(child, logits[row], *state, undo) for child, *state in forks.get(seq, ())]
    return outcomes, accepted


def undo_all(undo: list) -> None:
    """Puts back the states that outcome() added to `undo`, newest first."""
    for restore in reversed(undo):
        restore()
