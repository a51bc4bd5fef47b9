"""The packed-weight cache: a model file's weights as the compiled model lays them out (lane words,
fp16 scales, panels; cc/runtime/PackedWeights.h), kept in the disk cache's `weights/` directory so
that the next load of the same file reads them instead of converting and repacking them.

llama.cpp computes on its file's blocks as stored and maps them; this compiler repacks them for its
own kernels, seconds at 1.7B parameters and half a minute at 8B. With the packed bytes on disk, the
second start of a model reads them at the page cache's speed (issue 39: load time).

An entry is named by a hash of everything its bytes are a function of: the model file (its real
path, device, inode, size and modification time; every file of a checkpoint directory), the code
that read and converted it (this package's Python sources; the compiler build and each parameter's
format, layout and shape come from the compiled model: CompiledModel.packed_weights_key). Its
header holds the whole key and a checksum of the data: an entry that does not match is not used,
and is replaced. Entries beyond `CompileOptions.weight_cache_max_bytes` are evicted, least
recently used first; an entry is not written where the disk would be left with less than
`_FREE_MARGIN` free. Nothing here ever fails a load: a cache that cannot be read or written is
passed over.

A first load writes its entry on a thread of its own (store), so that the load returns and the first
token compiles and runs while a gigabyte goes to disk; the entry appears under its name only once
whole (written to a temporary, then renamed), so a process that ends mid-write leaves nothing a later
load would use. The process waits for the write at exit, as for any thread that is not a daemon, and
a later load of the same entry in the same process waits for it (bind)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import shutil
import stat
import threading
import time
import warnings
from typing import Any

DIRECTORY = "weights"
SUFFIX = ".packed"
_TEMPORARY_MARKER = ".packed.tmp-"
# What a write leaves free at least: a cache must never be what fills a disk.
_FREE_MARGIN = 2 << 30
# The background writer's nice value where SCHED_IDLE cannot be set: about a tenth of a core against a busy thread.
_WRITER_NICENESS = 10


# The writes in flight in this process, by entry path: one per entry (two writers of one entry
# would share its temporary, which is named by the process), and a load of the entry waits for it.
_writes: dict[str, threading.Thread] = {}
_writes_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class WeightCacheEntry:
    path: str
    bytes: int
    last_used: float  # seconds since the epoch: the entry's last write or load


@functools.cache
def _code_digest() -> str:
    """A digest of this package's Python sources: the readers and converters whose output the
    packed bytes are (the compiled code's build is in the model's own key)."""
    root = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for directory, subdirectories, files in os.walk(root):
        subdirectories.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                digest.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as source:
                    digest.update(source.read())
    return digest.hexdigest()


def source_key(path: str | os.PathLike, weights: str) -> str | None:
    """The key of a model file or checkpoint directory as loaded with CompileOptions.weights
    `weights`, or None when it cannot be identified (then nothing is cached)."""
    try:
        real = os.path.realpath(os.fspath(path))
        files = [real]
        if os.path.isdir(real):
            files = [os.path.join(real, name) for name in sorted(os.listdir(real))]
        identities = []
        for name in files:
            status = os.stat(name)
            identities.append(f"{name} {status.st_dev} {status.st_ino} {status.st_size} {status.st_mtime_ns}")
    except OSError:
        return None
    return "\n".join([f"weights {weights}", f"code {_code_digest()}", *identities])


def directory(options) -> str:
    """The directory of the packed-weight entries: `weights/` in the disk cache's directory, or
    "" when the disk cache or the weight cache is off."""
    base = options.resolved_cache_dir()
    if not base or options.resolved_weight_cache_max_bytes() == 0:
        return ""
    return os.path.join(base, DIRECTORY)


def _private(where: str) -> bool:
    """Whether `where` is a directory of this user's that no one else may write: weights read from
    any other could be anyone's (the program cache refuses such a directory too)."""
    try:
        status = os.lstat(where)
    except OSError:
        return False
    return stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid() and not status.st_mode & 0o022


def _entry_path(compiled, options, source: str | None) -> str | None:
    """Where `compiled`'s entry for `source` (a source_key) lies, or None when nothing is cached:
    no source, the cache off, or a compiler build that cannot be told apart from others.

    Worked out once per (compiled model, source, directory): a load that misses asks in bind and
    again in store, and the answer is kept on the compiled model (the key is a function of it)."""
    where = directory(options)
    if not source or not where:
        return None
    known = getattr(compiled, "_packed_weights_entry", None)
    if known is not None and known[:2] == (source, where):
        return known[2]
    model_key = compiled.packed_weights_key(source)
    path = os.path.join(where, hashlib.sha256(model_key.encode()).hexdigest()[:40] + SUFFIX) if model_key else None
    try:
        compiled._packed_weights_entry = (source, where, path)
    except AttributeError:  # a compiled model that takes no attributes: worked out each time
        pass
    return path


def bind(compiled, arguments: list[Any], options, source: str | None) -> bool:
    """Binds `compiled`'s weights from the cache entry of `source` (a source_key); True when it
    did. `arguments` as set_weights takes them."""
    path = _entry_path(compiled, options, source)
    if path is None:
        return False
    wait(path)  # an earlier load of this process may be writing it
    if not _private(os.path.dirname(path)) or not os.path.isfile(path):
        return False
    if not compiled.bind_packed_weights(arguments, path, source):
        return False
    try:
        os.utime(path)  # a load is a use: eviction goes by modification time
    except OSError:
        pass
    return True


def store(compiled, options, source: str | None) -> str | None:
    """Starts writing `compiled`'s bound weights as the cache entry of `source` on a thread of its
    own (the entry's eviction of others follows the write there); returns the entry's path, or
    None when nothing is to be written (no source, the cache off or smaller than the entry, or too
    little disk or a directory that cannot be used, both warned about here; a failed write is
    warned about by its thread).
    The weights must stay bound, unchanged, while it writes: a compiled model's do, for its life."""
    path = _entry_path(compiled, options, source)
    if path is None:
        return None
    where = os.path.dirname(path)
    size = sum(bytes_ for _, _, bytes_ in compiled.stored_arguments())
    limit = options.resolved_weight_cache_max_bytes()
    if size > limit:
        return None
    try:
        os.makedirs(where, mode=0o700, exist_ok=True)
        if not _private(where):
            raise OSError(f"{where} is not a directory of this user's that only it may write")
        if shutil.disk_usage(where).free < size + _FREE_MARGIN:
            raise OSError(
                f"their {size / 2**30:.2f} GiB would leave less than {_FREE_MARGIN / 2**30:.0f} GiB free in {where}"
            )
    except OSError as error:
        warnings.warn(f"the packed weights were not cached: {error}", RuntimeWarning, stacklevel=3)
        return None
    with _writes_lock:
        if path in _writes:  # another load of this process writes the same bytes
            return path
        # Not a daemon: at exit Python waits for the write, where a daemon thread would be torn down
        # inside the C++ write (abort) and leave a temporary behind for nothing.
        writer = threading.Thread(
            target=_write, args=(compiled, path, source, where, limit), name="gpt-weight-cache", daemon=False
        )
        _writes[path] = writer
    try:
        writer.start()
    except RuntimeError as error:  # no thread to be had: the entry is left for a later load
        with _writes_lock:
            _writes.pop(path, None)
        warnings.warn(f"the packed weights were not cached: {error}", RuntimeWarning, stacklevel=3)
        return None
    return path


def _write(compiled, path: str, source: str, where: str, limit: int) -> None:
    """The thread of store(): writes the entry, then evicts beyond `limit`."""
    _yield_to_the_model()
    try:
        compiled.write_packed_weights(path, source)
        _evict(where, limit, keep=path)
    except (OSError, RuntimeError) as error:
        warnings.warn(f"the packed weights were not cached: {error}", RuntimeWarning, stacklevel=2)
    finally:
        with _writes_lock:
            _writes.pop(path, None)


def _yield_to_the_model() -> None:
    """Lets the write run only on cores the model leaves idle: the first token's compiles and runs
    come first. SCHED_IDLE (Linux, this thread alone) where it can be set, else a nice value. A
    write at nice 10 still took about a tenth of a core from the compiles, and the page-cache pages
    it fills cost system time in them (A/B, 4 alternated first starts at 1.7B: first token 1.61 s
    against 1.72, medians)."""
    thread = threading.get_native_id()
    try:
        os.sched_setscheduler(thread, os.SCHED_IDLE, os.sched_param(0))
        return
    except (AttributeError, OSError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, thread, _WRITER_NICENESS)
    except (AttributeError, OSError):  # no per-thread priority here: the write shares the cores evenly
        pass


def wait(path: str | None = None) -> None:
    """Waits for this process's write of the entry at `path` (every write in flight when None) to end."""
    with _writes_lock:
        writers = list(_writes.values()) if path is None else [_writes[path]] if path in _writes else []
    for writer in writers:
        writer.join()


def entries(where: str) -> list[WeightCacheEntry]:
    """The entries in `where`, most recently used first (none when it does not exist)."""
    found = []
    try:
        names = os.listdir(where)
    except OSError:
        return []
    for name in names:
        if not name.endswith(SUFFIX):
            continue
        try:
            status = os.stat(os.path.join(where, name))
        except OSError:  # evicted by another process meanwhile
            continue
        found.append(WeightCacheEntry(os.path.join(where, name), status.st_size, status.st_mtime))
    return sorted(found, key=lambda entry: entry.last_used, reverse=True)


def clear(where: str) -> int:
    """Removes every entry (and temporaries a dead writer left); returns how many files went."""
    removed = 0
    try:
        names = os.listdir(where)
    except OSError:
        return 0
    for name in names:
        if name.endswith(SUFFIX) or _TEMPORARY_MARKER in name:
            try:
                os.unlink(os.path.join(where, name))
                removed += 1
            except OSError:
                pass
    return removed


def _evict(where: str, limit: int, keep: str) -> None:
    now = time.time()
    for name in os.listdir(where):
        path = os.path.join(where, name)
        try:  # a temporary an hour old is a dead writer's
            if _TEMPORARY_MARKER in name and now - os.stat(path).st_mtime > 3600:
                os.unlink(path)
        except OSError:
            pass
    total = 0
    for entry in entries(where):
        total += entry.bytes
        if total > limit and entry.path != keep:
            try:
                os.unlink(entry.path)
            except OSError:  # another process evicted it first
                pass
            total -= entry.bytes
