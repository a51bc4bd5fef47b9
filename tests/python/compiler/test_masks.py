"""Attention masks as data (gpt.masks, GPTConfig(attention_mask=...)): forward numerics of every
mask at every pipeline level against the numpy reference applying the same mask densely (written
apart from gpt.masks, in mask_reference.py), the compile-time tile classification the lowering
follows, and bad masks."""

import dataclasses
import json
import re

import numpy as np
import pytest
from safetensors.numpy import save_file

import gpt
import mask_reference
from checkpoints import hf_config
from gpt import mask_expression, masks
from reference import gpt2_logits
from shapes import RTOL, exercising_weights, relative_error, token_ids

# 96 positions: 3 x 3 tiles of 32 queries by 32 keys, so every mask has tiles of more than one class.
SHAPE = dict(n_layer=1, n_head=2, n_embd=64, vocab_size=128, block_size=96)
TOKENS = 96
SEGMENTS = [0] * 20 + [1] * 44 + [2] * 32
PATTERN = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 1]], dtype=bool)

# (mask, its reference over the block_size positions)
MASKS = {
    "strided": (masks.Strided(8), mask_reference.strided(TOKENS, 8)),
    "fixed": (masks.Fixed(16, 4), mask_reference.fixed(TOKENS, 16, 4)),
    "prefix_lm": (masks.PrefixLM(40), mask_reference.prefix_lm(TOKENS, 40)),
    "document": (masks.Document(SEGMENTS), mask_reference.document(SEGMENTS)),
    "block_pattern": (masks.BlockPattern(PATTERN, 32), mask_reference.block_pattern(PATTERN, 32)),
    # Masks of one's own (masks.Expression), one built with operators, one written as text.
    "user_local_global": (
        masks.Expression((masks.j <= masks.i) & ((masks.i - masks.j < 6) | (masks.j % 16 == 0))),
        mask_reference.local_and_global(TOKENS, 6, 16),
    ),
    "user_chunks": (
        masks.Expression("(or (eq (div j 24) (div i 24)) (and (le j i) (ge j (max 0 (sub i 20)))))"),
        mask_reference.chunks_and_window(TOKENS, 24, 20),
    ),
}


def masked_config(mask):
    return gpt.GPTConfig(**SHAPE, attention_mask=mask)


@pytest.mark.parametrize("name", sorted(MASKS))
def test_masks_match_their_definition(name):
    mask, expected = MASKS[name]
    np.testing.assert_array_equal(mask.dense(TOKENS), expected)


@pytest.mark.parametrize("pipeline", gpt.config.PIPELINES)
@pytest.mark.parametrize("name", sorted(MASKS))
def test_forward_matches_dense_reference(name, pipeline):
    mask, dense = MASKS[name]
    cfg = masked_config(mask)
    weights = exercising_weights(cfg, seed=3)
    ids = token_ids(cfg, TOKENS, seed=3)
    logits = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(pipeline=pipeline)).forward(ids)
    expected = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, mask=dense)
    assert relative_error(logits, expected) < RTOL
    # The mask matters: the causal reference is far from it.
    causal = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head)
    assert relative_error(causal, expected) > 100 * RTOL


def test_shorter_sequence_sees_the_mask_corner():
    """A forward of T < block_size tokens applies the mask's top-left [T, T] corner."""
    mask, dense = MASKS["document"]
    cfg = masked_config(mask)
    weights = exercising_weights(cfg, seed=4)
    ids = token_ids(cfg, 50, seed=4)
    logits = gpt.GPT.from_weights(cfg, weights).forward(ids)
    assert relative_error(logits, gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, mask=dense)) < RTOL


def test_ir_classifies_tiles():
    """The document mask at 96 tokens (documents at 0-19, 20-63, 64-95): the third document's
    queries see no key of the first two tiles, and nothing above the diagonal is visible."""
    model = gpt.GPT.random(masked_config(MASKS["document"][0]))
    ir = model.ir("transformer", seq_len=TOKENS)
    assert 'tile_classes = ["PEE", "PPE", "EEP"]' in ir
    assert "tile_sizes = array<i64: 32, 32>" in ir


def test_index_masks_are_expressions_not_data():
    """Strided, fixed and prefix-LM masks reach the IR as expressions of positions (the `visible`
    region), never as [T, T] constants, and are still classified tile by tile."""
    model = gpt.GPT.random(masked_config(MASKS["prefix_lm"][0]))
    ir = model.ir("transformer", seq_len=TOKENS)
    assert "visible {" in ir and "arith.cmpi slt" in ir
    assert "xi1>" not in ir  # no mask tensor
    # Prefix 40 over 96 tokens in tiles of 32: key block 0 full everywhere, key block 1 partial
    # for the first two query blocks (keys 32-39 seen from all of them), causal after.
    assert 'tile_classes = ["FPE", "FPE", "FFP"]' in ir


# Cached prefill and decode with the masks that are expressions: every logit against the dense
# reference applying the same mask over the whole history (the sequence so far).
CACHED_MASKS = ["prefix_lm", "strided", "user_local_global"]


@pytest.mark.parametrize("name", CACHED_MASKS)
def test_cached_steps_match_dense_reference(name):
    mask, dense = MASKS[name]
    # Two layers: with one, a last position past the prefix would see what causal attention sees.
    cfg = dataclasses.replace(masked_config(mask), n_layer=2)
    weights = exercising_weights(cfg, seed=5)
    model = gpt.GPT.from_weights(cfg, weights)
    ids = [int(t) for t in token_ids(cfg, 70, seed=5)]

    def reference(history):
        return gpt2_logits(weights, np.array(history), cfg.n_layer, cfg.n_head, mask=dense)[-1]

    cache = model.new_cache()
    # A prompt that holds the prefix, a second chunk at an offset, then single-token decodes.
    assert relative_error(model.prefill(ids[:48], cache), reference(ids[:48])) < RTOL
    assert relative_error(model.prefill(ids[48:64], cache), reference(ids[:64])) < RTOL
    for end in range(65, 71):
        assert relative_error(model.decode(ids[end - 1], cache), reference(ids[:end])) < RTOL
    # The mask matters at these positions: the causal reference is far outside the tolerance.
    causal = gpt2_logits(weights, np.array(ids), cfg.n_layer, cfg.n_head)[-1]
    assert relative_error(causal, reference(ids)) > 20 * RTOL


@pytest.mark.parametrize("name", CACHED_MASKS)
def test_cached_generation_matches_uncached(name):
    model = gpt.GPT.random(masked_config(MASKS[name][0]), seed=6)
    prompt = [int(t) for t in token_ids(model.config, 44, seed=6)]
    assert model.generate(prompt, max_new_tokens=6) == model.generate(prompt, max_new_tokens=6, use_cache=False)


def test_mask_that_looks_ahead_never_sees_padding():
    """Forward of 30 tokens under a prefix of 40: every query sees all 30 keys, and none of the
    padding rows a program for 32 tokens would have (they are keys the prefix reaches)."""
    mask, dense = MASKS["prefix_lm"]
    cfg = masked_config(mask)
    weights = exercising_weights(cfg, seed=7)
    ids = token_ids(cfg, 30, seed=7)
    logits = gpt.GPT.from_weights(cfg, weights).forward(ids)
    assert relative_error(logits, gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, mask=dense)) < RTOL


def test_prefix_lm_cache_needs_the_whole_prefix_first():
    """The prefix's positions see one another both ways: a cache that got only part of it in its
    first prefill would keep keys and values computed without the rest."""
    model = gpt.GPT.random(masked_config(masks.PrefixLM(40)))
    cache = model.new_cache()
    with pytest.raises(ValueError, match=r"PrefixLM\(40\) with a KV cache: the first prefill must hold the whole"):
        model.prefill([1, 2, 3], cache)
    assert len(cache) == 0
    with pytest.raises(ValueError, match="the first prefill must hold the whole prefix"):
        model.generate([1, 2, 3], max_new_tokens=2)


def test_causal_and_window_masks_are_the_closed_forms():
    """Causal() and SlidingWindow(W) are the built-in rule: no mask constant, prefill and decode work."""
    assert masked_config(masks.Causal()) == gpt.GPTConfig(**SHAPE)
    assert masked_config(masks.SlidingWindow(5)) == gpt.GPTConfig(**SHAPE, attention_window=5)


def test_masked_model_has_no_cache_but_generates_uncached():
    """A mask that is data (documents) has no cached step; generation recomputes the sequence."""
    cfg = masked_config(MASKS["document"][0])
    model = gpt.GPT.random(cfg)
    with pytest.raises(ValueError, match="has no KV cache: it runs forward"):
        model.new_cache()
    with pytest.raises(ValueError, match="block pool with attention_mask is not supported"):
        model.new_block_pool(4)
    tokens = model.generate([1, 2, 3], max_new_tokens=3, use_cache=False)
    logits = model.forward([1, 2, 3] + tokens[:2])
    assert tokens[2] == int(np.argmax(logits[-1]))


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(attention_mask=masks.Document([0] * 95)), "Document.segment_ids must hold one id per position"),
        (
            dict(attention_mask=masks.BlockPattern(np.eye(4, dtype=bool), 32)),
            "block_size = 96 needs 3 x 3",
        ),
        (dict(attention_mask=np.tri(96, dtype=bool)), "must be a gpt.masks mask or None, got ndarray"),
        (dict(attention_mask=masks.Strided(4), attention_window=4), "exclude each other"),
        (dict(attention_mask=masks.PrefixLM(97)), "PrefixLM.prefix (97) is longer than block_size (96)"),
    ],
)
def test_bad_masks(change, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dataclasses.replace(gpt.GPTConfig(**SHAPE), **change)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: masks.Strided(0), "Strided.stride must be an int >= 1, got 0"),
        (lambda: masks.Strided(2**70), "Strided.stride must be at most 2147483647, got 1180591620717411303424"),
        (lambda: masks.Fixed(2**31, 1), "Fixed.block must be at most 2147483647"),
        (lambda: masks.Fixed(4, 5), r"Fixed.summary \(5\) must be at most Fixed.block \(4\)"),
        (lambda: masks.BlockPattern(np.ones((2, 2)), 8), "must be a square 2-D bool array"),
        (lambda: masks.BlockPattern(np.zeros((2, 2), dtype=bool), 8), "must set every diagonal block"),
        (lambda: masks.Document([[0, 1]]), "must be a 1-D sequence of ints"),
    ],
)
def test_bad_mask_parameters(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_hf_config_sliding_window(tmp_path):
    """config.json's `sliding_window` (HF's key) is the attention window."""
    cfg = gpt.GPTConfig(**SHAPE)
    weights = exercising_weights(cfg)
    (tmp_path / "config.json").write_text(json.dumps({**hf_config(cfg), "sliding_window": 8}))
    save_file(
        {name: np.ascontiguousarray(value) for name, value in weights.items()}, str(tmp_path / "model.safetensors")
    )
    model = gpt.GPT.from_pretrained(str(tmp_path))
    assert model.config.attention_window == 8
    ids = token_ids(cfg, 40)
    assert relative_error(model.forward(ids), gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, window=8)) < RTOL


def test_user_expression_reaches_the_ir_and_is_classified():
    """A mask of one's own is carried as the `visible` region and classified like the built-in
    ones: query block 1 sees key block 0 only through its global columns and the window's reach."""
    model = gpt.GPT.random(masked_config(MASKS["user_local_global"][0]))
    ir = model.ir("transformer", seq_len=TOKENS)
    assert "visible {" in ir and "arith.remsi" in ir
    assert "xi1>" not in ir
    assert 'tile_classes = ["PEE", "PPE", "PPP"]' in ir


def test_user_expression_that_looks_ahead_runs_uncached():
    """Queries that see later keys (the chunks) cannot keep a KV cache; forward and uncached
    generation still follow the mask."""
    mask, dense = MASKS["user_chunks"]
    model = gpt.GPT.random(masked_config(mask), seed=8)
    with pytest.raises(ValueError, match="has no KV cache: the mask lets a query see later keys"):
        model.new_cache()
    with pytest.raises(ValueError, match="generate\\(use_cache=False\\)"):
        model.generate([1, 2, 3], max_new_tokens=2)
    tokens = model.generate([1, 2, 3], max_new_tokens=3, use_cache=False)
    assert tokens[2] == int(np.argmax(model.forward([1, 2, 3] + tokens[:2])[-1]))


@pytest.mark.parametrize(
    "source, message",
    [
        ("(foo i j)", "unknown operator 'foo'"),
        ("(lt i)", r"\(lt ...\) takes 2 arguments, got 1"),
        ("(and (le j i))", r"\(and ...\) takes at least 2 arguments, got 1"),
        ("(add i j)", "is an integer, not a condition"),
        ("(lt (le j i) 3)", r"\(lt ...\) takes integers, got \(le j i\)"),
        ("(le j k)", "unknown name 'k': the only variables are i"),
        ("(le j (mod i j))", r"\(mod a n\) needs a positive integer literal n, got j"),
        ("(le j i", r"missing '\)'"),
        ("(lt j i)", "query 0 does not see its own position"),
        ("(and (le j i) (ne i 80))", "query 80 does not see its own position"),
        (lambda: masks.i - masks.j, "is an integer, not a condition"),
        (lambda: masks.j < masks.i, "query 0 does not see its own position"),
        (lambda: (masks.j <= masks.i) % 2 == 0, r"\(mod ...\) takes integers"),
        (lambda: masks.j <= masks.i / 2, "use // "),
        (lambda: (masks.j <= masks.i) and (masks.i < 3), "combine conditions with &, | and ~"),
        (lambda: masks.j <= masks.i + 0.5, "takes ints, gpt.masks.i and gpt.masks.j, got 0.5"),
        (lambda: 3, "Expression takes a str or a condition"),
    ],
)
def test_bad_user_expressions(source, message):
    """A bad expression fails when it is made (or, for positions below block_size, when the
    config is), naming the problem; nothing compiles."""
    with pytest.raises(ValueError, match=message):
        expression = masks.Expression(source() if callable(source) else source)
        masked_config(expression)


@pytest.mark.parametrize("pipeline", ["baseline", "default"])
def test_decode_skips_key_blocks_the_mask_hides(pipeline):
    """Decode under a mask expression visits only the key blocks where its query sees a key:
    with 4 sink positions and a window of 8, a query past position 70 sees nothing in block 1
    (positions 32-63). Poisoning it with NaN (any read spreads it: 0 * NaN) must leave every
    decoded logit finite and equal to the dense reference's."""
    mask = masks.Expression((masks.j <= masks.i) & ((masks.j < 4) | (masks.i - masks.j < 8)))
    cfg = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=128, block_size=128, attention_mask=mask)
    dense = mask_reference.sinks_and_window(128, 4, 8)
    weights = exercising_weights(cfg, seed=9)
    model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(pipeline=pipeline))
    ids = [int(t) for t in token_ids(cfg, 110, seed=9)]
    cache = model.new_cache()
    model.prefill(ids[:100], cache)
    cache._keys[:, :, 32:64] = np.nan
    cache._values[:, :, 32:64] = np.nan
    for end in range(101, 111):
        logits = model.decode(ids[end - 1], cache)
        assert np.isfinite(logits).all()
        expected = gpt2_logits(weights, np.array(ids[:end]), cfg.n_layer, cfg.n_head, mask=dense)[-1]
        assert relative_error(logits, expected) < RTOL


# -- mask expressions in exact integers (issue 29): refused where int64 would wrap ----------------

BIG = 2**31 - 1  # the largest literal


@pytest.mark.parametrize(
    "source, block_size, culprit",
    [
        # The reproducer: three nested multiplications by 2^31 - 1.
        (
            f"(or (le j i) (eq (mod (mul (mul (mul (add i j) {BIG}) {BIG}) {BIG}) 3) 0))",
            64,
            f"(mul (mul (add i j) {BIG}) {BIG})",
        ),
        (lambda: (masks.j <= masks.i) | ((masks.i * BIG * BIG * BIG) % 3 == 0), 64, f"(mul (mul i {BIG}) {BIG})"),
        # Literals alone: refused whatever the positions.
        (f"(or (le j i) (lt j (mul (mul {BIG} {BIG}) {BIG})))", 1, f"(mul (mul {BIG} {BIG}) {BIG})"),
        # The low end: a large negative value.
        (f"(or (le j i) (lt (mul (sub 0 i) (mul {BIG} {BIG})) j))", 96, f"(mul (sub 0 i) (mul {BIG} {BIG}))"),
        # i * j * 1024 fits below 2^26 positions, not below 2^27 (refused before anything is evaluated).
        ("(or (le j i) (eq (mul (mul i j) 1024) 0))", 2**27, "(mul (mul i j) 1024)"),
    ],
)
def test_mask_expressions_that_overflow_int64_are_refused_by_name(source, block_size, culprit):
    """The compiled mask and numpy compute in 64 bits and would wrap around silently; an
    expression whose sub-expression can leave int64 for some positions below block_size is
    refused, naming that sub-expression."""
    with pytest.raises(ValueError, match=re.escape(f"{culprit} reaches")) as error:
        expression = masks.Expression(source() if callable(source) else source)
        gpt.GPTConfig(**{**SHAPE, "block_size": block_size}, attention_mask=expression)
    assert f"[0, {block_size})" in str(error.value) and "mask expression '(or " in str(error.value)


def test_check_range_bounds_every_operator():
    """Interval bounds, operator by operator, over positions below 2^31 (i * j < 2^62): what just
    fits in int64 passes, and a little more fails."""
    positions = 2**31
    fits = [
        "(mul i j)",
        "(add (mul i j) (mul i j))",  # < 2^63 - 1
        "(sub (sub 0 (mul i j)) (mul i j))",  # > -2^63
        "(mul (div (mul i j) 4) 4)",
        f"(mul (mod (mul i {BIG}) 2) (mul i {BIG}))",  # the modulo bounds its result to [0, 2)
        "(max (mul i j) (sub 0 (mul i j)))",
        "(mul (min i 1) (mul i j))",
    ]
    for text in fits:
        mask_expression.check_range(mask_expression.parse(f"(le j {text})"), text, positions)
    overflows = [
        "(mul (mul i j) 4)",
        "(add (add (mul i j) (mul i j)) (mul i j))",
        "(sub (sub (sub 0 (mul i j)) (mul i j)) (mul i j))",
        f"(mul (min (mul i {BIG}) (mul j {BIG})) 4)",
        "(mul (max i 4) (mul i j))",
    ]
    for text in overflows:
        with pytest.raises(ValueError, match="beyond the 64-bit integers"):
            mask_expression.check_range(mask_expression.parse(f"(le j {text})"), text, positions)


def test_a_mask_expression_past_32_bits_matches_exact_integers():
    """In range, the compiled mask is the exact integer one: products past 2^32 (where 32-bit
    arithmetic would wrap) computed exactly, compared with a mask written with Python ints."""
    text = f"(or (le j i) (eq (mod (mul (mul (add i j) {BIG}) 1000003) 7) 0))"
    expected = mask_reference.dense(TOKENS, lambda i, j: j <= i or ((i + j) * BIG * 1000003) % 7 == 0)
    assert expected.sum() > np.tri(TOKENS).sum()  # some later keys are seen
    mask = masks.Expression(text)
    np.testing.assert_array_equal(mask.dense(TOKENS), expected)
    cfg = masked_config(mask)
    weights = exercising_weights(cfg, seed=5)
    model = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(pipeline="baseline", disk_cache=False))
    ids = token_ids(cfg, TOKENS, seed=5)
    expected_logits = gpt2_logits(weights, ids, cfg.n_layer, cfg.n_head, mask=expected)
    assert relative_error(model.forward(ids), expected_logits) < RTOL
