"""KVCache: the per-layer key and value buffers that prefill fills and decode extends."""

import mmap
import sys
from typing import Any

import numpy as np

from gpt_runtime.read_only import ReadOnly

from .claim import Claim

# Linux's MAP_NORESERVE (mmap has it by name from Python 3.13): a reservation of address space
# that the kernel's overcommit heuristic does not weigh against free memory.
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)


def zeroed_in_small_pages(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A zeroed array in anonymous memory of its own that the kernel backs 4 KiB page by 4 KiB
    page as they are first written, never in transparent huge pages, and reserves without
    counting it against free memory (MAP_NORESERVE): an array far larger than the memory it will
    ever use costs address space only.

    numpy asks for huge pages on every large allocation (madvise MADV_HUGEPAGE), and a cache's rows
    lie head by head: a head's positions are a context's rows apart (512 KiB for 4096 positions of
    64 f16 values), so the first prefill's few rows touched every 2 MiB page of the buffers, and the
    kernel zeroed all of them. On SmolLM2-1.7B's shape with a context of 4096, the first prefill of
    16 tokens took the process from 1067 to 1839 MiB and spent the time of clearing 805 MB, seconds
    on a VM whose host backs fresh memory lazily. In small pages a cache holds what its positions
    use."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if nbytes == 0:
        return np.zeros(shape, dtype)
    try:
        memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE)
    except OSError as error:  # as np.zeros would say it
        raise MemoryError(f"a KV cache buffer of {nbytes} bytes {shape} could not be mapped: {error}") from error
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # where the system's setting is "always"
        memory.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(memory, dtype).reshape(shape)


class KVCache:
    """Keys and values of every layer for up to `max_len` positions of one sequence.

    Made by `model.new_cache()`; belongs to that model. `len(cache)` is the number of positions
    filled so far. The buffers are written in place by compiled code; a call that raises leaves
    the cache as it was. One call at a time: a step (or reset) while another thread's step on the
    same cache is running raises RuntimeError instead of interleaving their writes.

    Every cache of a model without an attention window has the slots of its whole context
    (`cache.slots` == block_size), whatever its `max_len`: the compiled steps are specialized by
    their cache's slots, so one decode program (and one per prefill bucket) serves caches of
    every length, and a conversation that grows never recompiles or refills its cache. The
    buffers reserve the context's address space and use memory only for the pages their
    positions are written to (zeroed_in_small_pages), and attention reads keys only up to each
    query's position, so the unused slots cost neither memory nor time. Where that reservation
    is refused (a context of more bytes than the address space the system allows), the cache
    holds max_len slots, as every cache did before.

    A model with `attention_window=W` keeps min(W, max_len) slots per layer. When that is W the
    cache rolls: position p lives at slot p % W, and positions go on past `max_len` up to
    block_size (learned positions) or without end (rotary).

    The buffers hold keys and values in the model's `CompileOptions.kv_cache` format (`cache.dtype`):
    float32, float16 ("f16"), or uint16 holding bf16's bits ("bf16"); compiled code rounds each new
    key and value to it and computes attention in float32.
    """

    def __init__(self, model, max_len: int):
        cfg = model.config
        self._model = model
        self._max_len = max_len
        window = cfg.attention_window
        self._rolling = window is not None and min(window, max_len) == window
        # Where a rolling cache's positions end (None: nowhere); else max_len.
        self._limit = max_len
        if self._rolling:
            self._limit = None if cfg.pos_embedding == "rope" else cfg.block_size
        # Zeros, not empty: positions past len(cache) are masked out of attention, and a masked
        # probability (exactly 0) times a finite value stays 0, where 0 * NaN would not. (Zero
        # bits are 0.0 in every format.)
        if window is not None:
            self._keys, self._values = self._buffers(model, min(window, max_len))
        else:
            try:
                self._keys, self._values = self._buffers(model, cfg.block_size)
            except MemoryError:  # the context's address space refused: this cache's own length
                self._keys, self._values = self._buffers(model, max_len)
        self._slots = self._keys.shape[2]
        self._key_views = [self._keys[layer] for layer in range(cfg.n_layer)]
        self._value_views = [self._values[layer] for layer in range(cfg.n_layer)]
        self._length = 0
        self._claim = Claim("this KVCache is in use by another call (another thread?); use one cache per thread")

    @staticmethod
    def _buffers(model, slots: int) -> tuple[np.ndarray, np.ndarray]:
        """Zeroed key and value buffers of `slots` positions for every layer of `model`."""
        cfg = model.config
        # A row is head_size values, or for q8_0 their int8 codes then fp16 scales as bytes.
        shape = (cfg.n_layer, cfg.n_kv_head, slots, model._compiled.kv_cache_row_width())
        dtype = model._compiled.kv_cache_dtype()
        keys = zeroed_in_small_pages(shape, dtype)
        return keys, zeroed_in_small_pages(shape, dtype)

    model = ReadOnly[Any]()

    @property
    def dtype(self) -> np.dtype:
        """The buffers' dtype: float32, float16, uint16 (bf16's bits), or int8 (q8_0: each row's
        head_size codes, then its head_size / 32 fp16 scales as bytes), as CompileOptions.kv_cache says."""
        return self._keys.dtype

    @property
    def nbytes(self) -> int:
        """Bytes the key and value buffers reserve together (`slots` positions); the memory they
        use is the pages written so far."""
        return self._keys.nbytes + self._values.nbytes

    max_len = ReadOnly[int]()
    slots = ReadOnly[int](
        "Positions the buffers hold, the compiled steps' cache length: block_size (or max_len where the "
        "context's address space was refused), or for a windowed model min(window, max_len)."
    )
    rolling = ReadOnly[bool]()

    def chunks(self, count: int) -> list[int]:
        """How many of `count` new tokens each compiled step takes: a rolling cache takes tokens
        together only while they fit unwrapped (a step's tokens must not overwrite slots its own
        earlier queries still see), then one at a time."""
        if not self._rolling or self._length + count <= self._slots:
            return [count]
        first = max(self._slots - self._length, 0)
        return ([first] if first else []) + [1] * (count - first)

    def __len__(self) -> int:
        return self._length

    def reset(self) -> None:
        """Forget every position (the buffers are reused)."""
        self._claim.run(self._forget)

    def _forget(self) -> None:
        self._length = 0

    def __repr__(self) -> str:
        return f"KVCache(len={self._length}, max_len={self._max_len})"

    # -- for GPT._step ----------------------------------------------------------------------------

    def _run(self, step, ids: np.ndarray):
        """Runs `step(ids, offset, slots, keys, values)` (the compiled step, which writes the
        per-layer buffers in place) holding the cache, and counts the tokens as filled once it
        has returned: a step that raises leaves the cache as it was. One method, because decode
        calls it once per token."""
        return self._claim.run(self._run_holding, step, ids)

    def _run_holding(self, step, ids: np.ndarray):
        # Checked while holding the cache: another thread may have filled it just before.
        if self._limit is not None and self._length + len(ids) > self._limit:
            name = "max_len" if not self._rolling else "block_size"
            raise ValueError(f"KV cache is full: {self._length} + {len(ids)} tokens exceed {name}={self._limit}")
        result = step(ids, self._length, self._slots, self._key_views, self._value_views)
        self._length += len(ids)
        return result
