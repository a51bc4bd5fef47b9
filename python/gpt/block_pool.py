"""KVBlockPool: the paged KV cache of a batched step, and the checks and padding of a step over it.

A pool is `num_blocks` blocks of `block_size` positions, per layer, for keys and values. A
sequence owns a list of blocks (its block table): its position p lives in block
`table[p // block_size]`, row `p % block_size`. Sequences share blocks (a common prompt prefix)
by listing the same block ids; the serving engine decides who owns what, the pool only stores.
"""

from typing import Any

import numpy as np

from gpt_runtime.read_only import ReadOnly

from .claim import Claim


class KVBlockPool:
    """Keys and values of `num_blocks` blocks of `block_size` positions for every layer.

    Made by `model.new_block_pool()`; belongs to that model. `keys` and `values` are
    [n_layer, num_blocks, n_kv_head, block_size, head_size] arrays in the model's
    `CompileOptions.kv_cache` format (float32, float16, or uint16 holding bf16's bits; q8_0: int8
    rows of head_size * 17/16 bytes, the codes then the fp16 scales, as KVCache's),
    zero-initialised, written in place by `model.step_batch`. One step at a time: a step (or
    copy_block) while another thread's step on the same pool runs raises RuntimeError instead of
    interleaving their writes.
    """

    def __init__(self, model, num_blocks: int, block_size: int):
        cfg = model.config
        self._model = model
        self._num_blocks = num_blocks
        self._block_size = block_size
        # A row is head_size values, or for q8_0 their int8 codes then fp16 scales as bytes.
        shape = (cfg.n_layer, num_blocks, cfg.n_kv_head, block_size, model._compiled.kv_cache_row_width())
        # Zeros, not empty: rows past a sequence's last position are masked out of attention,
        # but 0 * NaN would not be 0.
        dtype = model._compiled.kv_cache_dtype()
        self._keys = np.zeros(shape, dtype)
        self._values = np.zeros(shape, dtype)
        self._key_views = [self._keys[layer] for layer in range(cfg.n_layer)]
        self._value_views = [self._values[layer] for layer in range(cfg.n_layer)]
        self._claim = Claim("this KVBlockPool is in use by another call (another thread?)")

    model = ReadOnly[Any]()
    num_blocks = ReadOnly[int]()
    block_size = ReadOnly[int]()
    keys = ReadOnly[np.ndarray]()
    values = ReadOnly[np.ndarray]()

    def copy_block(self, src: int, dst: int) -> None:
        """Copies block `src` of every layer's keys and values into block `dst` (copy-on-write of
        a shared block)."""
        for name, block in (("src", src), ("dst", dst)):
            if isinstance(block, bool) or not isinstance(block, (int, np.integer)):
                raise TypeError(f"{name} must be an int block id, got {type(block).__name__}")
            if not 0 <= block < self._num_blocks:
                raise ValueError(f"{name} block {int(block)} is outside [0, num_blocks={self._num_blocks})")
        self._claim.run(self._copy_block, src, dst)

    def _copy_block(self, src: int, dst: int) -> None:
        self._keys[:, dst] = self._keys[:, src]
        self._values[:, dst] = self._values[:, src]

    def __repr__(self) -> str:
        return f"KVBlockPool(num_blocks={self._num_blocks}, block_size={self._block_size})"


def _bucket(n: int) -> int:
    """The power of two >= n: the padded size a step is compiled for, so a few programs serve every mix."""
    size = 1
    while size < n:
        size *= 2
    return size


def _odd_bucket(n: int) -> int:
    """An odd token count >= n: n itself rounded up to odd up to 7 (the rows of one sequence's
    short draft), then one less than a power of two, so that a few programs serve every mix. A
    matmul of an odd row count runs decode's one-row register tiles
    (cc/codegen/cpu/SelectRegisterTiles.cpp halves the rows down to a divisor), so every row's
    logits, keys and values are a lone decode's to the bit."""
    if n <= 7:
        return n | 1
    return _bucket(n + 1) - 1


def _int_array(name: str, value, ndim: int) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


class BatchStepArguments:
    """The checked, padded arrays of one batched step (GPT.step_batch's contract), ready for the
    compiled program: tokens padded to a power of two (padding tokens write nowhere: slot -1),
    sequences to a power of two (padding rows read block 0 and are dropped), tables to a power of
    two wide. With `odd_tokens`, tokens and sequences are padded to odd counts instead
    (_odd_bucket: the rows of a speculative verification computed as decode computes them). Raises ValueError /
    TypeError naming the first problem."""

    def __init__(self, config, pool: KVBlockPool, ids, counts, starts, block_tables, odd_tokens: bool = False):
        ids = _int_array("ids", ids, 1)
        counts = _int_array("counts", counts, 1)
        starts = _int_array("starts", starts, 1)
        tables = _int_array("block_tables", block_tables, 2)
        batch = len(counts)
        if batch == 0:
            raise ValueError("a batched step needs at least one sequence (counts is empty)")
        if len(starts) != batch or tables.shape[0] != batch:
            raise ValueError(
                f"counts ({batch}), starts ({len(starts)}) and block_tables ({tables.shape[0]} rows) "
                "must have one entry per sequence"
            )
        if (counts < 1).any():
            raise ValueError(f"every sequence brings at least one token; counts has {int(counts.min())}")
        if (starts < 0).any():
            raise ValueError(f"starts must be >= 0, got {int(starts.min())}")
        if int(counts.sum()) != len(ids):
            raise ValueError(f"counts sum to {int(counts.sum())} but ids has {len(ids)} tokens")
        bad = (ids < 0) | (ids >= config.vocab_size)
        if bad.any():
            raise ValueError(f"token id {int(ids[bad][0])} is out of range [0, vocab_size={config.vocab_size})")
        ends = starts + counts
        if config.pos_embedding == "learned" and int(ends.max()) > config.block_size:
            b = int(np.argmax(ends))
            raise ValueError(
                f"sequence {b} would reach position {int(ends[b]) - 1}, past block_size={config.block_size} "
                "(learned positions)"
            )
        size = pool.block_size
        needed = (ends + size - 1) // size
        for b in range(batch):
            if needed[b] > tables.shape[1]:
                raise ValueError(
                    f"block_tables row {b} has {tables.shape[1]} blocks; its positions up to {int(ends[b]) - 1} "
                    f"need {int(needed[b])} (block_size {size})"
                )
            row = tables[b, : needed[b]]
            outside = (row < 0) | (row >= pool.num_blocks)
            if outside.any():
                block = int(row[outside][0])
                raise ValueError(f"block_tables row {b} lists block {block}, outside [0, num_blocks={pool.num_blocks})")
        # Each token's sequence, position and slot.
        sequences = np.repeat(np.arange(batch, dtype=np.int64), counts)
        positions = np.concatenate([np.arange(s, e, dtype=np.int64) for s, e in zip(starts, ends, strict=True)])
        slots = tables[sequences, positions // size] * size + positions % size
        if len(np.unique(slots)) != len(slots):
            raise ValueError(
                "two new tokens would write the same KV slot (sequences sharing a block both write into it)"
            )
        self.batch = batch
        # Odd rows for the LM head's matmul too: it runs over the `rows` sequences' last tokens.
        bucket = _odd_bucket if odd_tokens else _bucket
        tokens, width, rows = bucket(len(ids)), _bucket(int(needed.max())), bucket(batch)
        pad = tokens - len(ids)
        self.ids = np.concatenate([ids, np.zeros(pad, np.int64)])
        self.positions = np.concatenate([positions, np.zeros(pad, np.int64)])
        self.sequences = np.concatenate([sequences, np.zeros(pad, np.int64)])
        self.slots = np.concatenate([slots, np.full(pad, -1, np.int64)])
        self.tables = np.zeros((rows, width), np.int64)
        for b in range(batch):
            self.tables[b, : needed[b]] = tables[b, : needed[b]]
        self.last = np.zeros(rows, np.int64)
        self.last[:batch] = np.cumsum(counts) - 1


def step_batch_exact_rows(model, pool: KVBlockPool, ids, counts, starts, block_tables) -> np.ndarray:
    """`model.step_batch` with its tokens padded to an odd count (_odd_bucket), so that each token's
    row (logits, keys and values) has the bits a lone decode of it would have: how the serving
    engine verifies speculative drafts without changing greedy tokens. A model with no compiled
    program of its own (a stand-in that implements the paged contract in numpy) runs its own
    step_batch."""
    if getattr(model, "_compiled", None) is None:
        return model.step_batch(pool, ids, counts, starts, block_tables)
    return model._step_batch(pool, ids, counts, starts, block_tables, odd_tokens=True)
