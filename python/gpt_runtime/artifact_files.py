"""Opening an artifact's files as files from a stranger: only a regular file whose real path stays
inside the artifact directory, opened without waiting on a FIFO, read with a size bound, and JSON
with a nesting bound. Every refusal is an ArtifactError naming the file.

An artifact is copied from another machine, so a symbolic link in it may lead anywhere (to
/etc/shadow, whose text an error message would then quote; to /dev/zero, which never ends), and
manifest.json may be a FIFO that blocks a plain open() forever. python/gpt/model_files.py does the
same for model directories; gpt_runtime never imports gpt, so this is its own, in ArtifactError's
terms. A model file given for an artifact's weights (gpt_runtime/model_weights.py) is read by the
same rules, its refusals a ModelFileError (the `error` argument)."""

import json
import os
import stat
from typing import Any

from .errors import ArtifactError

# Real manifests and safetensors headers nest a few levels (programs[i].launches[j].args[k]); the
# bound is far above that and far below the interpreter's recursion limit, so that no later walk
# over the value (the schema check, repr in a message) can overflow the stack.
MAX_JSON_DEPTH = 64
_READ_CHUNK = 1 << 20


def resolve_inside(directory: str, name: str, field: str | None = None) -> str:
    """The path of `name` in `directory`, after checking that it does not lead outside it (through
    a symbolic link: the manifest's own file-name pattern already refuses "../"). FileNotFoundError
    when nothing is there, a dangling link included; `field` names the manifest key in a refusal."""
    path = os.path.join(directory, name)
    root = os.path.realpath(directory)
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        named = f"{field} " if field else ""
        raise ArtifactError(f"{path}: {named}leads outside the artifact directory (to {real}); refused")
    if not os.path.exists(real):
        raise FileNotFoundError(path)
    return path


def open_regular(
    path: str, max_bytes: int | None, what: str, error: type[Exception] = ArtifactError
) -> tuple[int, int]:
    """A descriptor open for reading on `path`, which must be a regular file of at most
    `max_bytes` bytes (no bound with None), and its size. The caller closes the descriptor.
    ArtifactError (or `error`) naming the file otherwise; FileNotFoundError when it is missing."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat below refuses it. It changes
    # nothing for a regular file.
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as failure:
        raise error(f"{path}: cannot be opened: {failure.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: not a regular file (a FIFO, a device or a directory); refused")
        if max_bytes is not None and info.st_size > max_bytes:
            raise error(f"{path}: {info.st_size} bytes, more than a {what} can have ({max_bytes})")
        return fd, info.st_size
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str, max_bytes: int, what: str, error: type[Exception] = ArtifactError) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes` of them (a file that grows while
    it is read is refused as well)."""
    fd, _ = open_regular(path, max_bytes, what, error)
    try:
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(_READ_CHUNK, max_bytes + 1 - total))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise error(f"{path}: more than the {max_bytes} bytes a {what} can have")
    except OSError as failure:
        raise error(f"{path}: cannot be read: {failure.strerror}") from None
    finally:
        os.close(fd)


def parse_json(
    data: bytes, path: str, what: str, unreadable: str = "not readable as JSON", error: type[Exception] = ArtifactError
) -> Any:
    """`data` (UTF-8 JSON) parsed, nesting at most MAX_JSON_DEPTH levels; a syntax error is
    reported as `unreadable`."""
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as failure:
        raise error(f"{path}: the {what} is not UTF-8 text (byte {failure.start})") from None
    except RecursionError:
        raise error(f"{path}: the {what} nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as failure:  # JSONDecodeError, and an integer of more than 4300 digits
        raise error(f"{path}: {unreadable}: {failure}") from None
    where = too_deep(value, MAX_JSON_DEPTH)
    if where is not None:
        raise error(f"{path}: the {what} nests deeper than {MAX_JSON_DEPTH} levels (at {where})")
    return value


def too_deep(value: Any, limit: int) -> str | None:
    """The JSON path of a place nested more than `limit` containers deep in `value`, else None.
    Iterative, so that it cannot overflow the stack it protects; a place's path is spelled only
    for the one reported (each entry links to its parent's)."""
    stack: list[tuple[Any, int, tuple | None]] = [(value, 1, None)]
    while stack:
        node, depth, trail = stack.pop()
        if isinstance(node, dict):
            items = node.items()
        elif isinstance(node, list):
            items = enumerate(node)
        else:
            continue
        if depth > limit:
            return _spell(trail)
        stack.extend((child, depth + 1, (key, isinstance(node, list), trail)) for key, child in items)
    return None


def _spell(trail: tuple | None) -> str:
    parts = []
    while trail is not None:
        key, indexed, trail = trail
        parts.append(f"[{key}]" if indexed else f".{key}")
    return "".join(reversed(parts)).lstrip(".") or "(top level)"
