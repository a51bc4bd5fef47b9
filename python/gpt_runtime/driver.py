"""ctypes bindings to the CUDA driver API (libcuda.so.1, which the NVIDIA driver installs): the few
calls the runtime makes, each raising CudaError on a CUresult other than CUDA_SUCCESS. No CUDA
toolkit, no cuda-python: the driver is the one thing a GPU machine is sure to have."""

import ctypes
import functools
import os

from .errors import CudaError, NoDeviceError

# Which library to open; tests point it at a stand-in (tests/python/fake_libcuda.c) or at nothing.
LIBRARY_ENV = "GPT_RUNTIME_LIBCUDA"
DEFAULT_LIBRARY = "libcuda.so.1"

CUresult = ctypes.c_int
CUdeviceptr = ctypes.c_uint64
_handle = ctypes.c_void_p  # CUcontext, CUmodule, CUfunction, CUstream, CUgraph, CUgraphExec
_p = ctypes.POINTER
_size = ctypes.c_size_t
_uint = ctypes.c_uint
_int = ctypes.c_int

CUDA_SUCCESS = 0
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
# Capture only this thread's calls: another thread's unrelated CUDA calls neither join the graph
# nor invalidate it.
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
# Not ordered with the legacy default stream, which another library's thread may be using while
# this stream captures a graph. Every copy and memset of the runtime goes on its own stream (the
# synchronous copies may return before a pageable buffer's DMA has landed), so that ordering and a
# final cuStreamSynchronize cover them all.
CU_STREAM_NON_BLOCKING = 1
# Dynamic shared memory above this needs an opt-in per kernel (cuFuncSetAttribute).
DEFAULT_SHARED_BYTES = 48 * 1024
JIT_LOG_BYTES = 16 * 1024

# name -> (argument types, the symbols to try: the _v2 ABI first, as cuda.h maps the plain names).
_SIGNATURES = {
    "cuInit": ([_uint], ("cuInit",)),
    "cuDriverGetVersion": ([_p(_int)], ("cuDriverGetVersion",)),
    "cuDeviceGetCount": ([_p(_int)], ("cuDeviceGetCount",)),
    "cuDeviceGet": ([_p(_int), _int], ("cuDeviceGet",)),
    "cuDeviceGetAttribute": ([_p(_int), _int, _int], ("cuDeviceGetAttribute",)),
    "cuDeviceGetName": ([ctypes.c_char_p, _int, _int], ("cuDeviceGetName",)),
    "cuDevicePrimaryCtxRetain": ([_p(_handle), _int], ("cuDevicePrimaryCtxRetain",)),
    "cuDevicePrimaryCtxRelease": ([_int], ("cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease")),
    "cuCtxSetCurrent": ([_handle], ("cuCtxSetCurrent",)),
    "cuModuleLoadDataEx": (
        [_p(_handle), ctypes.c_char_p, _uint, _p(_int), _p(ctypes.c_void_p)],
        ("cuModuleLoadDataEx",),
    ),
    "cuModuleUnload": ([_handle], ("cuModuleUnload",)),
    "cuModuleGetFunction": ([_p(_handle), _handle, ctypes.c_char_p], ("cuModuleGetFunction",)),
    "cuFuncSetAttribute": ([_handle, _int, _int], ("cuFuncSetAttribute",)),
    "cuMemAlloc": ([_p(CUdeviceptr), _size], ("cuMemAlloc_v2",)),
    "cuMemFree": ([CUdeviceptr], ("cuMemFree_v2",)),
    "cuMemcpyHtoDAsync": ([CUdeviceptr, ctypes.c_void_p, _size, _handle], ("cuMemcpyHtoDAsync_v2",)),
    "cuMemcpyDtoHAsync": ([ctypes.c_void_p, CUdeviceptr, _size, _handle], ("cuMemcpyDtoHAsync_v2",)),
    "cuMemsetD8Async": ([CUdeviceptr, ctypes.c_ubyte, _size, _handle], ("cuMemsetD8Async",)),
    "cuStreamCreate": ([_p(_handle), _uint], ("cuStreamCreate",)),
    "cuStreamDestroy": ([_handle], ("cuStreamDestroy_v2", "cuStreamDestroy")),
    "cuStreamSynchronize": ([_handle], ("cuStreamSynchronize",)),
    "cuLaunchKernel": (
        [_handle, _uint, _uint, _uint, _uint, _uint, _uint, _uint, _handle, _p(ctypes.c_void_p), _p(ctypes.c_void_p)],
        ("cuLaunchKernel",),
    ),
    "cuStreamBeginCapture": ([_handle, _int], ("cuStreamBeginCapture_v2", "cuStreamBeginCapture")),
    "cuStreamEndCapture": ([_handle, _p(_handle)], ("cuStreamEndCapture",)),
    "cuGraphLaunch": ([_handle, _handle], ("cuGraphLaunch",)),
    "cuGraphExecDestroy": ([_handle], ("cuGraphExecDestroy",)),
    "cuGraphDestroy": ([_handle], ("cuGraphDestroy",)),
}
# cuGraphInstantiate changed signature in CUDA 12 (flags instead of an error log). The flags form
# exists since CUDA 11.4; the CUDA 11.0 form remains as cuGraphInstantiate_v2.
_INSTANTIATE_WITH_FLAGS = ([_p(_handle), _handle, ctypes.c_ulonglong], "cuGraphInstantiateWithFlags")
_INSTANTIATE_V2 = ([_p(_handle), _handle, _p(_handle), ctypes.c_char_p, _size], "cuGraphInstantiate_v2")


class Driver:
    """libcuda.so.1's functions as Python methods: handles are ints, errors are CudaError."""

    def __init__(self, path: str):
        try:
            self._lib = ctypes.CDLL(path)
        except OSError as error:
            raise NoDeviceError(
                f"no NVIDIA driver: {path} could not be loaded ({error}); gpt_runtime runs on a machine with "
                f"an NVIDIA GPU and its driver"
            ) from None
        self.path = path
        self._functions = {name: self._bind(argtypes, symbols) for name, (argtypes, symbols) in _SIGNATURES.items()}
        self._error_name = self._bind([CUresult, _p(ctypes.c_char_p)], ("cuGetErrorName",))
        self._error_string = self._bind([CUresult, _p(ctypes.c_char_p)], ("cuGetErrorString",))
        if hasattr(self._lib, _INSTANTIATE_WITH_FLAGS[1]):
            self._instantiate = self._bind(_INSTANTIATE_WITH_FLAGS[0], (_INSTANTIATE_WITH_FLAGS[1],))
            self._instantiate_with_flags = True
        else:
            self._instantiate = self._bind(_INSTANTIATE_V2[0], (_INSTANTIATE_V2[1],))
            self._instantiate_with_flags = False

    def _bind(self, argtypes, symbols):
        for symbol in symbols:
            if hasattr(self._lib, symbol):
                function = getattr(self._lib, symbol)
                function.argtypes = argtypes
                function.restype = CUresult
                return function
        raise NoDeviceError(f"{self.path} has none of {', '.join(symbols)}: the NVIDIA driver is too old")

    # -- errors ---------------------------------------------------------------------------------

    def describe(self, code: int) -> tuple[str, str]:
        """(CUDA_ERROR_..., its sentence), as the driver names them."""
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        if self._error_name(code, ctypes.byref(name)) != CUDA_SUCCESS or not name.value:
            return f"CUresult {code}", "unknown error"
        self._error_string(code, ctypes.byref(text))
        return name.value.decode(), (text.value or b"").decode()

    def _call(self, name: str, *args, detail: str = "") -> None:
        code = self._functions[name](*args)
        if code != CUDA_SUCCESS:
            raise CudaError(name, code, *self.describe(code), detail=detail)

    # -- device and context ---------------------------------------------------------------------

    def init(self) -> None:
        self._call("cuInit", 0)

    def driver_version(self) -> int:
        version = _int()
        self._call("cuDriverGetVersion", ctypes.byref(version))
        return version.value

    def device_count(self) -> int:
        count = _int()
        self._call("cuDeviceGetCount", ctypes.byref(count))
        return count.value

    def device(self, ordinal: int) -> int:
        device = _int()
        self._call("cuDeviceGet", ctypes.byref(device), ordinal)
        return device.value

    def compute_capability(self, device: int) -> tuple[int, int]:
        major, minor = _int(), _int()
        self._call("cuDeviceGetAttribute", ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
        self._call("cuDeviceGetAttribute", ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
        return major.value, minor.value

    def device_name(self, device: int) -> str:
        name = ctypes.create_string_buffer(256)
        self._call("cuDeviceGetName", name, len(name), device)
        return name.value.decode(errors="replace")

    def retain_primary_context(self, device: int) -> int:
        context = _handle()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
        return context.value

    def release_primary_context(self, device: int) -> None:
        self._call("cuDevicePrimaryCtxRelease", device)

    def set_current(self, context: int) -> None:
        self._call("cuCtxSetCurrent", context)

    # -- modules --------------------------------------------------------------------------------

    def load_module(self, ptx: str) -> int:
        """Loads PTX text (the driver JIT-compiles it for this GPU); a refusal carries ptxas' log."""
        module = _handle()
        log = ctypes.create_string_buffer(JIT_LOG_BYTES)
        options = (_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        values = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(JIT_LOG_BYTES))
        code = self._functions["cuModuleLoadDataEx"](
            ctypes.byref(module), ptx.encode("ascii") + b"\0", 2, options, values
        )
        if code != CUDA_SUCCESS:
            message = log.value.decode(errors="replace").strip()
            raise CudaError("cuModuleLoadDataEx", code, *self.describe(code), detail=message and f"ptxas: {message}")
        return module.value

    def unload_module(self, module: int) -> None:
        self._call("cuModuleUnload", module)

    def function(self, module: int, name: str) -> int:
        function = _handle()
        self._call("cuModuleGetFunction", ctypes.byref(function), module, name.encode("ascii"), detail=f"kernel {name}")
        return function.value

    def allow_shared_bytes(self, function: int, size: int) -> None:
        self._call("cuFuncSetAttribute", function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, size)

    # -- memory ---------------------------------------------------------------------------------

    def alloc(self, size: int, what: str = "") -> int:
        pointer = CUdeviceptr()
        self._call("cuMemAlloc", ctypes.byref(pointer), size, detail=f"allocating {size} bytes {what}".rstrip())
        return pointer.value

    def free(self, pointer: int) -> None:
        self._call("cuMemFree", pointer)

    def copy_to_device_async(self, pointer: int, host: int, size: int, stream: int) -> None:
        self._call("cuMemcpyHtoDAsync", pointer, host, size, stream)

    def copy_to_host_async(self, host: int, pointer: int, size: int, stream: int) -> None:
        self._call("cuMemcpyDtoHAsync", host, pointer, size, stream)

    def memset_async(self, pointer: int, byte: int, size: int, stream: int) -> None:
        self._call("cuMemsetD8Async", pointer, byte, size, stream)

    # -- streams, launches, graphs --------------------------------------------------------------

    def create_stream(self) -> int:
        stream = _handle()
        self._call("cuStreamCreate", ctypes.byref(stream), CU_STREAM_NON_BLOCKING)
        return stream.value

    def destroy_stream(self, stream: int) -> None:
        self._call("cuStreamDestroy", stream)

    def synchronize(self, stream: int) -> None:
        self._call("cuStreamSynchronize", stream)

    def launch(self, function, grid, block, shared_bytes: int, stream: int, params, kernel: str = "") -> None:
        """`params`: a ctypes array of void*, each pointing at one argument's value."""
        self._call("cuLaunchKernel", function, *grid, *block, shared_bytes, stream, params, None, detail=kernel)

    def begin_capture(self, stream: int) -> None:
        self._call("cuStreamBeginCapture", stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)

    def end_capture(self, stream: int) -> int:
        graph = _handle()
        self._call("cuStreamEndCapture", stream, ctypes.byref(graph))
        return graph.value

    def instantiate(self, graph: int) -> int:
        executable = _handle()
        if self._instantiate_with_flags:
            code = self._instantiate(ctypes.byref(executable), graph, 0)
        else:
            code = self._instantiate(ctypes.byref(executable), graph, None, None, 0)
        if code != CUDA_SUCCESS:
            name = "cuGraphInstantiateWithFlags" if self._instantiate_with_flags else "cuGraphInstantiate_v2"
            raise CudaError(name, code, *self.describe(code))
        return executable.value

    def launch_graph(self, executable: int, stream: int) -> None:
        self._call("cuGraphLaunch", executable, stream)

    def destroy_graph_exec(self, executable: int) -> None:
        self._call("cuGraphExecDestroy", executable)

    def destroy_graph(self, graph: int) -> None:
        self._call("cuGraphDestroy", graph)


def library_path() -> str:
    return os.environ.get(LIBRARY_ENV) or DEFAULT_LIBRARY


@functools.cache
def _driver_at(path: str) -> Driver:
    return Driver(path)


def open_driver() -> Driver:
    """The driver, initialized; NoDeviceError when this machine has none, or no GPU. cuInit is
    called on every open (it returns at once once done), so the answer is the machine's now."""
    path = library_path()
    driver = _driver_at(path)
    try:
        driver.init()
        count = driver.device_count()
    except CudaError as error:
        raise NoDeviceError(f"the NVIDIA driver ({path}) found no usable GPU: {error}") from None
    if count == 0:
        raise NoDeviceError(f"the NVIDIA driver ({path}) reports no GPU")
    return driver
