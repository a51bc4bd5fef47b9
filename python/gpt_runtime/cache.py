"""Cache: one sequence's KV cache on the GPU (the manifest's cache-role buffers, its own set) and
the step programs bound to it, whose CUDA graphs have its addresses baked in."""

import weakref
from typing import Any

from .program import BoundProgram
from .read_only import ReadOnly


class Cache:
    """Keys and values of every layer for up to `max_len` positions. Made by `model.new_cache()`;
    belongs to that model. `len(cache)` is the number of positions filled; a call that raises
    leaves it as it was. Its device memory is freed when it is garbage-collected, or by close()."""

    def __init__(self, model, max_len: int):
        self._model = model
        self._max_len = max_len
        self._length = 0
        device, manifest = model._device, model._manifest
        self._pointers: list[int | None] = list(model._pointers)
        self._bound: dict[int, BoundProgram] = {}
        allocated = []
        # Freed by whichever comes first: close(), garbage collection, or the model's close().
        self._finalizer = weakref.finalize(self, _release, device, allocated, self._bound)
        for buffer in manifest.buffers:
            if buffer.role == "cache":
                pointer = device.alloc(buffer.bytes, f"for cache buffer {buffer.name!r}")
                allocated.append(pointer)
                self._pointers[buffer.index] = pointer
                # Zeros, not garbage: positions past len(cache) are masked out of attention, and a
                # masked probability (exactly 0) times a finite value stays 0, where 0 * NaN would not.
                device.driver.memset_async(pointer, 0, buffer.bytes, device.stream)
        device.driver.synchronize(device.stream)

    model = ReadOnly[Any]()
    max_len = ReadOnly[int]()

    def __len__(self) -> int:
        return self._length

    def reset(self) -> None:
        """Forget every position (the buffers, and the graphs bound to them, are reused)."""
        self._length = 0

    def close(self) -> None:
        """Frees the cache's device memory now; the cache cannot be used after."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __repr__(self) -> str:
        return f"gpt_runtime.Cache(len={self._length}, max_len={self._max_len})"

    # -- for Model --------------------------------------------------------------------------------

    def _program(self, program, graphs: bool) -> BoundProgram:
        bound = self._bound.get(program.tokens)
        if bound is None:
            bound = self._bound[program.tokens] = BoundProgram(self._model._device, program, self._pointers, graphs)
        return bound


def _release(device, pointers: list[int], bound: dict[int, BoundProgram]) -> None:
    # A finalizer: the model may be closed already (then the device freed everything), and an
    # error here has no caller to go to.
    if device.closed:
        return
    try:
        device.make_current()
        for program in bound.values():
            program.close()
        for pointer in pointers:
            device.free(pointer)
    except Exception:
        pass
    bound.clear()
    pointers.clear()
