"""One GPU, ready for an artifact: the driver and device checked against it, the primary context,
one stream, the PTX module and its kernels; and the owner of every allocation and CUDA graph made
on it, so that close() frees whatever is left."""

import time

from .compat import check_compute_capability, check_driver_version
from .driver import DEFAULT_SHARED_BYTES, open_driver
from .errors import NoDeviceError
from .manifest import Manifest


class Device:
    def __init__(self, manifest: Manifest, ordinal: int = 0):
        if isinstance(ordinal, bool) or not isinstance(ordinal, int) or ordinal < 0:
            raise ValueError(f"device must be a GPU ordinal (an int >= 0), got {ordinal!r}")
        self.driver = driver = open_driver()
        self.driver_version = driver.driver_version()
        check_driver_version(manifest.ptx_version, self.driver_version)
        count = driver.device_count()
        if ordinal >= count:
            raise NoDeviceError(f"there is no GPU {ordinal}: the driver reports {count} GPU(s)")
        self._device = driver.device(ordinal)
        self.name = driver.device_name(self._device)
        self.compute_capability = driver.compute_capability(self._device)
        check_compute_capability(manifest.chip, self.compute_capability, f"GPU {ordinal} ({self.name})")
        self._allocations: set[int] = set()
        self._graphs: set[int] = set()
        self._stream = self._module = None
        self.closed = False
        self.context = driver.retain_primary_context(self._device)
        try:
            driver.set_current(self.context)
            self.stream = self._stream = driver.create_stream()
            start = time.perf_counter()
            self._module = driver.load_module(manifest.ptx)
            self.functions = self._kernels(manifest)
            # The driver JIT-compiles the PTX here: seconds for a large module, once per load.
            self.jit_seconds = time.perf_counter() - start
        except BaseException:
            self.close()
            raise

    def _kernels(self, manifest: Manifest) -> dict[str, int]:
        shared = {}
        for program in manifest.programs:
            for launch in program.launches:
                shared[launch.kernel] = max(shared.get(launch.kernel, 0), launch.shared_bytes)
        functions = {}
        for kernel, most in shared.items():
            functions[kernel] = self.driver.function(self._module, kernel)
            if most > DEFAULT_SHARED_BYTES:  # past 48 KiB a kernel must opt in
                self.driver.allow_shared_bytes(functions[kernel], most)
        return functions

    def make_current(self) -> None:
        """The context is current per thread: a call from a new thread needs it made current."""
        self.driver.set_current(self.context)

    # -- what the device owns -------------------------------------------------------------------

    def alloc(self, size: int, what: str) -> int:
        pointer = self.driver.alloc(size, what)
        self._allocations.add(pointer)
        return pointer

    def free(self, pointer: int) -> None:
        self._release(self._allocations, pointer, self.driver.free)

    def adopt_graph(self, executable: int) -> int:
        self._graphs.add(executable)
        return executable

    def destroy_graph(self, executable: int) -> None:
        self._release(self._graphs, executable, self.driver.destroy_graph_exec)

    def _release(self, owned: set[int], handle: int, destroy) -> None:
        # Once closed, close() has destroyed every handle; a handle not owned here is not ours to destroy.
        if not self.closed and handle in owned:
            owned.discard(handle)
            destroy(handle)

    def close(self) -> None:
        """Frees everything made on the device, then lets go of the context. Idempotent."""
        if self.closed:
            return
        self.closed = True
        driver = self.driver
        driver.set_current(self.context)
        for executable in self._graphs:
            driver.destroy_graph_exec(executable)
        for pointer in self._allocations:
            driver.free(pointer)
        self._graphs.clear()
        self._allocations.clear()
        if self._module is not None:
            driver.unload_module(self._module)
        if self._stream is not None:
            driver.destroy_stream(self._stream)
        driver.release_primary_context(self._device)
