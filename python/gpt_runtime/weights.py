"""weights.safetensors, read without the safetensors package: an 8-byte little-endian header length,
a JSON header {name: {dtype, shape, data_offsets}}, then the raw bytes. Read by hand because numpy
has no bfloat16 (safetensors' numpy API refuses BF16 tensors), and the runtime only copies bytes.
The file may come from a stranger: it is opened only as a regular file, its header is bounded in
size and nesting, and its tensors must tile the data exactly, as the safetensors reference requires."""

import dataclasses
import math
import mmap
import os

import numpy as np

from .artifact_files import open_regular, parse_json
from .errors import ArtifactError
from .manifest import Manifest

# The header names each tensor in about 100 bytes: this bound is 160,000 tensors, far more than
# any model has, and keeps a hostile header from making json.loads take the machine's memory.
MAX_HEADER_BYTES = 16 * 2**20
# Far more dimensions than any tensor has (safetensors itself sets no bound).
MAX_RANK = 64
ITEM_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
}
# How tensor() shows each dtype in numpy: BF16 as its raw bits (uint16), F8 as raw bytes.
NUMPY_DTYPES = {
    "BOOL": np.bool_,
    "U8": np.uint8,
    "I8": np.int8,
    "F8_E4M3": np.uint8,
    "F8_E5M2": np.uint8,
    "U16": np.uint16,
    "I16": np.int16,
    "F16": np.float16,
    "BF16": np.uint16,
    "U32": np.uint32,
    "I32": np.int32,
    "F32": np.float32,
    "U64": np.uint64,
    "I64": np.int64,
    "F64": np.float64,
}
# A weight buffer's dtype (manifest) -> the safetensors dtype its tensor must have.
BUFFER_DTYPES = {"f32": "F32", "bf16": "BF16"}


@dataclasses.dataclass(frozen=True)
class TensorEntry:
    dtype: str
    shape: tuple[int, ...]
    start: int  # byte offsets in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def read_header(path: str) -> dict[str, TensorEntry]:
    """Every tensor's dtype, shape and place in the file, checked against the file's size; raises
    ArtifactError naming the file and the tensor."""
    try:
        fd, file_size = open_regular(path, None, "weights file")
    except FileNotFoundError:
        raise ArtifactError(f"{path}: not a readable safetensors file: missing") from None
    try:
        with os.fdopen(fd, "rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise ArtifactError(f"{path}: {file_size} bytes, too short for a safetensors header")
            length = int.from_bytes(prefix, "little")
            if length > MAX_HEADER_BYTES:
                raise ArtifactError(
                    f"{path}: header length {length}, more than a safetensors header can have ({MAX_HEADER_BYTES})"
                )
            if 8 + length > file_size:
                raise ArtifactError(f"{path}: header length {length} does not fit in the file ({file_size} bytes)")
            text = f.read(length)
    except OSError as error:
        raise ArtifactError(f"{path}: not a readable safetensors file: {error}") from None
    header = parse_json(text, path, "safetensors header", "not a readable safetensors file")
    if not isinstance(header, dict):
        raise ArtifactError(f"{path}: the safetensors header is not a JSON object")
    data_start, data_size = 8 + length, file_size - 8 - length
    tensors = {
        name: _entry(path, name, value, data_start, data_size)
        for name, value in header.items()
        if name != "__metadata__"
    }
    _check_tiling(path, tensors, data_start, data_size)
    return tensors


def _check_tiling(path: str, tensors: dict[str, "TensorEntry"], data_start: int, data_size: int) -> None:
    """The tensors cover the data bytes exactly, one after another (the safetensors reference
    refuses gaps, overlaps and unclaimed bytes): so the file is no larger than what it declares."""
    end = data_start
    for name, entry in sorted(tensors.items(), key=lambda item: (item[1].start, item[1].end)):
        if entry.start != end:
            raise ArtifactError(
                f"{path}: tensor {name!r} starts at data byte {entry.start - data_start}, but the tensors before "
                f"it end at {end - data_start} (the tensors must tile the data, without gaps or overlaps)"
            )
        end = entry.end
    if end != data_start + data_size:
        raise ArtifactError(
            f"{path}: the tensors declare {end - data_start} data bytes, but the file has {data_size} after its header"
        )


def _entry(path: str, name: str, value, data_start: int, data_size: int) -> TensorEntry:
    def bad(problem: str) -> ArtifactError:
        return ArtifactError(f"{path}: tensor {name!r}: {problem}")

    if not isinstance(value, dict):
        raise bad("its header entry is not an object")
    dtype, shape, offsets = value.get("dtype"), value.get("shape"), value.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in ITEM_BYTES:  # a list or object is no key to look up
        raise bad(f"unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise bad(f"shape {shape!r} is not a list of sizes")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= data_size
    ):
        raise bad(f"data_offsets {offsets!r} are not a range inside the file's {data_size} data bytes")
    if len(shape) > MAX_RANK or any(d >= 2**63 for d in shape):
        # So that the product below stays a few thousand bits, whatever the header says.
        raise bad(f"a shape of {len(shape)} dimensions, or a size of 2^63 or more, is not a tensor's shape")
    expected = math.prod(shape) * ITEM_BYTES[dtype]
    if offsets[1] - offsets[0] != expected:
        raise bad(f"{offsets[1] - offsets[0]} bytes, but a {dtype} tensor of shape {shape} has {expected}")
    return TensorEntry(dtype, tuple(shape), data_start + offsets[0], data_start + offsets[1])


def check_weights(manifest: Manifest, tensors: dict[str, TensorEntry]) -> None:
    """Each weight buffer has its tensor in the file, of the buffer's dtype, bytes and shape."""
    path = manifest.weights_path
    for buffer in manifest.buffers:
        if buffer.role != "weight":
            continue
        entry = tensors.get(buffer.name)
        if entry is None:
            raise ArtifactError(f"{path}: no tensor {buffer.name!r} (weight buffer {buffer.index} of manifest.json)")
        dtype = buffer.dtype or manifest.weights_dtype
        if entry.dtype != BUFFER_DTYPES[dtype]:
            raise ArtifactError(
                f"{path}: tensor {buffer.name!r} is {entry.dtype}, but its buffer {buffer.index} is {dtype} "
                f"(stored as {BUFFER_DTYPES[dtype]})"
            )
        if entry.nbytes != buffer.bytes:
            raise ArtifactError(
                f"{path}: tensor {buffer.name!r} has {entry.nbytes} bytes, but its buffer {buffer.index} has "
                f"{buffer.bytes}"
            )
        if buffer.shape is not None and entry.shape != buffer.shape:
            raise ArtifactError(
                f"{path}: tensor {buffer.name!r} has shape {list(entry.shape)}, but its buffer {buffer.index} "
                f"has shape {list(buffer.shape)}"
            )


class WeightsFile:
    """The file mapped into memory: tensors are views of the mapping, copied to the device from
    there without a second copy in host memory. Close it (or use `with`) once no view is held."""

    def __init__(self, path: str, tensors: dict[str, TensorEntry] | None = None):
        self.path = path
        self.tensors = read_header(path) if tensors is None else tensors
        self._map = None
        fd, size = open_regular(path, None, "weights file")
        try:
            # mmap refuses an empty file; a file of only a header has no bytes to view.
            if size:
                self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        if self.tensors and (self._map is None or max(entry.end for entry in self.tensors.values()) > len(self._map)):
            self.close()
            raise ArtifactError(f"{path}: shorter than its header says (the file changed after it was read)")

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes, as uint8, a read-only view of the file: drop it before close()."""
        entry = self.tensors[name]
        if entry.nbytes == 0:
            return np.zeros(0, np.uint8)
        return np.frombuffer(self._map, np.uint8, entry.nbytes, entry.start)

    def tensor(self, name: str) -> np.ndarray:
        """A copy of the tensor in its shape, BF16 as its raw bits (uint16), since numpy has no
        bfloat16. A copy, so that it outlives the mapping."""
        entry = self.tensors[name]
        return self.raw(name).view(NUMPY_DTYPES[entry.dtype]).reshape(entry.shape).copy()

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                # A view is still alive (an exception in flight holds the frame that made it): the
                # mapping closes with the last view instead of hiding that exception.
                pass
            self._map = None

    def __enter__(self) -> "WeightsFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
