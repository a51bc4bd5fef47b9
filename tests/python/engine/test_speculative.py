"""Speculative decoding (generate(speculative=...)): the every-row verification step, KV rollback,
greedy equal to plain decoding, the sampled distribution kept, stops and bad input."""

import dataclasses
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as scipy_stats

import gpt
from gpt import chat, models, speculative
from gpt.sampling import allowed_probabilities
from shapes import MID, NANO, RTOL, config, exercising_weights, relative_error


def model_of(shape=NANO, pos_embedding="learned", **changes):
    cfg = dataclasses.replace(config(shape, pos_embedding), **changes)
    if cfg.spec.compiler_names != "gpt2":  # exercising_weights has GPT-2's names
        return gpt.GPT.random(cfg)
    return gpt.GPT.from_weights(cfg, exercising_weights(cfg))


@pytest.fixture(scope="module")
def nano():
    return model_of()


def repeating_prompt(vocab, period=12, copies=3, seed=3):
    """Text that repeats a span: prompt lookup drafts the span, and the model (whose greedy
    continuation of a repeated span tends to repeat it) accepts some of them."""
    return [int(t) for t in np.tile(np.random.default_rng(seed).integers(0, vocab, period), copies)]


# -- the verification step ------------------------------------------------------------------------


def test_verify_returns_every_positions_logits_and_fills_the_cache(nano):
    prompt = np.random.default_rng(1).integers(0, 256, 20)
    drafted = np.random.default_rng(2).integers(0, 256, 5)
    cache = nano.new_cache(64)
    nano.prefill(prompt, cache)
    rows = nano.verify(drafted, cache)
    assert rows.shape == (5, 256) and len(cache) == 25
    reference = nano.forward(np.concatenate([prompt, drafted]))[20:]
    assert relative_error(rows, reference) <= RTOL
    # The keys and values were written: decoding on from there matches the uncached forward.
    following = nano.decode(7, cache)
    assert relative_error(following, nano.forward(np.concatenate([prompt, drafted, [7]]))[-1]) <= RTOL


@pytest.mark.parametrize("weights", ["f32", "q8_0", "q4_1"])
def test_every_verified_row_count_up_to_sixteen_computes_decodes_bits(weights):
    """What greedy speculation's exactness rests on: each row of a verification step of any count
    up to 16 (not only an odd one) has decode's logits, keys and values to the bit, whatever
    register tile its row count takes (2, 3, 4 rows or one). Before, an even count summed the
    attention's q . k^T as a matmul, in another order than decode's dot products."""
    cfg = config(MID)
    model = gpt.GPT.from_weights(cfg, exercising_weights(cfg), gpt.CompileOptions(weights=weights))
    prompt = np.random.default_rng(1).integers(0, cfg.vocab_size, 30)
    drafted = [int(t) for t in np.random.default_rng(2).integers(0, cfg.vocab_size, 16)]
    cache = model.new_cache(64)
    model.prefill(prompt, cache)
    decoded = np.array([model.decode(t, cache) for t in drafted])
    for rows in (2, 3, 4, 5, 6, 8, 9, 12, 16):
        cache = model.new_cache(64)
        model.prefill(prompt, cache)
        np.testing.assert_array_equal(model.verify(drafted[:rows], cache), decoded[:rows], err_msg=f"{rows} rows")
        # The keys and values too: decoding on from there is decode's.
        np.testing.assert_array_equal(model.decode(drafted[0], cache), decode_after(model, prompt, drafted[:rows]))


def decode_after(model, prompt, tokens):
    """The logits of decoding tokens[0] after the prompt and `tokens`, all decoded one at a time."""
    cache = model.new_cache(64)
    model.prefill(prompt, cache)
    for token in tokens:
        model.decode(token, cache)
    return model.decode(tokens[0], cache)


def test_rewinding_the_cache_forgets_the_rejected_positions(nano):
    prompt = np.random.default_rng(4).integers(0, 256, 10)
    cache = nano.new_cache(64)
    nano.prefill(prompt, cache)
    nano.verify([1, 2, 3, 4], cache)
    speculative.rewind(cache, 11)  # keep the first drafted token only
    logits = nano.verify([9, 8], cache)
    reference = nano.forward(np.concatenate([prompt, [1, 9, 8]]))[-2:]
    assert len(cache) == 13 and relative_error(logits, reference) <= RTOL
    with pytest.raises(ValueError, match="cannot rewind a KV cache of 13 positions to 14"):
        speculative.rewind(cache, 14)


def test_the_verify_entry_returns_one_logits_row_per_token(nano):
    def step_signature(ir):
        header = next(line for line in ir.splitlines() if "func.func @step(" in line)
        results = re.search(r"-> \((tensor<[^,]*)", header).group(1)
        last = re.findall(r"%arg2: (tensor<\w+>)", header)[0]  # ids, positions, last
        return last, results

    assert step_signature(nano.ir("transformer", entry="verify", seq_len=3, cache_len=64)) == (
        "tensor<3xi64>",
        "tensor<3x256xf32>",
    )
    assert step_signature(nano.ir("transformer", entry="step", seq_len=3, cache_len=64)) == (
        "tensor<1xi64>",
        "tensor<1x256xf32>",
    )


def test_verify_refuses_to_wrap_a_rolling_cache():
    model = model_of(attention_window=16)
    cache = model.new_cache(64)
    assert cache.rolling and cache.slots == 16
    model.prefill(np.arange(14), cache)
    with pytest.raises(ValueError, match="would wrap around the rolling cache of 16 slots"):
        model.verify([1, 2, 3], cache)
    assert len(cache) == 14


# -- greedy is exactly greedy -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, pos_embedding, changes",
    [
        (NANO, "learned", {}),
        (NANO, "rope", {}),
        (MID, "learned", {}),
        (NANO, "rope", dict(architecture="llama", n_kv_head=2)),
    ],
    ids=["nano", "nano-rope", "mid", "llama-gqa"],
)
def test_greedy_speculation_gives_the_tokens_of_plain_decoding(shape, pos_embedding, changes):
    model = model_of(shape, pos_embedding, **changes)
    vocab = model.config.vocab_size
    prompts = [
        repeating_prompt(vocab, period=12, copies=3, seed=3),
        repeating_prompt(vocab, period=5, copies=6, seed=4),
        [int(t) for t in np.random.default_rng(5).integers(0, vocab, 17)],  # copies nothing
        [3],
    ]
    accepted = 0
    for prompt in prompts:
        plain = model.generate(prompt, 48)
        for draft_tokens in (1, 4, 7):
            assert model.generate(prompt, 48, speculative="ngram", draft_tokens=draft_tokens) == plain
            accepted += model.last_speculation.accepted_tokens
    assert accepted > 0  # drafts were verified and kept, not only rejected


def test_greedy_with_a_draft_model_gives_the_tokens_of_plain_decoding():
    target = model_of()
    same = gpt.GPT.from_weights(target.config, exercising_weights(target.config))
    other = gpt.GPT.random(target.config, seed=7)
    prompt = repeating_prompt(256)
    plain = target.generate(prompt, 40)
    assert target.generate(prompt, 40, speculative=same, draft_tokens=4) == plain
    # A draft model with the target's weights drafts what the target would say.
    assert target.last_speculation.accepted_tokens >= 30
    assert target.generate(prompt, 40, speculative=other, draft_tokens=3) == plain


def test_greedy_speculation_with_smollm2_in_q4_1_gives_the_tokens_of_plain_decoding():
    """A real model in a 4-bit format, where a verification row that rounds differently from
    decode (an even row count's attention once did, by up to 0.6 in a logit) would change a
    near-tie's argmax."""
    path = models.find("smollm2")
    model = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="q4_1"), context=512)
    paragraph = (
        "The lighthouse keeper climbed the spiral stairs every evening at dusk. He trimmed the wick, "
        "polished the great lens and wrote the weather in a leather book. Ships passed far out at sea, "
        "and none of their sailors ever knew his name, but each of them saw his light."
    )
    spec = chat.chat_spec(model.tokenizer, model_path=path)
    request = "Repeat this paragraph word for word, but write 'lamp' instead of 'light':\n\n" + paragraph
    rendered = spec.template.render([{"role": "user", "content": request}]) + paragraph[:40]
    prompt = chat.prompt_ids(model.tokenizer, spec, rendered)
    plain = model.generate(prompt, 100, stop_at_eos=False)
    assert model.generate(prompt, 100, stop_at_eos=False, speculative="ngram", draft_tokens=4) == plain
    assert model.last_speculation.accepted_tokens >= 20


# -- sampling keeps the target distribution ---------------------------------------------------------


def test_the_accept_reject_rule_draws_from_the_target_distribution():
    logits = np.log(np.array([0.05, 0.4, 0.3, 0.15, 0.1]))
    rng = np.random.default_rng(0)
    draws = 20000
    for drafted in (0, 1, 4):
        counts = np.bincount(
            [speculative.accepts(logits, drafted, 1.0, None, None, rng)[1] for _ in range(draws)], minlength=5
        )
        expected = np.exp(logits) * draws
        assert scipy_stats.chisquare(counts, expected).pvalue > 1e-4, (drafted, counts, expected)


def test_speculative_sampling_keeps_the_models_distribution_of_the_next_tokens():
    """Over many seeds, the pair of the first two new tokens follows the model's own distribution:
    the second is drafted (prompt lookup: what followed the first in the prompt) and chosen by the
    accept/reject rule. Accepting every draft, or drawing a rejected draft's replacement from the
    whole distribution instead of the residual, fails the chi-square test by far."""
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=8, block_size=64)
    weights = exercising_weights(cfg)
    weights["transformer.wte.weight"] = weights["transformer.wte.weight"] * 5  # skewed, not uniform
    model = gpt.GPT.from_weights(cfg, weights)
    # "7 x" occurred for every x: whatever the first new token, its 2-gram with the prompt's last
    # token has a continuation to draft.
    prompt = [t for x in range(8) for t in (7, x)]
    temperature = 1.5

    def probabilities(ids):
        return allowed_probabilities(model.forward(ids)[-1], temperature)

    first = probabilities(prompt)
    expected = first[:, None] * np.array([probabilities(prompt + [t]) for t in range(8)])
    runs = 6000
    counts = np.zeros((8, 8))
    verified = 0
    for seed in range(runs):
        tokens = model.generate(prompt, 2, temperature=temperature, seed=seed, speculative="ngram", draft_tokens=2)
        counts[tokens[0], tokens[1]] += 1
        verified += model.last_speculation.verify_steps
    assert verified == runs  # every second token went through the accept/reject rule
    expected = expected.ravel() * runs
    observed = counts.ravel()
    rare = expected < 5  # pooled, as the chi-square approximation needs
    if rare.any():
        observed = np.append(observed[~rare], observed[rare].sum())
        expected = np.append(expected[~rare], expected[rare].sum())
    result = scipy_stats.chisquare(observed, expected)
    assert result.pvalue > 1e-4, (observed, expected)


def test_the_same_seed_gives_the_same_speculative_sample(nano):
    prompt = repeating_prompt(256)
    first = nano.generate(prompt, 30, temperature=0.8, top_k=20, seed=11, speculative="ngram")
    assert nano.generate(prompt, 30, temperature=0.8, top_k=20, seed=11, speculative="ngram") == first


# -- stops, EOS, max_new_tokens, stream -------------------------------------------------------------


def test_stops_max_new_tokens_and_stream_behave_as_without_speculation(nano):
    prompt = repeating_prompt(256, period=6, copies=5, seed=8)
    plain = nano.generate(prompt, 40)
    for count in (1, 2, 3, 5, 17):
        assert nano.generate(prompt, count, speculative="ngram", draft_tokens=6) == plain[:count]
    # A stop token inside a drafted run: generation ends before it, and it is not returned.
    for stop in {plain[5], plain[20], plain[-1]}:
        expected = nano.generate(prompt, 40, stop=[stop])
        assert nano.generate(prompt, 40, stop=[stop], speculative="ngram", draft_tokens=6) == expected
        streamed = list(nano.generate(prompt, 40, stop=[stop], stream=True, speculative="ngram", draft_tokens=6))
        assert streamed == expected
        assert nano.last_generation.generated_tokens == len(expected)


def test_a_windowed_model_speculates_until_its_cache_rolls_then_decodes():
    model = model_of(attention_window=16)
    prompt = repeating_prompt(256, period=4, copies=3, seed=9)
    plain = model.generate(prompt, 40)
    assert model.generate(prompt, 40, speculative="ngram", draft_tokens=3) == plain


def test_drafts_shrink_to_plain_decoding_when_they_are_rejected():
    length = speculative.AdaptiveDraftLength(8)
    assert length.next() == 2
    length.update(2, 2)
    length.update(4, 4)
    assert length.next() == 8  # doubled while whole drafts were accepted
    length.update(8, 3)
    assert length.next() == 4  # what was accepted, rounded up to even
    length.update(4, 0)
    assert length.next() == 2
    # Below 2: plain decoding for a backoff that doubles with every failed try.
    waits = []
    for _ in range(4):
        length.update(length.next(), 0)
        wait = 0
        while length.next() == 0:
            wait += 1
        waits.append(wait)
    assert waits == [2, 4, 8, 16]
    length.update(2, 2)  # a try that is accepted doubles the length and resets the backoff
    assert length.next() == 4


# -- the drafters ----------------------------------------------------------------------------------


def test_verification_rows_are_counts_that_tile_several_rows_and_stay_exact():
    # Up to 16 rows: any count with a 2-, 3- or 4-row tile as it is; 5, 7, 11, 13 one more (or,
    # where the cache or max_new_tokens leaves no room, one fewer).
    assert [speculative.verification_rows(rows, 64) for rows in range(2, 17)] == [
        2,
        3,
        4,
        6,
        6,
        8,
        8,
        9,
        10,
        12,
        12,
        14,
        14,
        15,
        16,
    ]
    assert speculative.verification_rows(5, 5) == 4 and speculative.verification_rows(16, 16) == 16
    # Past 16 only an odd count is exact (the attention's blocks of an even count sum another way).
    assert [speculative.verification_rows(rows, 64) for rows in (17, 18, 33)] == [17, 19, 33]
    assert speculative.verification_rows(18, 18) == 17


def test_prompt_lookup_proposes_what_followed_the_longest_recent_match():
    drafter = speculative.NgramDrafter()
    text = [5, 6, 7, 8, 9, 1, 6, 7, 2, 3, 5, 6, 7]
    # The 3-gram 5 6 7 occurred at the start: what followed it there.
    assert drafter.propose(text, 3) == [8, 9, 1]
    # No earlier 4 6 7: the most recent earlier 6 7 was followed by 4.
    assert drafter.propose(text + [4, 6, 7], 2) == [4, 6]
    # A lone token (3) matches nothing by default: single tokens recur all over free text.
    assert drafter.propose(text + [4, 6, 7, 9, 3], 2) == []
    assert speculative.NgramDrafter(min_ngram=1).propose(text + [4, 3], 2) == [5, 6]
    assert speculative.NgramDrafter().propose([1, 2, 1, 2], 4) == [1, 2]


def test_prompt_lookup_drafts_as_many_tokens_as_the_match_behind_them():
    text = list(range(100, 140))  # no token, so no n-gram, occurs twice
    drafter = speculative.NgramDrafter()
    # A copy that has run 20 tokens: the whole count asked for.
    assert drafter.propose(text + text[:20], 8) == text[20:28]
    # 5 tokens agree with the text's end before the match (the 3-gram and 2 more): 5, rounded
    # up to the even count that verification runs in.
    assert drafter.propose(text + [99] + text[10:15], 8) == text[15:21]
    # A 2-gram that recurs after another token: evidence of 2 tokens, so 2 drafted, not 8.
    assert drafter.propose(text + [99] + text[10:12], 8) == text[12:14]
    # Never more than asked, nor past the text.
    assert drafter.propose(text + text[:20], 3) == text[20:23]
    assert drafter.propose(text + [99] + text[30:40], 8) == [99] + text[30:37]


class CopyingModel:
    """A stand-in for gpt.GPT whose greedy next token at position p is always text[p], whatever
    came before: the text it was built with is what it says, and the loop's drafts are
    accepted exactly where they agree with it. It records how many rows each verification ran."""

    def __init__(self, text, vocab_size=256):
        self.config = gpt.GPTConfig(**{**NANO, "vocab_size": vocab_size})
        self.text = text
        self.verified_rows = []

    def _logits(self, position):
        logits = np.zeros(self.config.vocab_size, np.float32)
        logits[self.text[position]] = 1.0
        return logits

    def prefill(self, ids, cache):
        cache._length += len(ids)
        return self._logits(cache._length)

    def decode(self, token, cache):
        cache._length += 1
        return self._logits(cache._length)

    def _verify(self, ids, cache):
        self.verified_rows.append(len(ids))
        rows = np.array([self._logits(cache._length + i + 1) for i in range(len(ids))])
        cache._length += len(ids)
        return rows


class ListCache:
    """The parts of gpt.cache.KVCache that the speculative loop and rewind() use."""

    def __init__(self, max_len):
        self._length, self.max_len, self.slots, self.rolling = 0, max_len, max_len, False
        self._claim = self

    def run(self, fn):
        return fn()

    def __len__(self):
        return self._length


def test_a_long_copy_is_verified_in_drafts_of_the_default_eight_tokens():
    """The loop's default ceiling (DEFAULT_DRAFT_TOKENS, as generate() and the engine use it when
    draft_tokens is not given): a copy of a 60-token span is drafted 2, 4, then 8 at a time."""
    span = list(range(100, 160))
    prompt = span + span[:3]
    model = CopyingModel(prompt + span[3:] + [0])
    stats = dict(generated_tokens=0)
    speculation = dict(drafted_tokens=0, accepted_tokens=0, verify_steps=0)
    tokens = list(
        speculative.speculative_tokens(
            model,
            np.asarray(prompt),
            40,
            0.0,
            None,
            None,
            np.random.default_rng(0),
            frozenset(),
            speculative.NgramDrafter(),
            speculative.check_draft_tokens(None),
            ListCache(256),
            lambda key, fn, *args: fn(*args),
            stats,
            speculation,
        )
    )
    assert tokens == span[3:43]
    # 5 rows (a draft of 4) become 6 with a filler guess: a count the matmuls tile several rows at a time.
    assert model.verified_rows[:5] == [3, 6, 9, 9, 9]
    assert speculation["accepted_tokens"] == speculation["drafted_tokens"]


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(speculative="medusa"), ValueError, "speculative must be 'ngram' or a gpt.GPT draft model, got 'medusa'"),
        (dict(speculative=3), TypeError, "speculative must be 'ngram' or a gpt.GPT draft model, got int"),
        (dict(speculative="ngram", draft_tokens=0), ValueError, r"draft_tokens must be an int in \[1, 64\], got 0"),
        (dict(speculative="ngram", draft_tokens=2.5), ValueError, r"draft_tokens must be an int in \[1, 64\]"),
        (dict(draft_tokens=4), ValueError, "draft_tokens is given without speculative"),
        (dict(speculative="ngram", use_cache=False), ValueError, "use_cache must be True"),
    ],
)
def test_bad_speculative_arguments_are_refused_before_anything_runs(nano, kwargs, error, message):
    with pytest.raises(error, match=message):
        nano.generate([1, 2, 3], 5, **kwargs)


def test_a_draft_model_of_another_vocabulary_is_refused(nano):
    other = gpt.GPT.random(gpt.GPTConfig(**{**NANO, "vocab_size": 300}))
    with pytest.raises(ValueError, match="draft model's vocab_size 300 differs from the target's 256"):
        nano.generate([1, 2, 3], 5, speculative=other)
    with pytest.raises(ValueError, match="must be another model"):
        nano.generate([1, 2, 3], 5, speculative=nano)


# -- the command line ------------------------------------------------------------------------------


def run_cli(*args):
    root = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    return subprocess.run([sys.executable, "-m", "gpt", *args], capture_output=True, text=True, env=env, timeout=600)


def test_the_cli_speculates_with_either_spelling_of_draft_tokens_and_prints_the_same_text():
    prompt = "the cat sat on the mat. " * 3 + "the cat"
    common = ("generate", "--prompt", prompt, "--temperature", "0", "--max_new_tokens", "40", "--nostream")
    plain = run_cli(*common)
    assert plain.returncode == 0, plain.stderr
    for spelling in ("--draft-tokens", "--draft_tokens"):
        result = run_cli(*common, "--speculative", "ngram", spelling, "3")
        assert result.returncode == 0, result.stderr
        text, timing = result.stdout.rstrip("\n").rsplit("\n", 1)
        assert text == plain.stdout.rstrip("\n").rsplit("\n", 1)[0]
        assert re.search(r"\| speculative ngram: \d+ of \d+ drafted accepted$", timing), timing


def test_the_cli_refuses_speculation_without_the_cache_in_one_line():
    result = run_cli("generate", "--speculative", "ngram", "--nocache", "--max_new_tokens", "4")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "gpt: error: speculative decoding verifies drafts against the KV cache: use_cache must be True"
    )
