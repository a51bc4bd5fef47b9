"""Reads an artifact's manifest.json: the fields against manifest.schema.json, then what refers to
what (buffer indices and roles, inputs and logits inside their buffers, kernels in the PTX, files
on disk), all before any driver call, so that a bad artifact fails the same way on every machine."""

import dataclasses
import functools
import json
import os
import re
from typing import Any

from .compat import parse_chip, required_driver_version
from .errors import ArtifactError
from .schema import SchemaViolation, Validator

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "manifest.schema.json")
# A manifest lists a few hundred launches per program: far below this. The bound keeps a hostile
# file from making json.load take the machine's memory.
MAX_MANIFEST_BYTES = 64 * 2**20
I64 = 8
F32 = 4
# CUDA's limits on a launch's shape (every GPU since compute capability 3.0).
MAX_BLOCK_THREADS = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)


@dataclasses.dataclass(frozen=True)
class Buffer:
    index: int
    name: str
    role: str  # weight | input | cache | scratch | output
    bytes: int
    dtype: str | None  # weights: the buffer's own dtype, else the file's
    shape: tuple[int, ...] | None


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
    weights_path: str
    weights_dtype: str
    tokenizer_path: str | None
    vocab_size: int
    buffers: tuple[Buffer, ...]
    cache_length: int | None  # None: no KV cache (forward only)
    cache_layers: tuple[tuple[int, int], ...]  # (key buffer, value buffer) per layer
    programs: tuple[Program, ...]

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
    raw = _read_json(path)
    # The format and version first: a newer format's manifest would break the schema in ways that
    # hide the real problem.
    if isinstance(raw, dict):
        if raw.get("format") != "gpt.gpu-artifact":
            raise ArtifactError(f"{path}: format is {raw.get('format')!r}, expected 'gpt.gpu-artifact'")
        if raw.get("version") != FORMAT_VERSION or isinstance(raw.get("version"), bool):
            raise ArtifactError(
                f"{path}: format version {raw.get('version')!r} is not supported (this gpt_runtime reads "
                f"version {FORMAT_VERSION}): use the gpt_runtime of the gpt that exported it"
            )
    try:
        _validator().validate(raw)
    except SchemaViolation as violation:
        raise ArtifactError(f"{path}: {violation}") from None
    manifest = _build(directory, raw)
    _check_references(manifest, path)
    return manifest


def _read_json(path: str) -> Any:
    try:
        size = os.path.getsize(path)
        if size > MAX_MANIFEST_BYTES:
            raise ArtifactError(f"{path}: {size} bytes, more than a manifest can be ({MAX_MANIFEST_BYTES})")
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing (an artifact directory holds {MANIFEST})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ArtifactError(f"{path}: not readable as JSON: {error}") from None


def _file(directory: str, name: str, field: str) -> str:
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        raise ArtifactError(f"{os.path.join(directory, MANIFEST)}: {field} names {name!r}, which is missing")
    return path


def _place(raw: dict) -> Place:
    return Place(raw["buffer"], raw["offset"])


def _build(directory: str, raw: dict) -> Manifest:
    target = raw["target"]
    module = _file(directory, target["module"], "target.module")
    try:
        with open(module, encoding="ascii") as f:  # PTX is ASCII text
            ptx = f.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ArtifactError(f"{module}: not readable as PTX text: {error}") from None
    buffers = tuple(
        Buffer(i, b["name"], b["role"], b["bytes"], b.get("dtype"), tuple(b["shape"]) if "shape" in b else None)
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
        weights_path=_file(directory, raw["weights"]["file"], "weights.file"),
        weights_dtype=raw["weights"]["dtype"],
        tokenizer_path=None if raw["tokenizer"] is None else _file(directory, raw["tokenizer"], "tokenizer"),
        vocab_size=raw["vocab_size"],
        buffers=buffers,
        cache_length=None if cache is None else cache["length"],
        cache_layers=() if cache is None else tuple((layer["key"], layer["value"]) for layer in cache["layers"]),
        programs=programs,
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

    def buffer(index: int, field: str, role: str | None = None) -> Buffer:
        if index >= len(m.buffers):
            fail(f"{field} is buffer {index}, but there are {len(m.buffers)} buffers")
        found = m.buffers[index]
        if role is not None and found.role != role:
            fail(f"{field} is buffer {index} ({found.name!r}), whose role is {found.role!r}, not {role!r}")
        return found

    for layer, (key, value) in enumerate(m.cache_layers):
        buffer(key, f"cache.layers[{layer}].key", "cache")
        buffer(value, f"cache.layers[{layer}].value", "cache")
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
        if program.entry == "forward" and program.tokens > m.config["block_size"]:
            fail(
                f"{where} is a forward program of {program.tokens} tokens, more than block_size "
                f"{m.config['block_size']}"
            )
        _check_inputs(program, where, buffer, fail)
        _check_logits(program, m.vocab_size, where, buffer, fail)
        for j, launch in enumerate(program.launches):
            _check_launch(m, entries, program, launch, f"{where}.launches[{j}]", buffer, fail)


def _check_ptx_header(m: Manifest, fail) -> None:
    """The module's .version and .target must be the manifest's: a mismatch would make the
    driver and device checks judge the wrong numbers."""
    version = re.search(r"^\s*\.version\s+([0-9]+\.[0-9]+)", m.ptx, re.MULTILINE)
    target = re.search(r"^\s*\.target\s+([A-Za-z0-9_]+)", m.ptx, re.MULTILINE)
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


def _entries(ptx: str) -> dict[str, list[int]]:
    """Each .entry of the PTX and the byte size of each of its parameters, or -1 where the
    declaration is not one this reader understands."""
    entries = {}
    for match in re.finditer(r"\.entry\s+([A-Za-z_$%][A-Za-z0-9_$]*)\s*\(([^)]*)\)", ptx):
        sizes = []
        for declaration in filter(str.strip, match.group(2).split(",")):
            kind = re.search(r"\.[usbf](8|16|32|64)\b", declaration)
            count = re.search(r"\[(\d+)\]\s*$", declaration)
            sizes.append(-1 if kind is None else int(kind.group(1)) // 8 * (int(count.group(1)) if count else 1))
        entries[match.group(1)] = sizes
    return entries


def _check_launch(m: Manifest, entries, program: Program, launch: Launch, where: str, buffer, fail) -> None:
    parameters = entries.get(launch.kernel)
    if parameters is None:
        fail(f"{where}: kernel {launch.kernel!r} is not an .entry of the PTX module")
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
    for axis, (size, limit) in enumerate(zip(launch.grid, MAX_GRID, strict=True)):
        if size > limit:
            fail(f"{where}: grid[{axis}] = {size}, more than CUDA's {limit}")
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
