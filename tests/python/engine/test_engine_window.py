"""gpt.engine.Engine with a sliding-window model: a sequence holds O(window) KV blocks.

A block wholly before a sequence's window is given back after every step, so requests far longer
than the pool run, alone or preempted among others, and give the tokens (and logits) of the model's
own single-sequence cached path, whose rolling cache implements the window independently.
"""

import collections

import numpy as np
import pytest

import gpt
from gpt.engine import Engine
from shapes import relative_error
from single_stream import alone

WINDOW = 20
BLOCK = 8
# Learned positions: block_size bounds a request's length, not the pool.
CONFIG = gpt.GPTConfig(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=256, attention_window=WINDOW)
TOLERANCE = 1e-4  # relative: max |difference| / max |expected logit|
# The most blocks one token's window touches: W positions starting on a block's last row,
# S - 1 + W rows from a block start, over ceil((S - 1 + W) / S) blocks.
WINDOW_BLOCKS = -(-(BLOCK - 1 + WINDOW) // BLOCK)


@pytest.fixture(scope="module")
def model():
    return gpt.GPT.random(CONFIG, seed=4)


class CountingModel:
    """The model, recording how many new tokens each sequence brought to every step."""

    def __init__(self, model):
        self._model = model
        self.counts: list[int] = []

    def __getattr__(self, name):
        return getattr(self._model, name)

    def step_batch(self, pool, ids, counts, starts, block_tables):
        self.counts += [int(c) for c in counts]
        return self._model.step_batch(pool, ids, counts, starts, block_tables)


def assert_reference_counts_match_the_tables(engine):
    """Every block's reference count is the number of running sequences that hold it: the entries
    of their tables from their window's first block on (waiting ones hold none)."""
    holders = collections.Counter()
    for seq in engine._scheduler.running:
        holders.update(seq.table[seq.dropped :])
    assert all(not seq.table for seq in engine._scheduler.waiting)
    assert [engine._blocks.refcount(b) for b in range(engine.num_blocks)] == [
        holders[b] for b in range(engine.num_blocks)
    ]


def run_to_the_end(engine, limit=2000, cancel_at=None):
    """Steps the engine until nothing is left, checking the reference counts after every step;
    the blocks in use after every step. `cancel_at`: {step: handle} to cancel before that step."""
    in_use = []
    while True:
        if cancel_at and len(in_use) in cancel_at:
            cancel_at[len(in_use)].cancel()
        if not engine.step():
            # Nothing ran: every request must be done (a waiting one that never fits is a hang).
            metrics = engine.metrics()
            assert metrics.waiting == 0 and metrics.running == 0, "requests left that can never run"
            return in_use
        assert_reference_counts_match_the_tables(engine)
        in_use.append(engine.metrics().blocks_in_use)
        assert len(in_use) < limit, "the engine does not finish (deadlock?)"


def assert_every_block_returned(engine):
    blocks = engine._blocks
    assert engine.metrics().blocks_in_use == 0
    assert blocks.available == engine.num_blocks
    assert all(blocks.refcount(b) == 0 for b in range(engine.num_blocks))


def random_ids(seed, count):
    return [int(t) for t in np.random.default_rng(seed).integers(0, CONFIG.vocab_size, count)]


def test_a_request_far_longer_than_the_pool_runs_in_its_window(model):
    """6 blocks of 8 (48 positions) serve a 12 + 200 token request: without giving blocks back it
    needs 27 and is refused at submit."""
    prompt = random_ids(1, 12)
    engine = Engine(model, num_blocks=6, block_size=BLOCK, max_batch_tokens=32, start=False)
    handle = engine.submit(prompt, 200, keep_logits=True)
    in_use = run_to_the_end(engine)
    tokens, logits = alone(model, prompt, 200)
    assert handle.finish_reason == "length"
    assert handle.tokens == tokens == model.generate(prompt, 200, use_cache=True)
    worst = max(relative_error(got, want) for got, want in zip(handle.logits, logits, strict=True))
    assert worst < TOLERANCE, f"logits differ by {worst:.2e} relative"
    # After a step the next token's window is held: never more than one window's blocks, and
    # that many once the window has slid onto a block's last row.
    assert max(in_use) == WINDOW_BLOCKS == 4
    assert_every_block_returned(engine)


def test_a_request_whose_window_cannot_fit_is_refused():
    model = gpt.GPT.random(CONFIG, seed=4)  # no step runs: nothing is compiled
    engine = Engine(model, num_blocks=WINDOW_BLOCKS - 1, block_size=BLOCK, start=False)
    with pytest.raises(ValueError, match="need 4 blocks of 8 at once .* more than the pool's 3"):
        engine.submit(random_ids(2, 30), 100)
    # A short request needs only its own blocks, window or not.
    engine.submit(random_ids(2, 10), 10)


def test_windowed_requests_preempted_by_a_tight_pool_match_each_run_alone(model):
    """Five requests (and a sixth, cancelled), 8 blocks: four short prompts are admitted together and their windows grow
    past what the pool holds, so the youngest are preempted and recomputed; a 90-token prompt
    (12 blocks) runs in chunks cut to fit the pool. Stale table entries of given-back blocks, by
    then other sequences' blocks, are passed to the steps."""
    rng = np.random.default_rng(3)
    requests = [(random_ids(10 + i, length), int(rng.integers(30, 50))) for i, length in enumerate((4, 6, 3, 5, 90))]
    counting = CountingModel(model)
    engine = Engine(counting, num_blocks=8, block_size=BLOCK, max_batch_tokens=96, start=False)
    handles = [engine.submit(prompt, max_tokens, keep_logits=True) for prompt, max_tokens in requests]
    cancelled = engine.submit(random_ids(9, 30), 60)  # cancelled while it decodes
    run_to_the_end(engine, cancel_at={90: cancelled})
    assert cancelled.finish_reason == "cancelled" and 0 < len(cancelled.tokens) < 60
    for i, (handle, (prompt, max_tokens)) in enumerate(zip(handles, requests, strict=True)):
        tokens, logits = alone(model, prompt, max_tokens)
        assert handle.finish_reason == "length"
        assert handle.tokens == tokens, f"request {i}"
        worst = max(relative_error(got, want) for got, want in zip(handle.logits, logits, strict=True))
        assert worst < TOLERANCE, f"request {i}: logits differ by {worst:.2e} relative"
    assert engine.metrics().preemptions > 0
    # The long prompt's first chunk: the budget allows 90 tokens, the pool's 8 blocks 64.
    assert max(counting.counts) == 8 * BLOCK
    assert_every_block_returned(engine)


def test_windowed_requests_share_a_cached_prefix(model):
    """Two prompts share 44 tokens (5 full blocks and half of the 6th). The second comes when the
    first has given back the blocks before its window (they wait in the prefix cache): it takes
    from the cache only the blocks its own window reads, copies the shared start of block 5, and
    computes only its tail."""
    shared = random_ids(20, 44)
    first, second = shared + random_ids(21, 10), shared + random_ids(22, 7)
    engine = Engine(model, num_blocks=10, block_size=BLOCK, max_batch_tokens=64, start=False)
    handles = [engine.submit(first, 30, keep_logits=True)]
    engine.step()  # the first prompt, whole
    handles.append(engine.submit(second, 30, keep_logits=True))
    run_to_the_end(engine)
    metrics = engine.metrics()
    assert metrics.prefix_hit_tokens == 44
    assert metrics.prefill_tokens == len(first) + len(second) - 44
    assert metrics.blocks_copied == 1
    for handle, prompt in zip(handles, (first, second), strict=True):
        tokens, logits = alone(model, prompt, 30)
        assert handle.tokens == tokens
        assert max(relative_error(g, w) for g, w in zip(handle.logits, logits, strict=True)) < TOLERANCE
    assert_every_block_returned(engine)


def test_a_windowed_rotary_request_runs_past_block_size():
    """Rotary positions with a window have no table to run out of (GPTConfig.unbounded_positions):
    the engine, like generate's rolling cache, serves a request 3x longer than block_size."""
    cfg = gpt.GPTConfig(
        n_layer=1, n_head=2, n_embd=32, vocab_size=64, block_size=32, pos_embedding="rope", attention_window=12
    )
    rope = gpt.GPT.random(cfg, seed=6)
    prompt = [int(t) for t in np.random.default_rng(7).integers(0, 64, 9)]
    engine = Engine(rope, num_blocks=5, block_size=4, max_batch_tokens=16, start=False)
    handle = engine.submit(prompt, 90, keep_logits=True)
    run_to_the_end(engine)
    tokens, logits = alone(rope, prompt, 90)
    assert handle.tokens == tokens == rope.generate(prompt, 90, use_cache=True)
    assert max(relative_error(g, w) for g, w in zip(handle.logits, logits, strict=True)) < TOLERANCE
    assert_every_block_returned(engine)
    # Learned positions still end at block_size.
    with pytest.raises(ValueError, match="exceed block_size=256"):
        Engine(gpt.GPT.random(CONFIG), num_blocks=4, block_size=BLOCK, start=False).submit([1, 2], 255)


def touched_blocks(start, count, window, size):
    """The blocks a step of `count` tokens from `start` reads or writes, position by position: the
    first token's window reaches furthest back, the last token writes furthest ahead."""
    first = max(start + 1 - window, 0)
    return len(set(range(first // size, (start + count - 1) // size + 1)))


def test_window_block_arithmetic_matches_counting_positions():
    """engine/window.py against touched_blocks."""
    from gpt.engine.window import blocks_spanned, largest_fitting_chunk, most_blocks_needed

    for window, size in ((20, 8), (5, 4), (16, 16), (1, 4), (9, 2)):
        for start in range(0, 60):
            for count in range(1, 40):
                assert blocks_spanned(start, count, window, size) == touched_blocks(start, count, window, size)
            for pool in range(1, 12):
                chunk = largest_fitting_chunk(start, 39, window, size, pool)
                fits = [n for n in range(1, 40) if touched_blocks(start, n, window, size) <= pool]
                assert chunk == (max(fits) if fits else 1)
        for total in range(1, 80):
            decode_most = max(touched_blocks(p, 1, window, size) for p in range(total))
            assert decode_most <= most_blocks_needed(total, window, size) <= -(-total // size)
