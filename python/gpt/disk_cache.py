"""The on-disk compile cache: what `python -m gpt cache` lists and clears.

Each entry is one compiled program (object code with its key and checksum, see
cc/runtime/ObjectCache.h). Models write entries as they compile and evict the least recently used
beyond `CompileOptions.cache_max_bytes`; this module only inspects and empties the directory.
"""

import dataclasses
import os

from gpt import _gpt
from gpt.config import CompileOptions


@dataclasses.dataclass(frozen=True)
class CacheEntry:
    path: str
    bytes: int
    last_used: float  # seconds since the epoch: the entry's last write or load


def default_directory() -> str:
    """The directory models use by default: `$GPT_CACHE_DIR`, else `~/.cache/gpt/jit`."""
    return CompileOptions().resolved_cache_dir()


def compiler_identity() -> str:
    """This build of the compiler as every entry's key names it ('build-id:<hex>', the extension's
    GNU build id): a program is only loaded by the build that compiled it, which finds it from the
    builder's inputs without building a module or running the pass pipeline. Empty when the build cannot be told apart
    from others; models then compile every program."""
    return _gpt.compiler_identity()


def entries(directory: str | os.PathLike | None = None) -> list[CacheEntry]:
    """The cache's entries, most recently used first (none when the directory does not exist)."""
    path = os.path.expanduser(os.fspath(directory)) if directory is not None else default_directory()
    return [CacheEntry(*entry) for entry in _gpt.disk_cache_entries(path)]


def clear(directory: str | os.PathLike | None = None) -> int:
    """Removes every entry (and temporaries a dead writer left); returns how many files went."""
    path = os.path.expanduser(os.fspath(directory)) if directory is not None else default_directory()
    return _gpt.clear_disk_cache(path)
