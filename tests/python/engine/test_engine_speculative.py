"""gpt.engine.Engine(speculative="ngram" | draft_model): drafts verified as rows of the batched step
give plain decoding's greedy tokens (and logits, bit for bit), keep the sampled distribution, roll
rejected rows back in the paged KV cache, and give every block back however a request ends.

The oracle for greedy is the same engine without speculation (and model.generate for the tokens).
"""

import gc
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest
from scipy import stats as scipy_stats

import gpt
from gpt.engine import Engine
from gpt.engine.metrics import parse_prometheus_text, prometheus_text
from gpt.gguf_file import save_gguf
from gpt.sampling import allowed_probabilities

CONFIG = gpt.GPTConfig(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=128)
POOL = dict(num_blocks=48, block_size=8)


@pytest.fixture(scope="module", params=["f32", "q8_0"])
def model(request):
    return gpt.GPT.random(CONFIG, seed=3, options=gpt.CompileOptions(weights=request.param))


@pytest.fixture(scope="module")
def varied(model):
    """A model of the same format whose greedy text does not repeat one token (an untied head):
    its drafts' wrong tokens change what follows."""
    config = gpt.GPTConfig(**{**CONFIG.__dict__, "tied_head": False})
    return gpt.GPT.random(config, seed=3, options=model.options)


def copying_prompt(seed):
    """A span said three times: prompt lookup drafts its continuation."""
    return [int(t) for t in np.tile(np.random.default_rng(seed).integers(0, CONFIG.vocab_size, 12), 3)]


def free_prompt(seed, length=30):
    return [int(t) for t in np.random.default_rng(100 + seed).integers(0, CONFIG.vocab_size, length)]


def run(engine, requests, **submit):
    """Submits (prompt, max_tokens) requests together and steps the engine until they are done."""
    handles = [engine.submit(prompt, max_tokens, keep_logits=True, **submit) for prompt, max_tokens in requests]
    for _ in range(2000):
        if not engine.step():
            break
    assert all(handle.done for handle in handles)
    return handles


def assert_every_block_is_back(engine):
    metrics = engine.metrics()
    assert metrics.blocks_in_use == 0 and metrics.running == 0 and metrics.waiting == 0
    assert engine._blocks.available == engine.num_blocks


class ErringOracle:
    """A drafter that knows each request's greedy continuation and gets every third token of it
    wrong: drafts are accepted in part, rejected at their first token, or whole, and cross blocks."""

    def __init__(self, continuations):
        self._continuations = continuations  # prompt tuple -> greedy tokens

    def __call__(self, max_len):  # Speculation.new_drafter: one drafter per sequence
        return self

    def propose(self, tokens, count):
        for prompt, continuation in self._continuations.items():
            if tuple(tokens[: len(prompt)]) == prompt:
                done = len(tokens) - len(prompt)
                draft = continuation[done : done + count]
                return [(t + 1) % CONFIG.vocab_size if (done + i) % 3 == 2 else t for i, t in enumerate(draft)]
        raise AssertionError("a sequence of no known request")


# -- greedy: the tokens of plain decoding ----------------------------------------------------------


def test_greedy_speculation_gives_plain_decodings_tokens_and_logits_bit_for_bit(model):
    for prompt in (copying_prompt(1), free_prompt(1)):
        (plain,) = run(Engine(model, **POOL, start=False), [(prompt, 40)])
        engine = Engine(model, **POOL, start=False, speculative="ngram", draft_tokens=4)
        (fast,) = run(engine, [(prompt, 40)])
        assert fast.tokens == plain.tokens == model.generate(prompt, 40)
        assert all(np.array_equal(a, b) for a, b in zip(fast.logits, plain.logits, strict=True))
        metrics = engine.metrics()
        assert metrics.generated_tokens == 40 and fast.finish_reason == "length"
        # Accepted drafts are tokens that cost no step of their own.
        assert metrics.accepted_tokens > 0 and metrics.steps < 40
        assert_every_block_is_back(engine)


def test_concurrent_requests_each_give_their_plain_tokens(model):
    requests = [(copying_prompt(i), 30) for i in range(3)] + [(free_prompt(i, 5 + 15 * i), 24) for i in range(3)]
    plain = run(Engine(model, **POOL, start=False), requests)
    # A pool too small for all six at once: sequences with drafts are preempted and recomputed too.
    engine = Engine(model, num_blocks=24, block_size=8, start=False, speculative="ngram", draft_tokens=6)
    fast = run(engine, requests)
    for i, (a, b) in enumerate(zip(fast, plain, strict=True)):
        assert a.tokens == b.tokens == model.generate(requests[i][0], requests[i][1]), f"request {i}"
    metrics = engine.metrics()
    assert metrics.accepted_tokens > 0 and metrics.preemptions > 0
    assert_every_block_is_back(engine)


def test_rejected_drafts_are_rolled_back_in_the_paged_cache(varied):
    """Drafts of up to 8 tokens over blocks of 4 positions, wrong at every third token: the keys
    and values of rejected rows are written over and their blocks given back, so every later logit
    is plain decoding's to the bit."""
    prompts = [free_prompt(7), copying_prompt(7)]
    plain = run(Engine(varied, num_blocks=64, block_size=4, start=False), [(p, 30) for p in prompts])
    engine = Engine(varied, num_blocks=64, block_size=4, start=False, speculative="ngram", draft_tokens=8)
    engine._speculation.new_drafter = ErringOracle({tuple(p): h.tokens for p, h in zip(prompts, plain, strict=True)})
    fast = run(engine, [(p, 30) for p in prompts])
    for a, b in zip(fast, plain, strict=True):
        assert a.tokens == b.tokens
        assert all(np.array_equal(x, y) for x, y in zip(a.logits, b.logits, strict=True))
    metrics = engine.metrics()
    assert 0 < metrics.accepted_tokens < metrics.drafted_tokens
    assert_every_block_is_back(engine)


def test_a_request_ending_inside_a_draft_or_cancelled_between_drafts_frees_its_blocks(varied):
    prompt = free_prompt(3)
    (plain,) = run(Engine(varied, **POOL, start=False), [(prompt, 30)])
    stop = plain.tokens[10]
    oracle = ErringOracle({tuple(prompt): plain.tokens})
    # A stop token accepted inside a draft ends the request there.
    engine = Engine(varied, **POOL, start=False, speculative="ngram", draft_tokens=8)
    engine._speculation.new_drafter = oracle
    (stopped,) = run(engine, [(prompt, 30)], stop=[stop])
    assert stopped.tokens == plain.tokens[: plain.tokens.index(stop)] and stopped.finish_reason == "stop"
    assert engine.metrics().accepted_tokens > 0
    assert_every_block_is_back(engine)
    # Cancelled at the step after a verification; the other request goes on unchanged.
    engine = Engine(varied, **POOL, start=False, speculative="ngram", draft_tokens=8)
    other = copying_prompt(3)
    (other_plain,) = run(Engine(varied, **POOL, start=False), [(other, 30)])
    engine._speculation.new_drafter = ErringOracle({tuple(prompt): plain.tokens, tuple(other): other_plain.tokens})
    victim = engine.submit(prompt, 30)
    survivor = engine.submit(other, 30)
    while engine.metrics().accepted_tokens == 0:
        assert engine.step()
    assert engine._blocks.in_use > 0
    victim.cancel()
    while engine.step():
        pass
    assert victim.finish_reason == "cancelled" and len(victim.tokens) < 30
    assert victim.tokens == plain.tokens[: len(victim.tokens)]
    assert survivor.tokens == other_plain.tokens
    assert_every_block_is_back(engine)


def test_the_counters_reach_the_prometheus_text(model):
    engine = Engine(model, **POOL, start=False, speculative="ngram")
    run(engine, [(copying_prompt(5), 20)])
    metrics = engine.metrics()
    values = parse_prometheus_text(prometheus_text(metrics))
    assert values["gpt_speculative_drafted_tokens_total"] == metrics.drafted_tokens > 0
    assert values["gpt_speculative_accepted_tokens_total"] == metrics.accepted_tokens > 0
    assert values["gpt_speculative_verify_steps_total"] == metrics.verify_steps > 0


def test_no_drafts_while_more_sequences_decode_than_speculative_max_batch(model):
    """With speculative_max_batch=2, three decoding sequences draft nothing; once the shortest
    request ends, the other two draft. The tokens are plain decoding's throughout."""
    requests = [(copying_prompt(2), 6), (copying_prompt(3), 30), (copying_prompt(4), 30)]
    plain = run(Engine(model, **POOL, start=False), requests)
    engine = Engine(model, **POOL, start=False, speculative="ngram", speculative_max_batch=2)
    decoding_at_drafts = []
    new_drafter = engine._speculation.new_drafter

    def recording(max_len):
        drafter = new_drafter(max_len)
        propose = drafter.propose

        def proposing(tokens, count):
            decoding_at_drafts.append(sum(1 for s in engine._scheduler.running if s.pending == 1 and s.generated))
            return propose(tokens, count)

        drafter.propose = proposing
        return drafter

    engine._speculation.new_drafter = recording
    fast = run(engine, requests)
    assert [h.tokens for h in fast] == [h.tokens for h in plain]
    assert decoding_at_drafts and max(decoding_at_drafts) == 2
    assert engine.metrics().accepted_tokens > 0
    assert_every_block_is_back(engine)


# -- a draft model ------------------------------------------------------------------------------


def drafters_made(engine):
    """Records a weak reference to every drafter the engine makes (one per decoding sequence)."""
    made, new_drafter = [], engine._speculation.new_drafter

    def recording(max_len):
        drafter = new_drafter(max_len)
        made.append(weakref.ref(drafter))
        return drafter

    engine._speculation.new_drafter = recording
    return made


@pytest.mark.parametrize("draft", ["the same weights", "other random weights"])
def test_a_draft_model_gives_plain_decodings_tokens_to_concurrent_requests(varied, draft):
    """Three requests of different lengths decode together, drafted by a draft model with a KV
    cache per sequence: one with the target's own weights (its drafts are accepted), one of other
    random weights (its drafts are mostly rejected). Either way the tokens are plain decoding's,
    and every drafter (with its cache) is gone once its request is."""
    requests = [(copying_prompt(2), 24), (free_prompt(2, 9), 17), (free_prompt(3, 41), 30)]
    plain = run(Engine(varied, **POOL, start=False), requests)
    seed = 3 if draft == "the same weights" else 11
    drafter_model = gpt.GPT.random(varied.config, seed=seed, options=varied.options)
    engine = Engine(varied, **POOL, start=False, speculative=drafter_model, draft_tokens=4)
    made = drafters_made(engine)
    fast = run(engine, requests)
    for i, (a, b) in enumerate(zip(fast, plain, strict=True)):
        assert a.tokens == b.tokens, f"request {i}"
    metrics = engine.metrics()
    assert metrics.generated_tokens == sum(n for _, n in requests) and metrics.verify_steps > 0
    if draft == "the same weights":
        assert metrics.accepted_tokens >= 0.8 * metrics.drafted_tokens > 0
        assert metrics.steps < metrics.generated_tokens
    else:
        assert metrics.accepted_tokens < 0.5 * metrics.drafted_tokens
    assert_every_block_is_back(engine)
    gc.collect()
    assert len(made) == len(requests) and all(ref() is None for ref in made)


def test_a_cancelled_request_frees_its_draft_models_cache_and_sampling_works(model):
    drafter_model = gpt.GPT.random(CONFIG, seed=3, options=model.options)
    engine = Engine(model, **POOL, start=False, speculative=drafter_model)
    made = drafters_made(engine)
    victim = engine.submit(free_prompt(4), 40)
    sampled = [engine.submit(free_prompt(5 + i, 12), 20, temperature=0.8, seed=i) for i in range(2)]
    while engine.metrics().verify_steps == 0:
        assert engine.step()
    victim.cancel()
    assert engine.step()
    gc.collect()
    assert len(made) == 3 and made[0]() is None  # the victim's: the first to decode
    assert all(ref() is not None for ref in made[1:])
    while engine.step():
        pass
    assert victim.finish_reason == "cancelled"
    assert all(h.finish_reason == "length" and len(h.tokens) == 20 for h in sampled)
    assert engine.metrics().accepted_tokens > 0
    assert_every_block_is_back(engine)


def test_a_draft_model_drafts_every_sequence_in_one_batched_step_per_position(varied):
    """Three sequences speculate together: each engine step runs the draft model's batched step
    once per drafted position (at most draft_tokens times), not once per sequence and position,
    and the draft's pool has every block back once the requests are done."""
    draft_model = gpt.GPT.random(varied.config, seed=3, options=varied.options)
    engine = Engine(varied, **POOL, start=False, speculative=draft_model, draft_tokens=4)
    batch = engine._speculation._batch
    calls = []
    step_batch = draft_model.step_batch

    def counting(pool, ids, counts, starts, tables):
        calls.append(len(counts))
        return step_batch(pool, ids, counts, starts, tables)

    draft_model.step_batch = counting
    handles = [engine.submit(prompt, 20) for prompt in (copying_prompt(2), free_prompt(2, 9), free_prompt(3, 41))]
    while engine.metrics().verify_steps == 0:
        assert engine.step()
    for _ in range(4):
        calls.clear()
        assert engine.step()
        assert 0 < len(calls) <= 4 and max(calls) == 3, calls  # every sequence in each draft step
    while engine.step():
        pass
    assert all(h.finish_reason == "length" for h in handles)
    gc.collect()
    assert batch.free_blocks == POOL["num_blocks"]


def test_pooled_drafts_are_a_lone_draft_models_and_wait_for_free_blocks(varied):
    """A DraftModelBatch's greedy drafts are those of a draft model drafting each sequence alone
    (speculative.DraftModelDrafter), also after its text moved on; a sequence whose blocks the pool
    cannot give drafts nothing (it decodes plainly) until another drafter's blocks come back."""
    from gpt.engine.draft_batch import DraftModelBatch
    from gpt.speculative import DraftModelDrafter

    draft_model = gpt.GPT.random(varied.config, seed=5, options=varied.options)
    batch = DraftModelBatch(draft_model, num_blocks=8, block_size=8)
    texts = [free_prompt(7, 13), copying_prompt(4)[:20]]
    pooled = [batch.drafter(64) for _ in texts]
    alone = [DraftModelDrafter(draft_model, varied, max_len=64) for _ in texts]
    for moved_on in ([], [5, 6, 7]):
        texts = [text + moved_on for text in texts]
        drafts = batch.propose([(drafter, text, 5) for drafter, text in zip(pooled, texts, strict=True)])
        for drafter, lone, text in zip(pooled, alone, texts, strict=True):
            assert drafts[drafter] == lone.propose(text, 5)
    # 8 blocks of 8: the two hold 3 and 4 (20 and 27 positions); a third needs 4 for 32.
    third = batch.drafter(64)
    assert batch.free_blocks == 1 and third.propose(free_prompt(9, 28), 5) == []
    del pooled[0], drafts
    gc.collect()
    assert batch.free_blocks == 4 and len(third.propose(free_prompt(9, 28), 5)) == 5


# -- sampling: the target distribution ------------------------------------------------------------


def test_sampled_tokens_keep_the_models_distribution():
    """1200 seeded requests of 3 tokens, each drafted by a drafter that always proposes token 3:
    the second and third tokens' frequencies match the model's own probabilities (computed
    exactly over every first and second token) by a chi-square test."""
    tiny = gpt.GPT.random(gpt.GPTConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=8, block_size=32), seed=5)
    prompt = [1, 2, 3, 4]

    def probabilities(tokens):
        return allowed_probabilities(tiny.forward(prompt + tokens)[-1], 1.0, None, None)

    first = probabilities([])
    second = np.zeros(8)
    third = np.zeros(8)
    for a in range(8):
        after_a = probabilities([a])
        second += first[a] * after_a
        for b in range(8):
            third += first[a] * after_a[b] * probabilities([a, b])

    class Threes:
        def __init__(self, max_len):
            pass

        def propose(self, tokens, count):
            return [3] * count

    requests = 1200
    engine = Engine(
        tiny, num_blocks=80, block_size=16, max_running=64, max_queue=requests, start=False, speculative="ngram"
    )
    engine._speculation.new_drafter = Threes
    handles = [engine.submit(prompt, 3, temperature=1.0, seed=seed) for seed in range(requests)]
    while engine.step():
        pass
    metrics = engine.metrics()
    assert 0 < metrics.accepted_tokens < metrics.drafted_tokens
    for position, expected in ((1, second), (2, third)):
        observed = np.bincount([h.tokens[position] for h in handles], minlength=8)
        _, p_value = scipy_stats.chisquare(observed, expected * requests)
        assert p_value > 1e-3, f"token {position}: {observed} against {np.round(expected * requests)}"


# -- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            dict(speculative="medusa"),
            ValueError,
            r"speculative must be None, 'ngram' \(prompt lookup\) or a gpt.GPT draft model, got 'medusa'",
        ),
        (dict(speculative=3), TypeError, "speculative must be None, 'ngram' or a gpt.GPT draft model, got int"),
        (dict(speculative="ngram", draft_tokens=0), ValueError, r"draft_tokens must be an int in \[1, 64\], got 0"),
        (dict(speculative="ngram", draft_tokens=65), ValueError, r"draft_tokens must be an int in \[1, 64\], got 65"),
        (dict(draft_tokens=4), ValueError, r"draft_tokens is given without speculative \('ngram' or a draft model\)"),
        (
            dict(speculative="ngram", speculative_max_batch=0),
            ValueError,
            r"speculative_max_batch must be an int >= 1, got 0",
        ),
        (
            dict(speculative_max_batch=2),
            ValueError,
            r"speculative_max_batch is given without speculative \('ngram' or a draft model\)",
        ),
    ],
)
def test_bad_speculative_arguments_are_refused(kwargs, error, message):
    tiny = gpt.GPT.random(CONFIG, seed=3)
    with pytest.raises(error, match=message):
        Engine(tiny, start=False, **kwargs)


def test_a_draft_model_of_another_vocabulary_or_the_model_itself_is_refused():
    tiny = gpt.GPT.random(CONFIG, seed=3)
    other = gpt.GPT.random(gpt.GPTConfig(**{**CONFIG.__dict__, "vocab_size": 300}), seed=4)
    with pytest.raises(ValueError, match="the draft model's vocab_size 300 differs from the target's 256"):
        Engine(tiny, start=False, speculative=other)
    with pytest.raises(ValueError, match="the draft model must be another model than the one generating"):
        Engine(tiny, start=False, speculative=tiny)


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--speculative", "no-such-draft.gguf"],
            "serve --speculative takes 'ngram' or a draft model, and 'no-such-draft.gguf' is no file, "
            "directory or installed model",
        ),
        (["--draft-tokens", "4"], "serve --draft-tokens needs --speculative ngram|MODEL"),
        (["--speculative", "ngram", "--draft-tokens", "0"], "flag --draft_tokens=0: 0 is not a positive integer"),
        (["--speculative-max-batch", "2"], "serve --speculative-max-batch needs --speculative ngram|MODEL"),
    ],
)
def test_serve_refuses_bad_speculation_flags_in_one_line(flags, message):
    result = run_serve(flags)
    assert result.returncode == 2
    assert result.stderr.strip() == f"gpt: error: {message}"


def test_serve_refuses_a_draft_model_of_another_vocabulary_in_one_line(tmp_path):
    """The embedded model's vocabulary is 256 bytes; a draft GGUF of 300 tokens is refused when
    the engine is made, before the server listens."""
    config = gpt.GPTConfig(**{**CONFIG.__dict__, "vocab_size": 300})
    path = str(tmp_path / "draft.gguf")
    save_gguf(gpt.GPT.random(config, seed=4), config, path, "f32")
    result = run_serve(["--speculative", path])
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "gpt: error: speculative: the draft model's vocab_size 300 differs from the target's 256; "
        "a draft model must share the target's tokenizer"
    )


def run_serve(flags):
    root = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    return subprocess.run(
        [sys.executable, "-m", "gpt", "serve", "--port", "1", *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
