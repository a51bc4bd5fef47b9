"""GPT.export: a model compiled for an NVIDIA GPU, written as an artifact directory (docs/GPU.md)
that `gpt_runtime` runs with only the CUDA driver.

The compiler (cc/codegen/gpu) forms the programs and emits the PTX; this module adds what only
the Python side knows (the config, the end-of-generation ids, the tokenizer) and writes the
weights in the layouts and dtypes the manifest names."""

import dataclasses
import errno
import json
import os
import re
import secrets
import shutil
import stat

import numpy as np

from gpt import _gpt, architectures, cuda_tools

ARTIFACT_WEIGHTS = "weights.safetensors"
ARTIFACT_TOKENIZER = "tokenizer.json"
ARTIFACT_MANIFEST = "manifest.json"
ARTIFACT_FORMAT = "gpt.gpu-artifact"  # the manifest's "format" (cc/codegen/gpu/GpuArtifact.cpp)
_WEIGHT_FORMATS = ("f32", "bf16")
# An exported manifest is a few hundred KiB at most (GPT-2 small: about 60 KiB); a larger file
# at the target is not one this module wrote, and is not read whole to find that out.
_MANIFEST_MAX_BYTES = 16 * 2**20


class ExportError(OSError):
    """Export could not write its artifact: the target is a path export must not replace (a file,
    a link, a directory that is not an artifact), or the file system refused (read-only, full, no
    permission). The message names the path; `errno` and `filename` are the failing call's, when
    one failed. A subclass of OSError, so `except OSError` sees every export write failure."""

    def __init__(self, message: str, error_number: int | None = None, filename: str | None = None):
        super().__init__(message)
        self.errno, self.filename = error_number, filename

    def __str__(self) -> str:
        return self.args[0]


def parse_target(target: str) -> str:
    """The chip of a "cuda:sm_XX" target; ValueError naming anything else."""
    match = re.fullmatch(r"cuda:(sm_\d+)", target) if isinstance(target, str) else None
    if match is None:
        raise ValueError(
            f"unknown GPU target {target!r}; expected 'cuda:sm_80', 'cuda:sm_86', 'cuda:sm_89' or 'cuda:sm_90'"
        )
    return match.group(1)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest even, as the CPU path rounds."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def write_safetensors(path: str, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    """Writes {name: (dtype "F32" | "BF16", array)} as a safetensors file. Written here because
    numpy has no bfloat16 for safetensors.numpy to save; the format is a JSON header and the raw
    little-endian bytes."""
    header, offset = {}, 0
    for name, (dtype, array) in tensors.items():
        size = array.nbytes
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as file:
        file.write(len(text).to_bytes(8, "little"))
        file.write(text)
        for _, array in tensors.values():
            file.write(np.ascontiguousarray(array).tobytes())


def stored_weights(manifest: dict, weights: dict[str, np.ndarray]) -> dict[str, tuple[str, np.ndarray]]:
    """The weights file's tensors for `manifest`'s weight buffers, from the compiler's parameters
    by name (GPT._compiler_weights: GPT-2's are HF's, the Llama family's fuse q/k/v and gate/up):
    transposed where the buffer's layout says so, rounded to bf16 where its dtype says so."""
    tensors = {}
    for buffer in manifest["buffers"]:
        if buffer["role"] != "weight":
            continue
        value = np.asarray(weights[buffer["name"]], dtype=np.float32)
        if buffer["layout"] == "transposed":
            value = value.T
        value = np.ascontiguousarray(value)
        if list(value.shape) != buffer["shape"]:
            raise ValueError(f"weight {buffer['name']} has shape {list(value.shape)}, the manifest {buffer['shape']}")
        tensors[buffer["name"]] = ("BF16", bf16_bits(value)) if buffer["dtype"] == "bf16" else ("F32", value)
    return tensors


def describe_hf_sources(manifest: dict, config) -> None:
    """Gives each weight buffer `hf`: how to make its tensor from a HF checkpoint without the
    compiler, stored = concatenate([t.T if transpose else t for t in names' tensors], axis). (The
    device check fills weight-less artifacts from HF models this way.)"""
    parts = architectures.hf_parts(config)
    for buffer in manifest["buffers"]:
        if buffer["role"] != "weight":
            continue
        names, linear = parts.get(buffer["name"], ([buffer["name"]], False))
        if buffer["layout"] == "transposed":  # the compiler's [in, out] transposed back
            buffer["hf"] = {"names": names, "transpose": not linear, "axis": 0}
        else:
            buffer["hf"] = {"names": names, "transpose": linear, "axis": 1 if linear else 0}


def compile_artifact(model, target: str = "cuda:sm_90", tokens=(1, 128), weights: str = "f32", cache_len=None) -> dict:
    """The compiler's parts for `model` (see _gpt.compile_gpu_artifact) and the full manifest."""
    chip = parse_target(target)
    if weights not in _WEIGHT_FORMATS:
        raise ValueError(f"unknown GPU weight format {weights!r}; expected one of {_WEIGHT_FORMATS}")
    config = model.config
    tokens = sorted({int(t) for t in tokens})
    if not tokens or tokens[0] < 1 or tokens[-1] > config.block_size:
        raise ValueError(f"tokens must lie in 1..{config.block_size}, got {tokens}")
    cache_len = config.block_size if cache_len is None else int(cache_len)
    if not tokens[-1] <= cache_len <= config.block_size:
        raise ValueError(f"cache_len must lie in {tokens[-1]}..{config.block_size}, got {cache_len}")
    parts = _gpt.compile_gpu_artifact(config, chip, tokens, cache_len, weights == "bf16", cuda_tools.libdevice_path())
    manifest = json.loads(parts["manifest"])
    manifest["config"] = dataclasses.asdict(config)
    manifest["vocab_size"] = config.vocab_size
    eos = sorted(model.end_of_generation)
    manifest["eos_token_id"] = eos[0] if eos else None
    manifest["eos_token_ids"] = eos
    manifest["weights"] = {"file": ARTIFACT_WEIGHTS, "dtype": weights}
    describe_hf_sources(manifest, config)
    manifest["tokenizer"] = ARTIFACT_TOKENIZER if model.tokenizer is not None else None
    parts["manifest"] = manifest
    return parts


def _first_non_directory_above(path: str) -> str | None:
    """The nearest existing ancestor of `path` when it is not a directory (links followed, as
    creating the parents follows them), else None."""
    parent = os.path.dirname(path)
    while parent and parent != os.path.dirname(parent) and not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    return parent if os.path.lexists(parent) and not os.path.isdir(parent) else None


def _is_artifact(directory: str) -> str | None:
    """None when `directory` holds a manifest.json that is a regular file with the artifact's format
    marker; otherwise why it does not. The manifest is opened without following a link, and without
    waiting on a FIFO."""
    manifest = os.path.join(directory, ARTIFACT_MANIFEST)
    try:
        fd = os.open(manifest, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return "a directory with no manifest.json"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a directory whose manifest.json is a symbolic link"
        return f"a directory whose manifest.json cannot be read ({e.strerror})"
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "a directory whose manifest.json is not a regular file"
        if info.st_size > _MANIFEST_MAX_BYTES:
            return f"a directory whose manifest.json is {info.st_size} bytes, more than an artifact's"
        data = file.read(_MANIFEST_MAX_BYTES + 1)
    try:
        manifest_json = json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return "a directory whose manifest.json is not JSON"
    if not isinstance(manifest_json, dict) or manifest_json.get("format") != ARTIFACT_FORMAT:
        return f"a directory whose manifest.json is not a {ARTIFACT_FORMAT} manifest"
    return None


def check_target(path) -> str:
    """The absolute path export would write, or ExportError saying why it must not: `path` must be
    new (its missing parents are created), an empty directory, or an artifact directory, which is
    replaced whole. An artifact directory is recognised by its manifest.json: a regular file (not a
    link) whose "format" is "gpt.gpu-artifact". A link at `path` is refused, dangling or not: export
    never writes through one. The command line checks --out with this before loading the model."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if not os.fspath(path):
        raise ExportError("cannot export to '': the artifact path is empty")
    target = os.path.abspath(os.fspath(path))
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        blocker = _first_non_directory_above(target)
        if blocker is not None:
            raise ExportError(
                f"cannot export to {target}: {blocker} is not a directory", errno.ENOTDIR, blocker
            ) from None
        return target
    except OSError as e:  # ENOTDIR: a parent is a file; EACCES: a parent cannot be searched
        blocker = _first_non_directory_above(target)
        reason = f"{blocker} is not a directory" if blocker is not None else e.strerror
        raise ExportError(f"cannot export to {target}: {reason}", e.errno, blocker or target) from None
    if stat.S_ISLNK(info.st_mode):
        raise ExportError(
            f"cannot export to {target}: it is a symbolic link, and export never writes through one "
            "(remove it, or name the directory it points to)",
            errno.EEXIST,
            target,
        )
    if not stat.S_ISDIR(info.st_mode):
        kind = "a file" if stat.S_ISREG(info.st_mode) else "not a directory"
        raise ExportError(
            f"cannot export to {target}: it is {kind}; export writes a new directory, or replaces an artifact",
            errno.EEXIST,
            target,
        )
    try:
        empty = not os.listdir(target)
    except OSError as e:
        raise ExportError(f"cannot export to {target}: cannot list it ({e.strerror})", e.errno, target) from None
    if not empty and (problem := _is_artifact(target)) is not None:
        raise ExportError(
            f"cannot export to {target}: it is {problem}, not a GPU artifact; export replaces only an "
            "artifact or an empty directory",
            errno.EEXIST,
            target,
        )
    return target


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)


def _write_artifact(staging: str, destination: str, model, parts: dict, write_weights: bool) -> None:
    """Writes the artifact's files into `staging`, a fresh directory only this export knows, so no
    file there can be a link to something else. Each file is flushed to disk before the directory is
    renamed into place, so a crash cannot leave a renamed artifact with empty files. A failure names
    the file by its place in `destination` (the temporary name means nothing to the user)."""
    manifest = parts["manifest"]
    files = [(manifest["target"]["module"], lambda path: _write_text(path, parts["ptx"]))]
    if write_weights:
        tensors = stored_weights(manifest, model._compiler_weights())  # a ValueError stays one
        files.append((ARTIFACT_WEIGHTS, lambda path: write_safetensors(path, tensors)))
    if model.tokenizer is not None:
        files.append((ARTIFACT_TOKENIZER, model.tokenizer.backend.save))
    files.append((ARTIFACT_MANIFEST, lambda path: _write_text(path, json.dumps(manifest, indent=1))))
    for name, write in files:
        path = os.path.join(staging, name)
        try:
            write(path)
            with open(path, "rb+") as file:
                os.fsync(file.fileno())
        except Exception as e:
            # The tokenizers package reports a failed write as a bare Exception ending "(os error N)".
            number = e.errno if isinstance(e, OSError) else _os_error_number(str(e))
            if number is None and not isinstance(e, OSError):
                raise
            reason = e.strerror if isinstance(e, OSError) and e.strerror else os.strerror(number)
            raise ExportError(
                f"cannot export to {destination}: cannot write {name} ({reason})",
                number,
                os.path.join(destination, name),
            ) from None


def _os_error_number(message: str) -> int | None:
    match = re.search(r"\(os error (\d+)\)", message)
    return int(match.group(1)) if match else None


def _fresh_name(target: str, kind: str) -> str:
    """A hidden name beside `target` (same directory, so the same file system: rename is atomic)."""
    return os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{kind}-{secrets.token_hex(6)}")


def _install(staging: str, target: str) -> None:
    """Renames the written `staging` directory to `target`. A new target (or an empty directory) is
    one rename, which fails rather than follow a link or overwrite a file put there meanwhile. An
    artifact is moved aside first and removed once the new one is in place; if the second rename
    fails it is moved back, so `target` is the old artifact or the new one, never a mix."""
    check_target(target)  # again: the path may have changed while the model compiled
    try:
        os.rename(staging, target)
        return
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    old = _fresh_name(target, "old")
    os.rename(target, old)
    # Checked again under the private name, which nothing else writes to: whatever was put at the
    # target since check_target is moved back, not removed.
    if (problem := _is_artifact(old)) is not None:
        os.rename(old, target)
        raise ExportError(
            f"cannot export to {target}: it became {problem} while the model compiled", errno.EEXIST, target
        )
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)  # removes links inside it, never what they point to


def export(model, path, target="cuda:sm_90", tokens=(1, 128), weights="f32", write_weights=True, cache_len=None) -> str:
    """Writes the artifact directory `path` and returns its absolute path. The files are written to
    a fresh directory beside `path` and renamed into place: `path` must be new (missing parents are
    created), an empty directory, or an earlier artifact (its manifest.json a regular file marked
    "gpt.gpu-artifact"), which is replaced whole, files only it had included (check_target). A link
    at `path` is never followed. Any file system failure raises ExportError naming the path, and
    leaves `path` as it was with no temporary directory behind."""
    destination = check_target(path)  # before the compile: a bad path fails in a moment, not minutes
    parts = compile_artifact(model, target, tokens, weights, cache_len)
    parent = os.path.dirname(destination)
    staging = fresh = None
    try:
        os.makedirs(parent, exist_ok=True)
        fresh = _fresh_name(destination, "tmp")
        os.mkdir(fresh)
        staging = fresh  # only now ours to remove
        _write_artifact(staging, destination, model, parts, write_weights)
        _install(staging, destination)
        staging = None
    except ExportError:
        raise
    except OSError as e:
        # A failed mkdir or rename names the temporary directory, which means nothing to the user.
        where = e.filename if isinstance(e.filename, str) and not (fresh and e.filename.startswith(fresh)) else parent
        raise ExportError(f"cannot export to {destination}: {where}: {e.strerror or e}", e.errno, where) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return destination
