"""A manifest program bound to device addresses: its kernel parameters built once, its inputs
written and its logits read back around each run, its launches recorded into a CUDA graph on the
first run and replayed after (the addresses are baked into the graph, so a step program is bound
once per cache)."""

import ctypes
import os
import time

import numpy as np

from .device import Device
from .manifest import I64, Place, Program

# GPT_RUNTIME_GRAPHS=0 launches every kernel from Python on every run: slower, but a failing
# kernel's error names it, where a graph's error names cuGraphLaunch.
GRAPHS_ENV = "GPT_RUNTIME_GRAPHS"


def graphs_default() -> bool:
    return os.environ.get(GRAPHS_ENV, "1") != "0"


class _Launch:
    """One kernel launch with its parameter block: a void* per argument, pointing at the value."""

    def __init__(self, function: int, kernel: str, grid, block, shared_bytes: int, values: list):
        self.function, self.kernel = function, kernel
        self.grid, self.block, self.shared_bytes = grid, block, shared_bytes
        self.values = values  # ctypes scalars, kept alive as long as the pointers to them
        self.params = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])


class _InputSegment:
    """A program's inputs in one buffer, written by one copy from their first byte to their last.
    An input buffer holds only what the host writes (docs/GPU.md), so the gaps between the inputs
    are written too (zeros): one copy per run instead of one per input, on decode's path."""

    def __init__(self, address: int, places: list[tuple[str, int, int]]):
        first = min(offset for _, offset, _ in places)
        self.address = address + first
        # (input name, first element, element count) in the host array
        self.fields = [(name, (offset - first) // I64, length) for name, offset, length in places]
        self.host = np.zeros(max((offset - first) // I64 + length for _, offset, length in places), np.int64)


class BoundProgram:
    """A program with the device addresses of its buffers (a step program's cache buffers are one
    cache's), ready to run again and again."""

    def __init__(self, device: Device, program: Program, pointers: list[int | None], graphs: bool):
        self._device = device
        self.program = program
        self._graphs = graphs
        self._executable: int | None = None
        self._launches = [
            _Launch(
                device.functions[launch.kernel],
                launch.kernel,
                launch.grid,
                launch.block,
                launch.shared_bytes,
                [
                    ctypes.c_uint64(pointers[a.buffer] + a.offset) if isinstance(a, Place) else ctypes.c_int64(a)
                    for a in launch.args
                ],
            )
            for launch in program.launches
        ]
        self._segments = self._segments_of(program, pointers)
        logits = program.logits
        self._logits_address = pointers[logits.buffer] + logits.offset
        self._row_stride = logits.row_stride

    @staticmethod
    def _segments_of(program: Program, pointers) -> list[_InputSegment]:
        by_buffer: dict[int, list[tuple[str, int, int]]] = {}
        for name, place in program.inputs.items():
            length = program.tokens if name in ("token_ids", "positions") else 1
            by_buffer.setdefault(place.buffer, []).append((name, place.offset, length))
        return [_InputSegment(pointers[buffer], places) for buffer, places in sorted(by_buffer.items())]

    def run(self, inputs: dict[str, np.ndarray], rows: int, columns: int) -> tuple[np.ndarray, float]:
        """Writes `inputs` (each padded to its length), runs the program and returns the first
        `rows` x `columns` of its logits, with the seconds spent capturing the graph (0 after the
        first run). The device's context must be current on this thread."""
        driver, stream = self._device.driver, self._device.stream
        for segment in self._segments:
            for name, first, count in segment.fields:
                segment.host[first : first + count] = inputs[name]
            driver.copy_to_device_async(segment.address, segment.host.ctypes.data, segment.host.nbytes, stream)
        capture_seconds = 0.0
        if not self._graphs:
            self._launch_all()
        else:
            if self._executable is None:
                start = time.perf_counter()
                self._capture()
                capture_seconds = time.perf_counter() - start
            driver.launch_graph(self._executable, stream)
        # Several rows: one copy of whole rows, cut to `columns` after. One row: only its columns.
        logits = np.empty((rows, self._row_stride if rows > 1 else columns), np.float32)
        driver.copy_to_host_async(logits.ctypes.data, self._logits_address, logits.nbytes, stream)
        driver.synchronize(stream)
        return logits[:, :columns], capture_seconds

    def _launch_all(self) -> None:
        driver, stream = self._device.driver, self._device.stream
        for launch in self._launches:
            driver.launch(
                launch.function, launch.grid, launch.block, launch.shared_bytes, stream, launch.params, launch.kernel
            )

    def _capture(self) -> None:
        driver, stream = self._device.driver, self._device.stream
        driver.begin_capture(stream)
        try:
            self._launch_all()
        except BaseException:
            # End the capture, or the stream stays unusable; the launch's error is the one to see.
            try:
                driver.destroy_graph(driver.end_capture(stream))
            except Exception:
                pass
            raise
        graph = driver.end_capture(stream)
        try:
            self._executable = self._device.adopt_graph(driver.instantiate(graph))
        finally:
            driver.destroy_graph(graph)  # the executable graph is a copy

    def close(self) -> None:
        if self._executable is not None:
            self._device.destroy_graph(self._executable)
            self._executable = None
