"""gpt.engine.Engine: many requests at once give what each gives alone.

The oracle is the model's own single-sequence cached path (`prefill` + `decode`, `generate`). The
engine runs on the model's compiled paged step (`step_batch`) when the model has one, else on the
numpy implementation of the same contract (paged_reference.py).
"""

import threading
import time

import numpy as np
import pytest

import gpt
from gpt.engine import Engine, QueueFullError
from paged_reference import ReferencePagedModel
from shapes import relative_error
from single_stream import alone

CONFIG = gpt.GPTConfig(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=128)
TOLERANCE = 1e-4  # relative: max |difference| / max |expected logit|


@pytest.fixture(scope="module")
def model():
    return gpt.GPT.random(CONFIG, seed=3)


def paged(model):
    return model if hasattr(model, "step_batch") else ReferencePagedModel(model)


def workload(seed=0, count=32):
    """`count` requests: random prompt lengths, a third of them sharing a 24-token prefix (one is
    the prefix itself, whose last full block must be copied on write), random arrival steps."""
    rng = np.random.default_rng(seed)
    shared = [int(t) for t in rng.integers(0, CONFIG.vocab_size, 24)]
    requests = []
    for i in range(count):
        if i % 3 == 0:
            tail = [int(t) for t in rng.integers(0, CONFIG.vocab_size, int(rng.integers(0, 20)))]
            prompt = shared + tail
        else:
            prompt = [int(t) for t in rng.integers(0, CONFIG.vocab_size, int(rng.integers(1, 60)))]
        requests.append((int(rng.integers(0, 25)), prompt, int(rng.integers(1, 17))))
    requests[3] = (30, shared, 6)  # arrives after the prefix is cached: its whole prompt is a hit
    return requests


@pytest.fixture(scope="module")
def expected(model):
    return [alone(model, prompt, max_tokens) for _, prompt, max_tokens in workload()]


def state_of(engine, handle):
    """Where a request stands: waiting, prefill (prompt not all run), decode, or finished."""
    if handle.done:
        return "finished"
    seq = engine._sequences[handle]
    if seq in engine._scheduler.waiting:
        return "waiting"
    return "decode" if seq.pending == 1 and handle.tokens else "prefill"


def run_workload(engine, requests, cancel_at=None, cancelled_in=None):
    """Steps the engine by hand, submitting each request at its arrival step; `cancel_at` maps a
    request's index to the step at which it is cancelled (the state it was in then is added to
    `cancelled_in`)."""
    cancel_at = cancel_at or {}
    handles = [None] * len(requests)
    step = 0
    while step <= 400:
        for i, (arrival, prompt, max_tokens) in enumerate(requests):
            if arrival == step:
                handles[i] = engine.submit(prompt, max_tokens, keep_logits=True)
        for i, when in cancel_at.items():
            if when == step and handles[i] is not None:
                cancelled_in.add(state_of(engine, handles[i]))
                handles[i].cancel()
        busy = engine.step()
        step += 1
        if not busy and all(h is not None for h in handles):
            return handles
    raise AssertionError("the engine did not finish the workload in 400 steps")


def test_32_concurrent_requests_match_each_run_alone(model, expected):
    # 36 blocks of 8 positions are far fewer than 32 sequences hold at once: preemption happens.
    engine = Engine(paged(model), num_blocks=36, block_size=8, max_batch_tokens=48, max_running=32, start=False)
    handles = run_workload(engine, workload())
    for i, (handle, (tokens, logits)) in enumerate(zip(handles, expected, strict=True)):
        assert handle.finish_reason == "length"
        assert handle.tokens == tokens, f"request {i}"
        assert len(handle.logits) == len(logits)
        worst = max(relative_error(got, want) for got, want in zip(handle.logits, logits, strict=True))
        assert worst < TOLERANCE, f"request {i}: logits differ by {worst:.2e} relative"
    metrics = engine.metrics()
    # The workload exercised what it is meant to exercise.
    assert metrics.preemptions > 0
    assert metrics.prefix_hit_tokens >= 24
    assert metrics.blocks_copied > 0
    assert metrics.generated_tokens == sum(len(tokens) for tokens, _ in expected)
    # Every block is back in the pool (free, or cached for a prefix but held by no one).
    assert metrics.blocks_in_use == 0 and metrics.running == 0 and metrics.waiting == 0
    assert engine._blocks.available == engine.num_blocks


def test_cancellation_at_any_point_leaves_the_others_unchanged(model, expected):
    requests = workload()
    rng = np.random.default_rng(7)
    # A third of the requests cancelled at random steps: before arrival, while waiting, in
    # prefill, while decoding, or after they finished.
    cancel_at = {int(i): int(rng.integers(0, 40)) for i in rng.choice(len(requests), 11, replace=False)}
    # A budget of 16 tokens a step cuts most prompts into chunks: some are cancelled mid-prompt.
    engine = Engine(paged(model), num_blocks=36, block_size=8, max_batch_tokens=16, start=False)
    cancelled_in = set()
    handles = run_workload(engine, requests, cancel_at, cancelled_in)
    assert {"waiting", "prefill", "decode"} <= cancelled_in
    cancelled = 0
    for i, (handle, (tokens, logits)) in enumerate(zip(handles, expected, strict=True)):
        if handle.finish_reason == "cancelled":
            assert i in cancel_at
            assert handle.tokens == tokens[: len(handle.tokens)]
            cancelled += 1
            continue
        assert handle.finish_reason == "length"
        assert handle.tokens == tokens, f"request {i}"
        worst = max(relative_error(got, want) for got, want in zip(handle.logits, logits, strict=True))
        assert worst < TOLERANCE, f"request {i}: logits differ by {worst:.2e} relative"
    assert cancelled >= 5
    metrics = engine.metrics()
    assert metrics.requests_cancelled == cancelled
    assert metrics.blocks_in_use == 0 and engine._blocks.available == engine.num_blocks


def test_shared_prefix_is_computed_once(model):
    rng = np.random.default_rng(1)
    prefix = [int(t) for t in rng.integers(0, 256, 64)]
    tails = [[int(t) for t in rng.integers(0, 256, 1 + i)] for i in range(6)]
    engine = Engine(paged(model), num_blocks=64, block_size=16, max_batch_tokens=64, start=False)
    handles = [engine.submit(prefix + tail, 4) for tail in tails]
    while engine.step():
        pass
    metrics = engine.metrics()
    assert metrics.prefill_tokens == len(prefix) + sum(len(t) for t in tails)
    assert metrics.prefix_hit_tokens == 5 * len(prefix)
    for handle, tail in zip(handles, tails, strict=True):
        assert handle.tokens == model.generate(prefix + tail, 4)


def test_a_prompt_diverging_inside_a_block_copies_its_shared_start(model):
    """Block size 16, 20 shared tokens: the second prompt takes block 0 from the cache and copies
    the first 4 positions of block 1 from the first prompt's block 1, then runs only its own."""
    rng = np.random.default_rng(2)
    shared = [int(t) for t in rng.integers(0, 256, 20)]
    first = shared + [int(t) for t in rng.integers(0, 256, 12)]
    second = shared + [int(t) for t in rng.integers(0, 256, 5)]
    engine = Engine(paged(model), num_blocks=16, block_size=16, start=False)
    handles = [engine.submit(first, 3, keep_logits=True)]
    while engine.step():
        pass
    handles.append(engine.submit(second, 6, keep_logits=True))
    while engine.step():
        pass
    metrics = engine.metrics()
    assert metrics.prefix_hit_tokens == 20
    assert metrics.prefill_tokens == len(first) + 5
    assert metrics.blocks_copied == 1
    for handle, prompt in zip(handles, (first, second), strict=True):
        tokens, logits = alone(model, prompt, len(handle.tokens))
        assert handle.tokens == tokens
        assert max(relative_error(g, w) for g, w in zip(handle.logits, logits, strict=True)) < TOLERANCE


def test_threaded_engine_matches_seeded_generate(model):
    """Concurrent submitters on the background thread; sampling with seeds, top_k, top_p and stop
    tokens gives exactly generate()'s tokens."""
    rng = np.random.default_rng(5)
    cases = []
    for i in range(8):
        prompt = [int(t) for t in rng.integers(0, 256, int(rng.integers(1, 30)))]
        sampling = dict(temperature=0.9, top_k=[None, 20][i % 2], top_p=[None, 0.9][i // 4], seed=100 + i)
        cases.append((prompt, sampling, [int(t) for t in rng.integers(0, 256, 3)]))
    engine = Engine(paged(model), num_blocks=64, block_size=16)
    results = [None] * len(cases)

    arrivals = rng.uniform(0, 0.2, len(cases))  # seconds: clients come while others run

    def client(i):
        prompt, sampling, stop = cases[i]
        time.sleep(arrivals[i])
        results[i] = list(engine.submit(prompt, 20, stop=stop, **sampling))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    engine.shutdown()
    for (prompt, sampling, stop), got in zip(cases, results, strict=True):
        assert got == model.generate(prompt, 20, stop=stop, **sampling)
    assert engine.metrics().blocks_in_use == 0


def test_cancelling_from_other_threads_while_the_engine_runs(model, expected):
    """The background thread under a tight pool (preemptions) while client threads cancel at
    random moments: the rest are unchanged and every block comes back."""
    requests = workload()[:16]
    engine = Engine(paged(model), num_blocks=24, block_size=8, max_batch_tokens=32)
    rng = np.random.default_rng(11)
    delays = rng.uniform(0, 0.05, len(requests))
    cancel = set(int(i) for i in rng.choice(len(requests), 6, replace=False))
    handles = [engine.submit(prompt, max_tokens) for _, prompt, max_tokens in requests]

    def canceller(i):
        time.sleep(delays[i])
        handles[i].cancel()

    threads = [threading.Thread(target=canceller, args=(i,)) for i in cancel]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, handle in enumerate(handles):
        assert handle.wait(60), f"request {i} hangs"
        if handle.finish_reason != "cancelled":
            assert handle.tokens == expected[i][0], f"request {i}"
    engine.shutdown()
    metrics = engine.metrics()
    assert metrics.blocks_in_use == 0 and metrics.running == 0 and metrics.waiting == 0
    assert metrics.requests_cancelled + metrics.requests_finished == len(requests)


def test_stop_strings_end_the_text_and_never_leak_into_the_stream(model):
    prompt = list(b"Once upon a time")
    text = bytes(model.generate(prompt, 40)).decode("utf-8", errors="replace")
    stop = text[10:13]
    engine = Engine(paged(model), num_blocks=32, block_size=16, start=False)
    pieces = []
    handle = engine.submit(prompt, 40, stop_strings=[stop, "\x00never"], on_event=lambda e: pieces.append(e.text))
    while engine.step():
        pass
    assert handle.finish_reason == "stop"
    assert handle.text == text[: text.find(stop)]
    assert "".join(pieces) == handle.text
    assert stop not in "".join(pieces)


def test_a_request_that_can_never_fit_is_refused_and_tight_pools_do_not_deadlock(model):
    engine = Engine(paged(model), num_blocks=4, block_size=8, max_batch_tokens=16, start=False)
    with pytest.raises(ValueError, match="need 5 blocks of 8, more than the pool's 4"):
        engine.submit(list(range(30)), 5)
    # Every request needs the whole pool: they run one after another.
    prompts = [[int(t) for t in np.random.default_rng(i).integers(0, 256, 20)] for i in range(4)]
    handles = [engine.submit(p, 12) for p in prompts]
    steps = 0
    while engine.step():
        steps += 1
        assert steps < 500, "deadlock"
    for handle, prompt in zip(handles, prompts, strict=True):
        assert handle.tokens == model.generate(prompt, 12)
    assert engine.metrics().blocks_in_use == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(prompt=[]), ValueError, "prompt must be a non-empty"),
        (dict(prompt=[256]), ValueError, "prompt token id 256 is out of range"),
        (dict(prompt=[1.5]), TypeError, "prompt token ids must be integers"),
        (dict(max_tokens=-1), ValueError, "max_tokens must be an int >= 0"),
        (dict(max_tokens=200), ValueError, "exceed block_size=128"),
        (dict(temperature=-1.0), ValueError, "temperature"),
        (dict(top_p=2.0), ValueError, "top_p"),
        (dict(seed=-3), ValueError, "seed"),
        (dict(stop=[999]), ValueError, "stop token id 999"),
        (dict(stop_strings=[""]), ValueError, "stop strings must be non-empty"),
    ],
)
def test_bad_requests_are_refused_naming_the_problem(model, kwargs, error, message):
    engine = Engine(paged(model), num_blocks=16, block_size=16, start=False)
    arguments = dict(prompt=[1, 2, 3], max_tokens=4) | kwargs
    with pytest.raises(error, match=message):
        engine.submit(**arguments)
    assert engine.metrics().waiting == 0


def test_a_full_queue_refuses_and_cancel_frees(model):
    engine = Engine(paged(model), num_blocks=16, block_size=16, max_queue=2, start=False)
    first, second = engine.submit([1, 2], 4), engine.submit([3, 4], 4)
    with pytest.raises(QueueFullError, match="max_queue=2"):
        engine.submit([5], 4)
    engine.step()  # both admitted: the queue has room again
    third = engine.submit([5], 4)
    first.cancel()
    while engine.step():
        pass
    assert first.finish_reason == "cancelled" and second.finish_reason == "length" and third.tokens
    assert engine.metrics().blocks_in_use == 0


def test_rotary_model_batched_matches_alone():
    rope = gpt.GPT.random(
        gpt.GPTConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=64, block_size=64, pos_embedding="rope"), seed=2
    )
    rng = np.random.default_rng(4)
    prompts = [[int(t) for t in rng.integers(0, 64, int(rng.integers(1, 30)))] for _ in range(6)]
    engine = Engine(paged(rope), num_blocks=24, block_size=4, max_batch_tokens=16, start=False)
    handles = [engine.submit(p, 10, keep_logits=True) for p in prompts]
    while engine.step():
        pass
    for handle, prompt in zip(handles, prompts, strict=True):
        tokens, logits = alone(rope, prompt, 10)
        assert handle.tokens == tokens
        assert max(relative_error(g, w) for g, w in zip(handle.logits, logits, strict=True)) < TOLERANCE


@pytest.mark.skipif(not hasattr(gpt.GPT, "step_batch"), reason="the model has no compiled paged step yet")
def test_compiled_paged_step_matches_the_numpy_reference(model):
    """The compiled step_batch against paged_reference.py on one mixed batch: a fresh prompt, a
    chunk continuing a cached prefix in shared blocks, and decodes, with scattered block ids."""
    reference = ReferencePagedModel(model)
    pools = [model.new_block_pool(12, 8), reference.new_block_pool(12, 8)]
    rng = np.random.default_rng(9)
    first = [int(t) for t in rng.integers(0, 256, 20)]
    tables = np.array([[7, 2, 9, 0], [4, 11, 1, 3]])
    for pool, runner in zip(pools, (model, reference), strict=True):
        runner.step_batch(pool, np.array(first + first[:16]), np.array([20, 16]), np.array([0, 0]), tables)
    ids = np.array([5, 6, 7, 8, 9, 10, 11, 12, 13, 14])
    counts, starts = np.array([1, 9]), np.array([20, 16])
    got = model.step_batch(pools[0], ids, counts, starts, tables)
    want = reference.step_batch(pools[1], ids, counts, starts, tables)
    assert relative_error(got, want) < TOLERANCE
    np.testing.assert_allclose(pools[0].keys, pools[1].keys, rtol=1e-4, atol=1e-5)
