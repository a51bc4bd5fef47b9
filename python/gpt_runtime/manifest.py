"""Reads an artifact's manifest.json: the fields against manifest.schema.json, then what refers to
what (buffer indices and roles, inputs and logits inside their buffers, kernels in the PTX, files
on disk), all before any driver call, so that a bad artifact fails the same way on every machine.
An artifact may come from a stranger: every size, count and launch dimension is bounded by what the
format, CUDA and the largest GPU allow, and files are read through artifact_files (regular files
inside the directory, each with a size bound)."""

import dataclasses
import functools
import json
import os
import re
from typing import Any

from .artifact_files import open_regular, parse_json, read_bytes, resolve_inside
from .compat import parse_chip, required_driver_version
from .errors import ArtifactError
from .schema import SchemaViolation, Validator

# Version 1 holds its weights (weights.file); version 2 holds none and names, for each weight buffer,
# the tensors of a GGUF file or HF directory that make it (weights.source, buffers[].gguf and .hf),
# read at load from the model file given (model_weights.py). A runtime that reads only version 1
# refuses a version-2 artifact by its version, not by a missing weights file.
FORMAT_VERSION = 1
FORMAT_WITHOUT_WEIGHTS = 2
FORMAT_VERSIONS = (FORMAT_VERSION, FORMAT_WITHOUT_WEIGHTS)
MANIFEST = "manifest.json"
SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "manifest.schema.json")
# GPT-2 small exported for 8 token buckets has a 1.2 MB manifest and a 0.5 MB PTX module
# (measured on the build at 1cd8787: `model.export(d, tokens=(1, 2, 4, ..., 128), write_weights=False)`).
# A manifest grows with layers x buckets: 96 layers and 32 buckets, by that figure, about 37 MB; hence this
# bound rather than a few MB; it still keeps a hostile file from making json.loads take the
# machine's memory. The PTX grows with kernel shapes (buckets), not with layers.
MAX_MANIFEST_BYTES = 64 * 2**20
MAX_PTX_BYTES = 64 * 2**20
# A HF tokenizer.json: GPT-2's is 1.4 MB, the largest vocabularies' (Gemma 3's 262k tokens) about 33 MB.
MAX_TOKENIZER_BYTES = 256 * 2**20
I64 = 8
F32 = 4
# Every buffer, and all of them together: more memory than any GPU has (the largest, B300, has
# 288 GB), so that a larger number can only be a broken or hostile manifest. manifest.schema.json's
# $defs/bytes holds the same bound for each buffer.
MAX_BUFFER_BYTES = 2**40
# CUDA's limits on a launch's shape (every GPU since compute capability 3.0).
MAX_BLOCK_THREADS = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
# A kernel's parameters: 4 KiB, or 32,764 bytes for PTX 8.1 (CUDA 12.1) and later on sm_70 and later.
MAX_PARAMETER_BYTES = 4096
MAX_PARAMETER_BYTES_LARGE = 32764
# Dynamic shared memory a block may have, by the artifact's chip: the CUDA Programming Guide's
# "maximum amount of shared memory per thread block". Without an opt-in a kernel gets 48 KiB
# (driver.DEFAULT_SHARED_BYTES); the runtime opts in (cuFuncSetAttribute) for each kernel launched
# with more, so the bound is the opt-in one. A chip's own limit, not the largest of any GPU that
# could run its PTX: a launch past it would fail on the GPU the artifact was made for.
KIB = 1024
OPT_IN_SHARED_BYTES = {
    (7, 0): 96 * KIB,
    (7, 2): 96 * KIB,
    (7, 5): 64 * KIB,
    (8, 0): 163 * KIB,
    (8, 6): 99 * KIB,
    (8, 7): 163 * KIB,
    (8, 9): 99 * KIB,
    (9, 0): 227 * KIB,
    (10, 0): 227 * KIB,
    (10, 3): 227 * KIB,
    (12, 0): 99 * KIB,
    (12, 1): 99 * KIB,
}
# Before Volta a block had 48 KiB and no opt-in; a chip newer than the table gets the most any
# GPU has given a block so far (sm_90's and sm_100's 227 KiB).
PRE_VOLTA_SHARED_BYTES = 48 * KIB
MOST_SHARED_BYTES = 227 * KIB
# The host mirrors the span of a program's inputs in one buffer (program._InputSegment); the
# exporter lays them out back to back, each aligned. Room for alignment past the inputs' own bytes:
INPUT_SLACK_BYTES = 4096


@dataclasses.dataclass(frozen=True)
class Buffer:
    index: int
    name: str
    role: str  # weight | input | cache | scratch | output
    bytes: int
    dtype: str | None  # weights: the buffer's own dtype, else the file's
    shape: tuple[int, ...] | None
    # A weight's recipes from a model file's tensors (docs/GPU.md): {"names", "transpose", "axis"}
    # for a HF checkpoint, and with "permute_heads" for a GGUF file; None where the manifest has none.
    hf: dict | None = None
    gguf: dict | None = None


@dataclasses.dataclass(frozen=True)
class Place:
    """A byte offset in a buffer."""

    buffer: int
    offset: int


@dataclasses.dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: tuple[Place | int, ...]  # a Place is a device pointer, an int an i64 value


@dataclasses.dataclass(frozen=True)
class Logits:
    buffer: int
    offset: int
    rows: int
    row_stride: int


@dataclasses.dataclass(frozen=True)
class Program:
    entry: str  # forward | step
    tokens: int
    inputs: dict[str, Place]  # token_ids, positions [, last_row, cache_offset]
    launches: tuple[Launch, ...]
    logits: Logits


@dataclasses.dataclass(frozen=True)
class Manifest:
    directory: str
    chip: str
    ptx_version: str
    ptx: str  # the module's text
    config: dict[str, Any]
    eos_token_id: int | None
    eos_token_ids: tuple[int, ...]  # every end-of-generation token, eos_token_id among them
    weights_path: str | None  # None: no weights file (format version 2), a model file gives them
    weights_dtype: str
    tokenizer_path: str | None
    vocab_size: int
    buffers: tuple[Buffer, ...]
    cache_length: int | None  # None: no KV cache (forward only)
    cache_layers: tuple[tuple[int, int], ...]  # (key buffer, value buffer) per layer
    programs: tuple[Program, ...]
    format_version: int = FORMAT_VERSION
    # Version 2: what a model file must say to be the artifact's model (weights.source).
    weights_source: dict | None = None

    def programs_of(self, entry: str) -> list[Program]:
        """The programs of one entry point, smallest bucket first."""
        return sorted((p for p in self.programs if p.entry == entry), key=lambda p: p.tokens)


@functools.cache
def _validator() -> Validator:
    with open(SCHEMA, encoding="utf-8") as f:
        return Validator(json.load(f))


def load_manifest(directory: str) -> Manifest:
    """The artifact in `directory`, checked; ArtifactError names the file, the field and the problem."""
    if not os.path.isdir(directory):
        raise ArtifactError(f"{directory}: not a directory (an artifact is a directory with {MANIFEST})")
    path = os.path.join(directory, MANIFEST)
    raw = _read_json(directory)
    # The format and version first: a newer format's manifest would break the schema in ways that
    # hide the real problem.
    if isinstance(raw, dict):
        if raw.get("format") != "gpt.gpu-artifact":
            raise ArtifactError(f"{path}: format is {raw.get('format')!r}, expected 'gpt.gpu-artifact'")
        version = raw.get("version")
        if version not in FORMAT_VERSIONS or isinstance(version, bool):
            raise ArtifactError(
                f"{path}: format version {version!r} is not supported (this gpt_runtime reads versions "
                f"{', '.join(map(str, FORMAT_VERSIONS))}): use the gpt_runtime of the gpt that exported it"
            )
        weights = raw.get("weights")
        file = weights.get("file", "") if isinstance(weights, dict) else ""
        if version == FORMAT_WITHOUT_WEIGHTS and file is not None:
            raise ArtifactError(
                f"{path}: format version 2 is not supported with a weights file (weights.file is {file!r}): "
                "version 2 is an artifact without weights (weights.file null), which takes them from a model "
                "file at load; an artifact with its weights is version 1"
            )
        if version == FORMAT_VERSION and file is None:
            raise ArtifactError(
                f"{path}: weights.file is null, which format version 1 does not allow (an artifact without "
                "weights, exported with --gpu_weights none, is version 2)"
            )
    try:
        _validator().validate(raw)
    except SchemaViolation as violation:
        raise ArtifactError(f"{path}: {violation}") from None
    manifest = _build(directory, raw)
    _check_references(manifest, path)
    return manifest


def _read_json(directory: str) -> Any:
    path = os.path.join(directory, MANIFEST)
    try:
        data = read_bytes(resolve_inside(directory, MANIFEST), MAX_MANIFEST_BYTES, "manifest")
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing (an artifact directory holds {MANIFEST})") from None
    return parse_json(data, path, "manifest")


def _file(directory: str, name: str, field: str) -> str:
    """The path of `name` (the manifest's `field`), a regular file inside the artifact."""
    try:
        fd, _ = open_regular(resolve_inside(directory, name, field), None, field)
    except FileNotFoundError:
        raise ArtifactError(f"{os.path.join(directory, MANIFEST)}: {field} names {name!r}, which is missing") from None
    os.close(fd)
    return os.path.join(directory, name)


def _place(raw: dict) -> Place:
    return Place(raw["buffer"], raw["offset"])


def _build(directory: str, raw: dict) -> Manifest:
    target = raw["target"]
    module = _file(directory, target["module"], "target.module")
    try:
        ptx = read_bytes(module, MAX_PTX_BYTES, "PTX module").decode("ascii")  # PTX is ASCII text
    except UnicodeDecodeError as error:
        raise ArtifactError(f"{module}: not readable as PTX text: {error}") from None
    buffers = tuple(
        Buffer(
            i,
            b["name"],
            b["role"],
            b["bytes"],
            b.get("dtype"),
            tuple(b["shape"]) if "shape" in b else None,
            b.get("hf"),
            b.get("gguf"),
        )
        for i, b in enumerate(raw["buffers"])
    )
    programs = tuple(
        Program(
            entry=p["entry"],
            tokens=p["tokens"],
            inputs={name: _place(place) for name, place in p["inputs"].items()},
            launches=tuple(
                Launch(
                    kernel=launch["kernel"],
                    grid=tuple(launch["grid"]),
                    block=tuple(launch["block"]),
                    shared_bytes=launch["shared_bytes"],
                    args=tuple(_place(a) if "buffer" in a else a["i64"] for a in launch["args"]),
                )
                for launch in p["launches"]
            ),
            logits=Logits(**p["logits"]),
        )
        for p in raw["programs"]
    )
    cache = raw["cache"]
    weights_file = raw["weights"]["file"]
    return Manifest(
        directory=directory,
        chip=target["chip"],
        ptx_version=target["ptx_version"],
        ptx=ptx,
        config=dict(raw["config"]),
        eos_token_id=raw["eos_token_id"],
        eos_token_ids=tuple(
            dict.fromkeys(([] if raw["eos_token_id"] is None else [raw["eos_token_id"]]) + raw.get("eos_token_ids", []))
        ),
        weights_path=None if weights_file is None else _file(directory, weights_file, "weights.file"),
        weights_dtype=raw["weights"]["dtype"],
        tokenizer_path=None if raw["tokenizer"] is None else _file(directory, raw["tokenizer"], "tokenizer"),
        vocab_size=raw["vocab_size"],
        buffers=buffers,
        cache_length=None if cache is None else cache["length"],
        cache_layers=() if cache is None else tuple((layer["key"], layer["value"]) for layer in cache["layers"]),
        programs=programs,
        format_version=raw["version"],
        weights_source=raw["weights"].get("source"),
    )


def _check_references(m: Manifest, path: str) -> None:
    def fail(problem: str) -> None:
        raise ArtifactError(f"{path}: {problem}")

    try:
        parse_chip(m.chip)
        required_driver_version(m.ptx_version)  # a version the runtime can name a driver for
    except ArtifactError as error:
        fail(str(error))
    _check_ptx_header(m, fail)
    names = {}
    for buffer in m.buffers:
        if buffer.name in names:
            fail(f"buffers[{buffer.index}] and buffers[{names[buffer.name]}] are both named {buffer.name!r}")
        names[buffer.name] = buffer.index
    _check_sizes(m, fail)

    def buffer(index: int, field: str, role: str | None = None) -> Buffer:
        if index >= len(m.buffers):
            fail(f"{field} is buffer {index}, but there are {len(m.buffers)} buffers")
        found = m.buffers[index]
        if role is not None and found.role != role:
            fail(f"{field} is buffer {index} ({found.name!r}), whose role is {found.role!r}, not {role!r}")
        return found

    _check_cache(m, buffer, fail)
    for eos in m.eos_token_ids:
        if eos >= m.vocab_size:
            fail(f"end-of-generation token {eos} (eos_token_id[s]) is not below vocab_size {m.vocab_size}")
    seen, entries = {}, _entries(m.ptx)
    for i, program in enumerate(m.programs):
        where = f"programs[{i}]"
        if (program.entry, program.tokens) in seen:
            fail(
                f"{where} and programs[{seen[program.entry, program.tokens]}] are both {program.entry} "
                f"programs of {program.tokens} tokens"
            )
        seen[program.entry, program.tokens] = i
        if program.entry == "step" and m.cache_length is None:
            fail(f"{where} is a step program, but the manifest has no cache")
        if program.entry == "step" and program.tokens > m.cache_length:
            fail(f"{where}.tokens: a step program of {program.tokens} tokens, more than cache.length {m.cache_length}")
        if program.entry == "forward" and program.tokens > m.config["block_size"]:
            fail(
                f"{where} is a forward program of {program.tokens} tokens, more than block_size "
                f"{m.config['block_size']}"
            )
        _check_inputs(program, where, buffer, fail)
        _check_logits(program, m.vocab_size, where, buffer, fail)
        for j, launch in enumerate(program.launches):
            _check_launch(m, entries, program, launch, f"{where}.launches[{j}]", buffer, fail)
    _check_input_buffers(m, fail)
    if m.weights_path is None:
        _check_weight_recipes(m, fail)


# Bytes per element of a weight buffer's dtype.
WEIGHT_ITEM_BYTES = {"f32": 4, "bf16": 2}


def _check_weight_recipes(m: Manifest, fail) -> None:
    """An artifact without weights (format version 2) has no weights file to hold its weight
    buffers to: each states its shape, whose elements in its dtype are its bytes, and its recipes
    are whole (a GGUF recipe's permute_heads has one entry per tensor)."""
    if m.weights_source is None:
        fail("weights.source is missing: an artifact without a weights file says which model file gives them")
    for buffer in m.buffers:
        if buffer.role != "weight":
            continue
        where = f"buffers[{buffer.index}]"
        if buffer.shape is None:
            fail(f"{where} ({buffer.name!r}): a weight buffer of an artifact without weights needs its shape")
        dtype = buffer.dtype or m.weights_dtype
        size = WEIGHT_ITEM_BYTES[dtype]
        for dim in buffer.shape:
            size *= dim
        if size != buffer.bytes:
            fail(
                f"{where}.bytes: weight buffer {buffer.name!r} has {buffer.bytes} bytes, but {dtype} of shape "
                f"{list(buffer.shape)} is {size}"
            )
        if buffer.hf is None and buffer.gguf is None:
            fail(f"{where} ({buffer.name!r}): a weight buffer of an artifact without weights needs a recipe (hf, gguf)")
        if buffer.gguf is not None and len(buffer.gguf["permute_heads"]) != len(buffer.gguf["names"]):
            fail(
                f"{where}.gguf: {len(buffer.gguf['permute_heads'])} permute_heads entries for "
                f"{len(buffer.gguf['names'])} names"
            )


def _check_sizes(m: Manifest, fail) -> None:
    """All buffers together against the largest GPU (the schema bounds each one), before anything
    is allocated from these numbers. Weight buffers are held to the weights file by
    weights.check_weights: each is its tensor's bytes, and the tensors tile the file."""
    total = sum(buffer.bytes for buffer in m.buffers)
    if total > MAX_BUFFER_BYTES:
        fail(
            f"buffers: {total} bytes in all, more than any GPU has ({MAX_BUFFER_BYTES}; the largest, B300, has 288 GB)"
        )


def _check_cache(m: Manifest, buffer, fail) -> None:
    """Every layer's key and value buffer is a cache buffer of its own, holding whole float32 rows
    of cache.length positions (the exporter writes 4 x heads x length x head size bytes)."""
    used = {}
    for layer, pair in enumerate(m.cache_layers):
        for field, index in zip(("key", "value"), pair, strict=True):
            where = f"cache.layers[{layer}].{field}"
            found = buffer(index, where, "cache")
            if index in used:
                fail(f"{where} is buffer {index}, which {used[index]} is too")
            used[index] = where
            if found.bytes % (F32 * m.cache_length):
                fail(
                    f"{where}: buffer {index} ({found.name!r}) has {found.bytes} bytes, not a whole number of "
                    f"float32 rows of cache.length {m.cache_length} positions ({F32 * m.cache_length} bytes a row)"
                )


def _check_input_buffers(m: Manifest, fail) -> None:
    """An input buffer holds only what the host writes (docs/GPU.md), and the host keeps a copy of
    the span of it that a program writes (program._InputSegment): a buffer larger than its largest
    program's inputs, with room for alignment, would have the host allocate for nothing (terabytes,
    from a few numbers in the manifest)."""
    needed: dict[int, int] = {}
    for program in m.programs:
        own: dict[int, int] = {}
        for name, place in program.inputs.items():
            size = I64 * (program.tokens if name in ("token_ids", "positions") else 1)
            own[place.buffer] = own.get(place.buffer, 0) + size
        for index, size in own.items():
            needed[index] = max(needed.get(index, 0), size)
    for buffer in m.buffers:
        if buffer.role == "input" and buffer.bytes > needed.get(buffer.index, 0) + INPUT_SLACK_BYTES:
            fail(
                f"buffers[{buffer.index}].bytes: input buffer {buffer.name!r} has {buffer.bytes} bytes, but the "
                f"largest program's inputs in it have {needed.get(buffer.index, 0)} (with {INPUT_SLACK_BYTES} "
                "more allowed for alignment)"
            )


def max_shared_bytes(chip: str) -> int:
    """The dynamic shared memory one block may have on `chip` (OPT_IN_SHARED_BYTES)."""
    major, minor, _ = parse_chip(chip)
    if (major, minor) in OPT_IN_SHARED_BYTES:
        return OPT_IN_SHARED_BYTES[major, minor]
    return PRE_VOLTA_SHARED_BYTES if major < 7 else MOST_SHARED_BYTES


def max_parameter_bytes(chip: str, ptx_version: str) -> int:
    major, _, _ = parse_chip(chip)
    version = tuple(int(part) for part in ptx_version.split("."))
    return MAX_PARAMETER_BYTES_LARGE if major >= 7 and version >= (8, 1) else MAX_PARAMETER_BYTES


def _check_ptx_header(m: Manifest, fail) -> None:
    """The module's .version and .target must be the manifest's: a mismatch would make the
    driver and device checks judge the wrong numbers."""
    # [ \t]*, not \s*: \s crosses lines, and every line start of a run of blank lines would
    # rescan the rest of the run (quadratic in a hostile module's size).
    version = re.search(r"^[ \t]*\.version[ \t]+([0-9]+\.[0-9]+)", m.ptx, re.MULTILINE)
    target = re.search(r"^[ \t]*\.target[ \t]+([A-Za-z0-9_]+)", m.ptx, re.MULTILINE)
    if version is None or target is None:
        fail("target.module: the PTX module has no .version or .target directive")
    if version.group(1) != m.ptx_version:
        fail(f"target.ptx_version is {m.ptx_version}, but the PTX module says .version {version.group(1)}")
    if target.group(1) != m.chip:
        fail(f"target.chip is {m.chip}, but the PTX module says .target {target.group(1)}")


def _check_inputs(program: Program, where: str, buffer, fail) -> None:
    spans = []
    for name, place in program.inputs.items():
        field = f"{where}.inputs.{name}"
        found = buffer(place.buffer, field, "input")
        size = I64 * (program.tokens if name in ("token_ids", "positions") else 1)
        if place.offset % I64:
            fail(f"{field}: offset {place.offset} is not a multiple of 8 (an i64 array)")
        if place.offset + size > found.bytes:
            fail(
                f"{field}: {size} bytes at offset {place.offset} run past the end of buffer {place.buffer} "
                f"({found.name!r}, {found.bytes} bytes)"
            )
        spans.append((place.buffer, place.offset, place.offset + size, name))
    spans.sort()
    for (b1, _, end1, name1), (b2, start2, _, name2) in zip(spans, spans[1:], strict=False):
        if b1 == b2 and start2 < end1:
            fail(f"{where}.inputs: {name1} and {name2} overlap in buffer {b1}")


def _check_logits(program: Program, vocab_size: int, where: str, buffer, fail) -> None:
    logits = program.logits
    found = buffer(logits.buffer, f"{where}.logits", "output")
    if program.entry == "forward" and logits.rows != program.tokens:
        fail(f"{where}.logits: a forward program returns one row per token ({program.tokens}), not {logits.rows}")
    if logits.row_stride < vocab_size:
        fail(f"{where}.logits: row_stride {logits.row_stride} is less than vocab_size {vocab_size}")
    if logits.offset % F32:
        fail(f"{where}.logits: offset {logits.offset} is not a multiple of 4 (float32 rows)")
    size = F32 * logits.rows * logits.row_stride
    if logits.offset + size > found.bytes:
        fail(
            f"{where}.logits: {logits.rows} x {logits.row_stride} float32 at offset {logits.offset} run past "
            f"the end of buffer {logits.buffer} ({found.name!r}, {found.bytes} bytes)"
        )


_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][A-Za-z0-9_$]*)\s*\(")
_PARAMETER_KIND = re.compile(r"\.[usbf](8|16|32|64)\b")
_PARAMETER_COUNT = re.compile(r"\[(\d{1,9})\]\s*$")


def _entries(ptx: str) -> dict[str, list[int]]:
    """Each .entry of the PTX and the byte size of each of its parameters, or -1 where the
    declaration is not one this reader understands. One pass over the text: a parameter list is
    read up to its ")" with str.find, and the scan resumes after it (a regex that looked for the
    ")" from every ".entry" would rescan the module's rest each time one has none)."""
    entries, position = {}, 0
    while (match := _ENTRY.search(ptx, position)) is not None:
        close = ptx.find(")", match.end())
        if close < 0:
            break  # no ")" after this one: no later .entry has a parameter list either
        sizes = []
        for declaration in filter(str.strip, ptx[match.end() : close].split(",")):
            kind = _PARAMETER_KIND.search(declaration)
            count = _PARAMETER_COUNT.search(declaration)
            sizes.append(-1 if kind is None else int(kind.group(1)) // 8 * (int(count.group(1)) if count else 1))
        entries[match.group(1)] = sizes
        position = close + 1
    return entries


def _check_launch(m: Manifest, entries, program: Program, launch: Launch, where: str, buffer, fail) -> None:
    parameters = entries.get(launch.kernel)
    if parameters is None:
        fail(f"{where}: kernel {launch.kernel!r} is not an .entry of the PTX module")
    parameter_bytes = max_parameter_bytes(m.chip, m.ptx_version)
    for what, count in (
        (f"{where}.args: {len(launch.args)} arguments", len(launch.args)),
        (f"{where}: kernel {launch.kernel!r} declares {len(parameters)} parameters in the PTX, so", len(parameters)),
    ):
        if 8 * count > parameter_bytes:
            fail(
                f"{what} of 8 bytes, more than the {parameter_bytes} bytes of parameters a kernel of PTX "
                f"{m.ptx_version} for {m.chip} can take"
            )
    # Every argument is 8 bytes (a pointer or an i64): another count or size would have the
    # kernel read its parameters from the wrong places.
    if len(parameters) != len(launch.args) or any(size != 8 for size in parameters):
        fail(
            f"{where}: kernel {launch.kernel!r} takes parameters of {parameters} bytes in the PTX, but the "
            f"launch passes {len(launch.args)} arguments of 8 bytes"
        )
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    if threads > MAX_BLOCK_THREADS:
        fail(f"{where}: a block of {threads} threads, more than CUDA's {MAX_BLOCK_THREADS}")
    for name, dims, limits in (("block", launch.block, MAX_BLOCK), ("grid", launch.grid, MAX_GRID)):
        for axis, (size, limit) in enumerate(zip(dims, limits, strict=True)):
            if size > limit:
                fail(f"{where}.{name}[{axis}] = {size}, more than CUDA's {limit}")
    shared = max_shared_bytes(m.chip)
    if launch.shared_bytes > shared:
        fail(
            f"{where}.shared_bytes = {launch.shared_bytes}, more than the {shared} bytes of shared memory a "
            f"block can have on {m.chip} (with the opt-in past 48 KiB that the runtime makes)"
        )
    for k, arg in enumerate(launch.args):
        if isinstance(arg, Place):
            found = buffer(arg.buffer, f"{where}.args[{k}]")
            if arg.offset >= found.bytes:
                fail(
                    f"{where}.args[{k}]: offset {arg.offset} is past the end of buffer {arg.buffer} "
                    f"({found.name!r}, {found.bytes} bytes)"
                )
            if program.entry == "forward" and found.role == "cache":
                fail(
                    f"{where}.args[{k}]: a forward program uses cache buffer {arg.buffer} ({found.name!r}); "
                    "forward runs without a cache"
                )
