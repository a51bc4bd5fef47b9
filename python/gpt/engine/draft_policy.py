"""Whether the engine drafts in a step: measured, per number of decoding sequences.

A verify step of b sequences with k drafted tokens each runs b (k + 1) rows through the weights,
where a plain decode step runs b. With one or a few sequences the step streams the weights either
way and the extra rows are nearly free; with many, a CPU's step costs about as much per row as the
rows' arithmetic, and the rows that verify rejected or even accepted drafts cost more than the
decode steps they save (`tools/bench/bench_engine_draft.py`: at 4 and 8 sequences, every draft
accepted, plain decoding was faster). Where the crossover lies depends on the model, the drafter,
the text and the machine, so the engine measures it, as a two-armed bandit per batch size: for
each count of decoding sequences, the tokens per second of its decode-only steps with drafts and
without (the median of the last few, so that a step that compiles a program does not decide),
drafting where drafting has been faster, and taking the other arm every `explore_every`-th time
so that a change (acceptance falling as the text stops copying) shows.
"""

import collections
import statistics


class DraftingPolicy:
    """Chooses, before each step, whether the decoding sequences draft (`drafts`), and learns from
    the decode-only steps that ran (`record`)."""

    def __init__(self, explore_every: int = 10, window: int = 5):
        if explore_every < 2:
            raise ValueError(f"explore_every must be an int >= 2, got {explore_every!r}")
        self._explore_every = explore_every
        self._window = window
        self._rates = {}  # decoding count -> {drafted: deque of tokens per second}
        self._decisions = collections.Counter()  # decoding count -> decisions taken

    def rate(self, decoding: int, drafted: bool) -> float | None:
        """The median tokens per second of the last decode-only steps of `decoding` sequences,
        with drafts or without; None before any."""
        samples = self._rates.get(decoding, {}).get(drafted)
        return statistics.median(samples) if samples else None

    def drafts(self, decoding: int) -> bool:
        """Whether `decoding` sequences draft in the next step: first each arm once (drafting
        first), then the faster, and the slower every explore_every-th time."""
        with_drafts, without = self.rate(decoding, True), self.rate(decoding, False)
        if with_drafts is None or without is None:
            return with_drafts is None
        self._decisions[decoding] += 1
        faster = with_drafts >= without
        return not faster if self._decisions[decoding] % self._explore_every == 0 else faster

    def record(self, decoding: int, drafted: bool, tokens: int, seconds: float):
        """A decode-only step of `decoding` sequences (with drafts or without) gave `tokens` tokens
        in `seconds`, drafting included."""
        if decoding < 1 or tokens < 1 or not seconds > 0:
            return
        arms = self._rates.setdefault(decoding, {})
        arms.setdefault(drafted, collections.deque(maxlen=self._window)).append(tokens / seconds)
