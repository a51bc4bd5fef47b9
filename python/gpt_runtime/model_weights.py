"""Weights from a model file at load, for an artifact of programs alone (format version 2, exported
with `--gpu_weights none`): each weight buffer's recipe in the manifest names the tensors of a GGUF
file (`gguf`) or of a HF checkpoint directory (`hf`) that make it, so the runtime needs no knowledge
of architectures. Read with numpy alone (the `gguf` package only to dequantize a quantized GGUF
tensor), every tensor's shape and the file's config are checked against the manifest before the
driver is touched; a mismatch is a ModelFileError naming the file, the tensor or key, and what the
artifact expects against what the file has.

The model file may come from a stranger too: files are opened by artifact_files' rules (regular
files only, bounded JSON), a HF directory's files must stay inside it (or in the Hugging Face hub
cache's blobs, where a snapshot's links lead), and the GGUF header is walked with every count and
length checked against the file's size before anything is allocated from it."""

import math
import mmap
import os
import struct
from collections.abc import Callable, Iterator

import numpy as np

from .artifact_files import open_regular, parse_json, read_bytes
from .errors import ArtifactError, ModelFileError
from .manifest import Buffer, Manifest
from .weights import WeightsFile, read_header

# config.json, tokenizer_config.json and the safetensors index: kilobytes; the largest real ones a
# few MB (gpt.model_files' bound).
MAX_CONFIG_BYTES = 64 * 2**20
GGUF_MAGIC = b"GGUF"
# GGUF value types (gguf's GGUFValueType): scalars by their little-endian struct format.
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
# Arrays of arrays: real files have none; the bound keeps a hostile header from nesting without end.
_GGUF_MAX_ARRAY_DEPTH = 4
_GGUF_MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
_GGUF_DEFAULT_ALIGNMENT = 32
# ggml types numpy reads itself: (name, numpy dtype of the stored elements). Others (the block
# formats: Q8_0, Q4_0, Q4_K, ...) are dequantized by the gguf package.
_GGML_PLAIN = {0: ("F32", np.float32), 1: ("F16", np.float16), 30: ("BF16", np.uint16)}
# The keys that name a file's model family (GGUF, HF config.json).
_ARCHITECTURE_KEYS = ("general.architecture", "model_type")
# HF tensor dtypes read as floats (others are no model weights).
_HF_FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, rounded to nearest even, as gpt's exporter rounds (gpu_export.bf16_bits)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def unpermute_rows(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Undoes llama.cpp's q/k row permutation (convert_hf_to_gguf.py, LlamaModel.permute): within
    each head, stored row 2j + t holds HF row t * head_size/2 + j."""
    half = weight.shape[0] // n_head // 2
    return weight.reshape(n_head, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


# -- GGUF ------------------------------------------------------------------------------------------


class GgufModel:
    """A GGUF file's metadata and tensors, read from a memory map. `metadata` holds scalars and
    strings as Python values and numeric arrays as numpy arrays; arrays of strings (the
    vocabulary) are walked but not kept."""

    kind = "GGUF file"

    def __init__(self, path: str):
        self.path = path
        fd, size = open_regular(path, None, "GGUF file", ModelFileError)
        try:
            if size < 24:
                raise ModelFileError(f"{path}: {size} bytes, too short for a GGUF header")
            self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self._size = size
        try:
            self._read_header()
        except BaseException:
            self.close()
            raise

    def _fail(self, problem: str):
        raise ModelFileError(f"{self.path}: {problem}")

    def _take(self, fmt: str, what: str):
        size = struct.calcsize("<" + fmt)
        if self._at + size > self._size:
            self._fail(f"ends inside {what} (at byte {self._at}): not a whole GGUF file")
        value = struct.unpack_from("<" + fmt, self._map, self._at)
        self._at += size
        return value[0] if len(value) == 1 else value

    def _string(self, what: str) -> str:
        length = self._take("Q", what)
        if length > self._size - self._at:
            self._fail(f"{what} is {length} bytes long, past the end of the file")
        data = self._map[self._at : self._at + length]
        self._at += length
        return data.decode("utf-8", errors="replace")

    def _skip_string(self, what: str) -> None:
        length = self._take("Q", what)
        if length > self._size - self._at:
            self._fail(f"{what} is {length} bytes long, past the end of the file")
        self._at += length

    def _value(self, kind: int, what: str, depth: int = 0):
        if kind in _GGUF_SCALARS:
            return self._take(_GGUF_SCALARS[kind], what)
        if kind == _GGUF_STRING:
            return self._string(what)
        if kind != _GGUF_ARRAY:
            self._fail(f"{what} has value type {kind}, which GGUF does not define")
        if depth >= _GGUF_MAX_ARRAY_DEPTH:
            self._fail(f"{what} nests arrays deeper than {_GGUF_MAX_ARRAY_DEPTH} levels")
        item, count = self._take("I", what), self._take("Q", what)
        if item in _GGUF_SCALARS:
            width = struct.calcsize("<" + _GGUF_SCALARS[item])
            if count > (self._size - self._at) // width:
                self._fail(f"{what} declares {count} elements, more than the rest of the file holds")
            dtype = np.dtype("<" + _GGUF_SCALARS[item].replace("?", "b1"))
            values = np.frombuffer(self._map, dtype, count, self._at).copy()
            self._at += count * width
            return values
        # Strings and arrays: at least 8 bytes each (a length or a type and count).
        if count > (self._size - self._at) // 8:
            self._fail(f"{what} declares {count} elements, more than the rest of the file holds")
        for _ in range(count):
            if item == _GGUF_STRING:
                self._skip_string(what)
            else:
                self._value(item, what, depth + 1)
        return None

    def _read_header(self) -> None:
        self._at = 0
        if self._map[:4] != GGUF_MAGIC:
            self._fail(f"not a GGUF file (it starts with {bytes(self._map[:4])!r}, not {GGUF_MAGIC!r})")
        self._at = 4
        version = self._take("I", "the version")
        if version not in (2, 3):
            self._fail(f"GGUF version {version} is not supported (2 and 3 are)")
        n_tensors, n_kv = self._take("Q", "the tensor count"), self._take("Q", "the key count")
        # A key is at least 12 bytes (length, type), a tensor's entry at least 24 (length, dims, type, offset).
        if n_kv > self._size // 12 or n_tensors > self._size // 24:
            self._fail(f"declares {n_kv} keys and {n_tensors} tensors, more than its {self._size} bytes hold")
        self.metadata = {}
        for index in range(n_kv):
            key = self._string(f"key {index}")
            self.metadata[key] = self._value(self._take("I", f"key {key!r}"), f"key {key!r}")
        entries = []
        for index in range(n_tensors):
            name = self._string(f"tensor {index}'s name")
            dims = self._take("I", f"tensor {name!r}")
            if dims > _GGUF_MAX_DIMS:
                self._fail(f"tensor {name!r} has {dims} dimensions, more than ggml's {_GGUF_MAX_DIMS}")
            ne = [self._take("Q", f"tensor {name!r}") for _ in range(dims)]
            entries.append((name, ne, self._take("I", f"tensor {name!r}"), self._take("Q", f"tensor {name!r}")))
        alignment = self.metadata.get("general.alignment", _GGUF_DEFAULT_ALIGNMENT)
        if type(alignment) is not int or alignment < 1 or alignment & (alignment - 1):
            self._fail(f"general.alignment {alignment!r} is not a power of two")
        data_start = -(-self._at // alignment) * alignment
        self.tensors: dict[str, tuple[int, tuple[int, ...], int, int]] = {}
        for name, ne, kind, offset in entries:
            if name in self.tensors:
                self._fail(f"tensor {name!r} is listed twice")
            shape = tuple(reversed(ne))  # numpy's order: ne[0] is the innermost dimension
            nbytes = self._tensor_bytes(name, kind, ne)
            start = data_start + offset
            if offset % alignment or start + nbytes > self._size:
                self._fail(
                    f"tensor {name!r}: {nbytes} bytes at data offset {offset} lie outside the file's "
                    f"{self._size} bytes (or off its {alignment}-byte alignment)"
                )
            self.tensors[name] = (kind, shape, start, nbytes)

    def _tensor_bytes(self, name: str, kind: int, ne: list[int]) -> int:
        if kind in _GGML_PLAIN:
            block, block_bytes = 1, np.dtype(_GGML_PLAIN[kind][1]).itemsize
        else:
            sizes = _gguf_package(self.path, name, kind).GGML_QUANT_SIZES
            known = {int(k): v for k, v in sizes.items()}
            if kind not in known:
                self._fail(f"tensor {name!r} has ggml type {kind}, which the gguf package does not know")
            block, block_bytes = known[kind]
        if ne and ne[0] % block:
            self._fail(f"tensor {name!r}: rows of {ne[0]} values are no whole number of {block}-value blocks")
        return math.prod(ne) // block * block_bytes

    def names(self) -> set[str]:
        return set(self.tensors)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name][1]

    def array(self, name: str) -> np.ndarray:
        """The tensor as float32 in its numpy shape (a copy)."""
        kind, shape, start, nbytes = self.tensors[name]
        raw = np.frombuffer(self._map, np.uint8, nbytes, start)
        if kind in _GGML_PLAIN:
            return raw.view(_GGML_PLAIN[kind][1]).reshape(shape).astype(np.float32)
        gguf = _gguf_package(self.path, name, kind)
        rows = raw.reshape(*shape[:-1], -1) if shape else raw
        return np.asarray(gguf.quants.dequantize(rows, gguf.GGMLQuantizationType(kind)), np.float32).reshape(shape)

    def value(self, key: str):
        """(present, value) of a metadata key."""
        return (key in self.metadata), self.metadata.get(key)

    def close(self) -> None:
        if getattr(self, "_map", None) is not None:
            try:
                self._map.close()
            except BufferError:  # a view is still alive: the mapping closes with it
                pass
            self._map = None


def _gguf_package(path: str, name: str, kind: int):
    try:
        import gguf
    except ImportError:
        raise ModelFileError(
            f"{path}: tensor {name!r} is quantized (ggml type {kind}); reading it needs the gguf package "
            "(pip install gguf)"
        ) from None
    return gguf


# -- HF checkpoint directories -------------------------------------------------------------------


def allowed_roots(directory: str) -> list[str]:
    """The real directory, and its hub cache's blobs folder when it is a snapshot
    (.../models--org--name/snapshots/<revision>, whose files link to ../../blobs/<hash>)."""
    root = os.path.realpath(directory)
    roots, ancestor = [root], root
    while os.path.dirname(ancestor) != ancestor:
        parent = os.path.dirname(ancestor)
        if os.path.basename(ancestor) == "snapshots" and os.path.basename(parent).startswith("models--"):
            roots.append(os.path.join(parent, "blobs"))
            break
        ancestor = parent
    return roots


def model_file_inside(directory: str, name: str) -> str | None:
    """The path of `name` in the model directory, None when absent; ModelFileError when a link
    leads outside it (and outside its hub cache)."""
    path = os.path.join(directory, name)
    if not os.path.lexists(path):
        return None
    real = os.path.realpath(path)
    if not any(os.path.commonpath([root, real]) == root for root in allowed_roots(directory)):
        raise ModelFileError(f"{path}: leads outside the model directory (to {real}); refused")
    if not os.path.exists(real):
        raise ModelFileError(f"{path}: a link to nothing")
    return path


def read_json_file(path: str, what: str) -> dict:
    value = parse_json(read_bytes(path, MAX_CONFIG_BYTES, what, ModelFileError), path, what, error=ModelFileError)
    if not isinstance(value, dict):
        raise ModelFileError(f"{path}: not a JSON object")
    return value


def shard_names(
    weight_map, index_path: str, error: type[Exception] = ModelFileError, quoted: Callable[[str], str] = repr
) -> Iterator[str]:
    """The shards a model.safetensors.index.json's `weight_map` (tensor name -> file name) lists, each
    once, in order; checked one at a time as they are taken: `error` naming `index_path` when the map
    is not an object of tensor name to file name, or a shard is no file name in the checkpoint's
    directory (a path, "..", a NUL), the name as `quoted` writes it. gpt.hf_checkpoint reads its
    indexes through it too."""
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise error(f"{index_path}: weight_map must be an object of tensor name to file name")
    for name in dict.fromkeys(weight_map.values()):
        if os.path.basename(name) != name or name in ("", ".", "..") or "\0" in name:
            raise error(f"{index_path}: shard {quoted(name)} is not a file name in the checkpoint's directory")
        yield name


class HfModel:
    """A HF checkpoint directory: config.json and the tensors of model.safetensors or of the shards
    model.safetensors.index.json lists, read by gpt_runtime.weights' safetensors reader."""

    kind = "HF directory"

    def __init__(self, directory: str):
        self.path = directory
        config = model_file_inside(directory, "config.json")
        if config is None:
            raise ModelFileError(f"{directory}: not a HF checkpoint directory: config.json is missing")
        self.config = read_json_file(config, "config.json")
        self._files: list[WeightsFile] = []
        self.tensors: dict[str, tuple[WeightsFile, str]] = {}
        try:
            for file in self._safetensors_files():
                try:
                    weights = WeightsFile(file, read_header(file))
                except ArtifactError as error:  # the runtime's safetensors reader speaks of artifacts
                    raise ModelFileError(str(error)) from None
                self._files.append(weights)
                for name, entry in weights.tensors.items():
                    if name in self.tensors:
                        raise ModelFileError(f"{file}: tensor {name!r} is also in {self.tensors[name][0].path}")
                    if entry.dtype not in _HF_FLOAT_DTYPES:
                        raise ModelFileError(f"{file}: tensor {name!r} is {entry.dtype}, not a float type")
                    self.tensors[name] = (weights, name)
        except BaseException:
            self.close()
            raise
        self.where = os.path.join(directory, "model.safetensors")

    def _safetensors_files(self) -> list[str]:
        single = model_file_inside(self.path, "model.safetensors")
        if single is not None:
            return [single]
        index_path = model_file_inside(self.path, "model.safetensors.index.json")
        if index_path is None:
            raise ModelFileError(f"{self.path}: has neither model.safetensors nor model.safetensors.index.json")
        weight_map = read_json_file(index_path, "safetensors index").get("weight_map")
        files = []
        for name in shard_names(weight_map, index_path):
            file = model_file_inside(self.path, name)
            if file is None:
                raise ModelFileError(f"{index_path} lists {name}, which is missing")
            files.append(file)
        return files

    def names(self) -> set[str]:
        return set(self.tensors)

    def shape(self, name: str) -> tuple[int, ...]:
        weights, key = self.tensors[name]
        return weights.tensors[key].shape

    def array(self, name: str) -> np.ndarray:
        weights, key = self.tensors[name]
        value = weights.tensor(key)
        if weights.tensors[key].dtype == "BF16":
            return bf16_to_f32(value)
        return value.astype(np.float32, copy=False)

    def value(self, key: str):
        """(present, value) of a config.json key, a dotted path into nested objects."""
        node = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False, None
            node = node[part]
        return True, node

    def close(self) -> None:
        for weights in self._files:
            weights.close()
        self._files = []


# -- the artifact's weights from a model file ------------------------------------------------------


def open_model(path) -> GgufModel | HfModel:
    """A GGUF file or a HF checkpoint directory at `path`."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"model must be a path to a GGUF file or a HF directory, got {type(path).__name__}")
    path = os.fspath(path)
    if os.path.isdir(path):
        return HfModel(path)
    if not os.path.lexists(path):
        raise ModelFileError(f"{path}: no such model file or directory")
    return GgufModel(path)


def _same(found, expected) -> bool:
    """Whether a file's value is the manifest's: numbers as float32 (GGUF stores float32; the
    config's are those values), a per-layer array when all its entries are."""
    if isinstance(found, np.ndarray):
        return found.size > 0 and all(_same(item.item(), expected) for item in found.reshape(-1))
    if isinstance(found, list):
        return bool(found) and all(_same(item, expected) for item in found)
    if isinstance(expected, bool) or isinstance(found, bool):
        return found is expected or (isinstance(found, (bool, np.bool_)) and bool(found) == expected)
    if isinstance(expected, (int, float)) and isinstance(found, (int, float)):
        try:
            with np.errstate(over="ignore"):
                return bool(np.float32(found) == np.float32(expected))
        except OverflowError:  # an integer past float's range (JSON allows 4300 digits): not the value
            return False
    return found == expected


def _shown(value) -> str:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class ModelWeights:
    """The weight buffers of a format-2 artifact, made from the model file `path`: check() holds the
    file to the manifest (before any driver call); raw(name) is a buffer's bytes, one buffer at a
    time, so that host memory holds one weight besides the file's mapping."""

    def __init__(self, manifest: Manifest, path):
        self._manifest = manifest
        self._model = model = open_model(path)
        self._gguf = isinstance(model, GgufModel)
        self._buffers = {b.name: b for b in manifest.buffers if b.role == "weight"}
        self._recipes: dict[str, dict] = {}
        try:
            self._check()
        except BaseException:
            self.close()
            raise

    @property
    def path(self) -> str:
        return self._model.path

    def _fail(self, problem: str):
        raise ModelFileError(f"{self._model.path}: {problem}")

    def _check(self) -> None:
        source = self._manifest.weights_source or {}
        kind = "gguf" if self._gguf else "hf"
        checks = source.get(kind)
        if checks is None:
            self._fail(
                f"the artifact's model ({source.get('architecture', 'unknown')}) cannot be read from a "
                f"{self._model.kind}: its manifest has no {kind} recipes (give a HF directory)"
            )
        # The architecture first: a file of another family differs in every tensor, which says less.
        first = [c for c in checks["checks"] if c["key"] in _ARCHITECTURE_KEYS]
        for check in first:
            self._check_value(check)
        names = self._model.names()
        rename = self._hf_names(names, checks.get("prefix")) if not self._gguf else {}
        read = set()
        for buffer in self._buffers.values():
            recipe = buffer.gguf if self._gguf else buffer.hf
            if recipe is None:
                self._fail(f"the artifact's weight buffer {buffer.name!r} has no {kind} recipe")
            recipe = dict(recipe, names=[rename.get(name, name) for name in recipe["names"]])
            self._recipes[buffer.name] = recipe
            self._check_shapes(buffer, recipe, names)
            read.update(recipe["names"])
        values = checks.get("values") or {}
        optional = checks.get("optional", [])
        unexpected = sorted(
            name
            for name in names - read - set(values)
            if not (name in optional if self._gguf else any(name.endswith(suffix) for suffix in optional))
        )
        if unexpected:
            self._fail(
                f"tensor(s) the artifact's model does not have: {', '.join(unexpected[:5])}"
                + (" ..." if len(unexpected) > 5 else "")
                + " (the file is another model than the one the artifact was exported from)"
            )
        for check in checks["checks"]:
            if check not in first:
                self._check_value(check)
        for name, expected in values.items():
            self._check_tensor_values(name, expected, names)

    def _hf_names(self, names: set[str], prefix: str | None) -> dict[str, str]:
        """Recipe name -> checkpoint name, for a checkpoint whose names lack `prefix` throughout."""
        if not prefix or any(name.startswith(prefix) for name in names):
            return {}
        return {prefix + name: name for name in names}

    def _check_shapes(self, buffer: Buffer, recipe: dict, names: set[str]) -> None:
        expected = tuple(buffer.shape)
        axis, shapes = recipe["axis"], []
        for k, name in enumerate(recipe["names"]):
            if name not in names:
                self._fail(f"tensor {name!r} is missing (the artifact's weight buffer {buffer.name!r} reads it)")
            shape = tuple(self._model.shape(name))
            stored = shape[::-1] if recipe["transpose"] else shape
            heads = recipe.get("permute_heads", [None] * len(recipe["names"]))[k]
            wanted = list(expected)
            if len(recipe["names"]) > 1 and len(wanted) > axis:
                wanted[axis] = None  # a part's share of the concatenated axis
            wanted = tuple(wanted)
            fits = len(stored) == len(expected)
            fits = fits and all(w is None or w == s for w, s in zip(wanted, stored, strict=True))
            if not fits or (heads is not None and (not shape or shape[0] % (2 * heads))):
                want = [("*" if w is None else w) for w in (wanted[::-1] if recipe["transpose"] else wanted)]
                why = f", rows in {heads} heads of whole pairs" if heads is not None and fits else ""
                self._fail(
                    f"tensor {name!r} has shape {list(shape)}, but the artifact expects "
                    f"[{', '.join(map(str, want))}]{why} (for its weight buffer {buffer.name!r} of shape "
                    f"{list(expected)})"
                )
            shapes.append(stored)
        if len(shapes) > 1 and sum(shape[axis] for shape in shapes) != expected[axis]:
            found = ", ".join(f"{name!r} {list(self._model.shape(name))}" for name in recipe["names"])
            self._fail(
                f"tensors {found} make {sum(s[axis] for s in shapes)} rows of the artifact's weight buffer "
                f"{buffer.name!r} (its axis {axis}), which has {expected[axis]} (shape {list(expected)})"
            )

    def _check_value(self, check: dict) -> None:
        keys = check["key"] if isinstance(check["key"], list) else [check["key"]]
        present, found, key = False, None, keys[0]
        for candidate in keys:
            present, found = self._model.value(candidate)
            if present and found is not None:
                key = candidate
                break
        where = "metadata key" if self._gguf else "config.json key"
        if not present or found is None:
            if "default" not in check:
                self._fail(f"{where} {key} is missing (the artifact's model has {check['value']!r})")
            found, shown = check["default"], f"absent (so {check['default']!r})"
        else:
            shown = _shown(found)
        if not _same(found, check["value"]):
            self._fail(f"{where} {key} is {shown}, but the artifact's model has {check['value']!r}")

    def _check_tensor_values(self, name: str, expected, names: set[str]) -> None:
        if name not in names:
            self._fail(f"tensor {name!r} is missing (the artifact's model depends on its values)")
        want = np.asarray(expected, np.float32)
        if tuple(self._model.shape(name)) != want.shape:
            found = list(self._model.shape(name))
            self._fail(f"tensor {name!r} has shape {found}, but the artifact expects {list(want.shape)}")
        if not np.allclose(self._model.array(name), want, rtol=1e-5, atol=0):
            self._fail(f"tensor {name!r} holds other values than the artifact's model (its rope scaling differs)")

    def stored(self, name: str) -> np.ndarray:
        """Buffer `name`'s tensor as float32, in the layout the kernels read."""
        recipe = self._recipes[name]
        parts = []
        heads_of = recipe.get("permute_heads") or [None] * len(recipe["names"])
        for part_name, heads in zip(recipe["names"], heads_of, strict=True):
            part = self._model.array(part_name)
            if not np.isfinite(part).all():  # as gpt's loaders refuse them: the logits would all be NaN
                self._fail(f"tensor {part_name!r} contains NaN or infinity (as float32)")
            if heads is not None:
                part = unpermute_rows(part, heads)
            parts.append(part.T if recipe["transpose"] else part)
        value = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=recipe["axis"])
        return np.ascontiguousarray(value, dtype=np.float32)

    def raw(self, name: str) -> np.ndarray:
        """Buffer `name`'s bytes, in its dtype (f32, or bf16 rounded to nearest even)."""
        buffer = self._buffers[name]
        value = self.stored(name)
        if (buffer.dtype or self._manifest.weights_dtype) == "bf16":
            value = f32_to_bf16_bits(value)
        data = value.reshape(-1).view(np.uint8)
        if data.nbytes != buffer.bytes:  # the checks above make this impossible; the copy must not overrun
            self._fail(f"weight buffer {name!r}: {data.nbytes} bytes made, the artifact's buffer has {buffer.bytes}")
        return data

    def close(self) -> None:
        self._model.close()

    def __enter__(self) -> "ModelWeights":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
