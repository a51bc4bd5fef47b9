"""The batched step over a paged KV pool (GPT.step_batch): each sequence's logits against the numpy
reference run densely on that sequence's whole token history, through mixed batches (prompts,
prompt chunks and decode tokens in one call), shuffled and shared block tables, padding that must
write nowhere, every pipeline level, and bad arguments that must leave the pool unchanged."""

import re

import numpy as np
import pytest

import gpt
from reference import gpt2_logits
from shapes import NANO, RTOL, config, exercising_weights, relative_error, token_ids


def make_model(pos_embedding="learned", pipeline="default", seed=0):
    cfg = config(NANO, pos_embedding)
    weights = exercising_weights(cfg, seed=seed)
    return gpt.GPT.from_weights(cfg, weights, options=gpt.CompileOptions(pipeline=pipeline)), weights


def check_rows(model, weights, logits, histories):
    """Row b of `logits` is the reference's last-position logits of histories[b] (under the
    model's sliding window, if it has one)."""
    cfg = model.config
    for row, history in zip(logits, histories, strict=True):
        expected = gpt2_logits(
            weights, history, cfg.n_layer, cfg.n_head, cfg.pos_embedding, window=cfg.attention_window
        )[-1]
        assert relative_error(row, expected) <= RTOL


class Sequences:
    """Sequences with block tables drawn at random from a pool, and their token histories."""

    def __init__(self, pool, count, width, seed):
        rng = np.random.default_rng(seed)
        blocks = rng.permutation(pool.num_blocks)[: count * width]
        self.tables = blocks.reshape(count, width)
        self.histories = [[] for _ in range(count)]

    def step(self, model, pool, new_tokens):
        """Runs one batched step where sequence b brings new_tokens[b]; returns the logits."""
        counts = [len(tokens) for tokens in new_tokens]
        starts = [len(self.histories[b]) for b in range(len(new_tokens))]
        ids = np.concatenate([np.asarray(tokens, np.int64) for tokens in new_tokens])
        logits = model.step_batch(pool, ids, counts, starts, self.tables[: len(new_tokens)])
        for b, tokens in enumerate(new_tokens):
            self.histories[b].extend(int(t) for t in tokens)
        return logits


@pytest.mark.parametrize("pos_embedding", ["learned", "rope"])
@pytest.mark.parametrize("block_size", [4, 16])
def test_mixed_batches_match_reference(pos_embedding, block_size):
    model, weights = make_model(pos_embedding)
    cfg = model.config
    pool = model.new_block_pool(48, block_size)
    seqs = Sequences(pool, count=3, width=48 // 3, seed=block_size)
    ids = token_ids(cfg, 64, seed=1)
    # Prompts of several blocks, one token, a prompt chunk beside decode tokens, then decode.
    plan = [
        [ids[:9], ids[9:14], ids[14:15]],
        [ids[15:16], ids[16:19], ids[19:20]],
        [ids[20:21], ids[21:22], ids[22:40]],
        [ids[40:41], ids[41:42], ids[42:43]],
    ]
    for new_tokens in plan:
        logits = seqs.step(model, pool, new_tokens)
        assert logits.shape == (3, cfg.vocab_size)
        check_rows(model, weights, logits, seqs.histories)


def test_same_logits_as_contiguous_cache():
    """Decoding through the pool gives what prefill/decode on a KVCache give."""
    model, _ = make_model()
    cfg = model.config
    pool = model.new_block_pool(16, 8)
    table = np.array([[5, 2, 9, 0]])
    prompt = token_ids(cfg, 11, seed=3)
    cache = model.new_cache(32)
    expected = model.prefill(prompt, cache)
    got = model.step_batch(pool, prompt, [11], [0], table)[0]
    assert relative_error(got, expected) <= RTOL
    for position, token in enumerate(token_ids(cfg, 5, seed=4), start=11):
        expected = model.decode(int(token), cache)
        got = model.step_batch(pool, [token], [1], [position], table)[0]
        assert relative_error(got, expected) <= RTOL


def test_shared_prefix_blocks():
    """Two sequences whose tables share the blocks of a common prefix: the prefix is computed
    once, by the first, and the second attends to it through its own table."""
    model, weights = make_model("rope")
    cfg = model.config
    pool = model.new_block_pool(12, 4)
    prefix = token_ids(cfg, 8, seed=5)  # two full blocks
    tail_a, tail_b = token_ids(cfg, 3, seed=6), token_ids(cfg, 5, seed=7)
    tables = np.array([[7, 3, 10, 0], [7, 3, 1, 6]])
    model.step_batch(pool, prefix, [8], [0], tables[:1])
    logits = model.step_batch(pool, np.concatenate([tail_a, tail_b]), [3, 5], [8, 8], tables)
    check_rows(model, weights, logits, [list(prefix) + list(tail_a), list(prefix) + list(tail_b)])


def test_writes_only_the_new_tokens_slots():
    """Three tokens run padded to four, two sequences padded to two table rows: only the three
    slots the real tokens own change; every other row of every block keeps its bytes."""
    model, _ = make_model()
    cfg = model.config
    pool = model.new_block_pool(8, 4)
    rng = np.random.default_rng(8)
    pool.keys[...] = rng.standard_normal(pool.keys.shape)
    pool.values[...] = rng.standard_normal(pool.values.shape)
    keys, values = pool.keys.copy(), pool.values.copy()
    tables = np.array([[6, 1], [2, 5]])
    # Sequence 0 writes position 5 (block 1, row 1); sequence 1 positions 2, 3 (block 2, rows 2, 3).
    model.step_batch(pool, token_ids(cfg, 3, seed=9), [1, 2], [5, 2], tables)
    written = np.zeros(pool.keys.shape[1:3] + pool.keys.shape[3:4], bool)  # [block, head, row]
    for block, row in [(1, 1), (2, 2), (2, 3)]:
        written[block, :, row] = True
    for after, before in [(pool.keys, keys), (pool.values, values)]:
        assert np.array_equal(after[:, ~written], before[:, ~written])
        assert not np.array_equal(after[:, written], before[:, written])


@pytest.mark.parametrize("pipeline", gpt.config.PIPELINES)
def test_every_pipeline_level(pipeline):
    model, weights = make_model("learned", pipeline)
    pool = model.new_block_pool(6, 4)
    seqs = Sequences(pool, count=2, width=3, seed=10)
    ids = token_ids(model.config, 12, seed=11)
    check_rows(model, weights, seqs.step(model, pool, [ids[:5], ids[5:7]]), seqs.histories)
    check_rows(model, weights, seqs.step(model, pool, [ids[7:8], ids[8:9]]), seqs.histories)


def test_programs_are_bucketed():
    """Token counts, batch sizes and table widths round up to powers of two: steps of 3 and 4
    tokens, or 2 and 1 sequences of the same padded size, share one program."""
    model, _ = make_model()
    pool = model.new_block_pool(8, 4)
    ids = token_ids(model.config, 8, seed=12)
    model.step_batch(pool, ids[:3], [2, 1], [0, 0], [[0, 1], [2, 3]])
    model.step_batch(pool, ids[3:7], [3, 1], [0, 0], [[4, 5], [6, 7]])
    assert list(model._compiled.compiled_batch_steps()) == [(4, 2, 1, 8, 4)]


BAD_STEPS = {
    "counts sum to 3 but ids has 2 tokens": dict(ids=[1, 2], counts=[2, 1]),
    "at least one token": dict(counts=[0, 2]),
    "starts must be >= 0": dict(starts=[-1, 0]),
    "one entry per sequence": dict(starts=[0]),
    "token id 300 is out of range": dict(ids=[300, 1]),
    "block_tables must be a 2-D array": dict(block_tables=[1, 2]),
    "lists block 9, outside [0, num_blocks=8)": dict(block_tables=[[9, 0], [1, 2]]),
    "need 2 (block_size 4)": dict(starts=[0, 4], block_tables=[[0], [1]]),
    "past block_size=128": dict(starts=[0, 127], counts=[1, 2], ids=[1, 2, 3]),
    "same KV slot": dict(block_tables=[[3, 0], [3, 1]]),
    "must hold integers": dict(ids=[1.5, 2.0]),
}


@pytest.mark.parametrize("message", BAD_STEPS)
def test_bad_steps_raise_and_change_nothing(message):
    model, _ = make_model()
    pool = model.new_block_pool(8, 4)
    pool.keys[...] = 1.0
    step = dict(ids=[1, 2], counts=[1, 1], starts=[0, 0], block_tables=[[0, 1], [2, 3]])
    step.update(BAD_STEPS[message])
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        model.step_batch(pool, **step)
    assert (pool.keys == 1.0).all() and (pool.values == 0.0).all()


def test_pool_belongs_to_its_model():
    model, _ = make_model()
    other, _ = make_model(seed=1)
    with pytest.raises(ValueError, match="belongs to another model"):
        model.step_batch(other.new_block_pool(4, 4), [1], [1], [0], [[0]])
    with pytest.raises(TypeError, match="gpt.KVBlockPool"):
        model.step_batch(np.zeros(3), [1], [1], [0], [[0]])
    with pytest.raises(ValueError, match="num_blocks must be an int >= 1"):
        model.new_block_pool(0)


@pytest.mark.parametrize("pos_embedding", ["learned", "rope"])
def test_sliding_window_matches_reference(pos_embedding):
    """A window of 6 over blocks of 4: the window starts inside a block (masked below), at a block
    boundary, inside the last block itself, and covers whole blocks between; blocks wholly before
    it are never read (filled with NaN, they change nothing)."""
    cfg = gpt.GPTConfig(**NANO, pos_embedding=pos_embedding, attention_window=6)
    weights = exercising_weights(cfg)
    model = gpt.GPT.from_weights(cfg, weights)
    pool = model.new_block_pool(32, 4)
    seqs = Sequences(pool, count=3, width=32 // 3, seed=5)
    ids = token_ids(cfg, 60, seed=2)
    plan = [
        [ids[:7], ids[7:8], ids[8:19]],
        [ids[19:20], ids[20:26], ids[26:27]],
        [ids[27:28], ids[28:29], ids[29:30]],
        [ids[30:31], ids[31:32], ids[32:41]],
    ]
    for new_tokens in plan:
        check_rows(model, weights, seqs.step(model, pool, new_tokens), seqs.histories)
    # Blocks wholly before every sequence's window are not read: poisoning them changes nothing.
    before = seqs.step(model, pool, [ids[41:42], ids[42:43], ids[43:44]])
    for b, history in enumerate(seqs.histories):
        first_visible = len(history) - 6  # the rerun of its last token (position len - 1) sees from here
        pool.keys[:, seqs.tables[b, : first_visible // 4]] = np.nan
        pool.values[:, seqs.tables[b, : first_visible // 4]] = np.nan
    tokens = [[history[-1]] for history in seqs.histories]
    for history in seqs.histories:
        history.pop()
    starts = [len(history) for history in seqs.histories]
    again = model.step_batch(pool, np.concatenate(tokens), [1, 1, 1], starts, seqs.tables)
    np.testing.assert_array_equal(again, before)


def test_copy_block():
    model, _ = make_model()
    pool = model.new_block_pool(4, 4)
    pool.keys[:, 1] = 3.0
    pool.values[:, 1] = 4.0
    pool.copy_block(1, 2)
    assert (pool.keys[:, 2] == 3.0).all() and (pool.values[:, 2] == 4.0).all()
    with pytest.raises(ValueError, match="dst block 4 is outside"):
        pool.copy_block(1, 4)


def test_ir_shows_the_paged_ops():
    model, _ = make_model()
    transformer = model.ir("transformer", entry="batch_step")
    assert "transformer.paged_cache_write" in transformer and "transformer.paged_attention" in transformer
    linalg = model.ir("linalg", entry="batch_step")
    assert "transformer.paged" not in linalg and "scf.forall" in linalg
