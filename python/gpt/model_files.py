"""Reading the files of a model directory from a stranger: config.json, generation_config.json,
tokenizer_config.json, tokenizer.json, chat_template.jinja, the safetensors index and shards.

A model directory is downloaded from anyone, so each of its files is opened as untrusted: only a
regular file whose real path stays inside the directory is read (a symbolic link to /etc/passwd
would otherwise be rendered into a prompt that the model may repeat to any client; a FIFO would
block the load forever; /dev/zero would never end), with a size bound, as UTF-8, and JSON with a
nesting bound. Every refusal is a gpt.ModelFileError naming the file.

One link that leaves the directory is followed: the Hugging Face hub cache's. A directory that
`huggingface_hub.snapshot_download` returns, `.../models--org--name/snapshots/<revision>`, holds
links to `../../blobs/<hash>`, the same repository's content-addressed files; refusing them would
refuse every downloaded model. And the package's own models (the embedded byte-level GPT in
gpt/data) are as trusted as its code: Bazel lays the package out as a tree of links into the
source tree. A link anywhere else out of the directory is refused.

Large tensor files (safetensors) are mapped by their own reader (gpt.weights), after
regular_file_inside has checked them; this module reads whole the files a loader reads whole.
"""

import dataclasses
import json
import os
import stat

from gpt.errors import ModelFileError
from gpt_runtime.model_weights import allowed_roots

# A config or tokenizer_config.json is kilobytes; the largest real ones (with a chat template and
# thousands of added tokens) are a few MB; the largest tokenizer.json, Gemma 3's, is 33 MB.
MAX_CONFIG_BYTES = 64 * 2**20

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _in_package(directory: str) -> bool:
    """Whether `directory` is inside this package (by its path as given, or as resolved)."""
    return any(
        os.path.commonpath([package, path]) == package
        for package, path in (
            (_PACKAGE, os.path.abspath(directory)),
            (os.path.realpath(_PACKAGE), os.path.realpath(directory)),
        )
    )


def resolve_inside(directory: str, name: str) -> str:
    """The real path of `name` in `directory`, refusing (gpt.ModelFileError) a name or link that
    leads outside it. Raises FileNotFoundError when there is no such file (a dangling link
    included)."""
    path = os.path.join(directory, name)
    if "\0" in path:
        raise ModelFileError(f"{path!r}: a file name with a NUL character; refused")
    real = os.path.realpath(path)
    inside = any(os.path.commonpath([root, real]) == root for root in allowed_roots(directory))
    if not inside and not _in_package(directory):
        raise ModelFileError(
            f"{path}: leads outside the model directory {directory} (to {real}); refused: a model's files are "
            f"read from inside its directory (copy the file in)"
        )
    if not os.path.exists(real):
        raise FileNotFoundError(f"no such file: {path}")
    return real


def present(directory: str, name: str) -> bool:
    """Whether `directory` has an entry `name` of any kind (a dangling link, a FIFO included): an
    optional file that is there is read through read_bytes, which refuses what it must not read,
    instead of being passed over as absent the way os.path.isfile would pass it."""
    return "\0" not in name and os.path.lexists(os.path.join(directory, name))


def regular_file_inside(directory: str, name: str) -> str:
    """The real path of the regular file `name` inside `directory`, for a reader that opens it
    itself (the safetensors shards, which are mapped): resolve_inside, then a stat that refuses a
    FIFO, a device or a directory (gpt.ModelFileError)."""
    path = os.path.join(directory, name)
    real = resolve_inside(directory, name)
    try:
        mode = os.stat(real).st_mode
    except OSError as e:
        raise ModelFileError(f"{path}: cannot be read: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        raise ModelFileError(f"{path}: not a regular file ({_kind(mode)}); refused")
    return real


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    kinds += ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((kind for test, kind in kinds if test(mode)), "not a plain file")


def read_bytes(directory: str, name: str, max_bytes: int = MAX_CONFIG_BYTES) -> bytes:
    """The bytes of the regular file `name` inside `directory`, at most `max_bytes` of them.
    FileNotFoundError when it is missing; gpt.ModelFileError for a link out of the directory, a
    FIFO, a device, a directory, or a file over the bound."""
    path = os.path.join(directory, name)
    real = resolve_inside(directory, name)
    # O_NONBLOCK: opening a FIFO must not wait for a writer (the fstat below refuses it);
    # O_NOFOLLOW: the real path has no link left, unless one was put there since.
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except OSError as e:
        raise ModelFileError(f"{path}: cannot be opened: {e.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ModelFileError(f"{path}: not a regular file ({_kind(info.st_mode)}); refused")
        if info.st_size > max_bytes:
            raise ModelFileError(f"{path} is {info.st_size} bytes, more than the {max_bytes} allowed for this file")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # the file grew while it was read
                raise ModelFileError(f"{path} has more than the {max_bytes} bytes allowed for this file")
        return b"".join(chunks)
    except OSError as e:
        raise ModelFileError(f"{path}: cannot be read: {e.strerror}") from None
    finally:
        os.close(fd)


def read_text(directory: str, name: str, max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """read_bytes decoded as UTF-8 (gpt.ModelFileError naming the file and the byte otherwise)."""
    data = read_bytes(directory, name, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModelFileError(
            f"{os.path.join(directory, name)} is not UTF-8 text: byte {e.start} is {data[e.start : e.start + 1]!r}"
        ) from None


def read_json(directory: str, name: str, max_bytes: int = MAX_CONFIG_BYTES):
    """read_text parsed as JSON (gpt.ModelFileError naming the file when it is not, or when it nests
    deeper than the interpreter's recursion limit: json.loads recurses once per level)."""
    path = os.path.join(directory, name)
    text = read_text(directory, name, max_bytes)
    try:
        return json.loads(text)
    except RecursionError:
        raise ModelFileError(f"{path} nests JSON arrays or objects too deeply to read") from None
    except ValueError as e:  # json.JSONDecodeError, or an integer of more digits than int() converts
        raise ModelFileError(f"{path} is not valid JSON: {e}") from None


def read_json_object(directory: str, name: str, max_bytes: int = MAX_CONFIG_BYTES) -> dict:
    """read_json of a file that must hold a JSON object (gpt.ModelFileError otherwise)."""
    value = read_json(directory, name, max_bytes)
    if not isinstance(value, dict):
        raise ModelFileError(f"{os.path.join(directory, name)} holds {json_kind(value)}, expected a JSON object")
    return value


def json_kind(value) -> str:
    """What a JSON value is, in JSON's words ("an array", "a string", "null")."""
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array"}
    return "null" if value is None else kinds.get(type(value), "an object" if isinstance(value, dict) else "a value")


def short(value) -> str:
    """repr(value), cut to 60 characters: a message quotes a stranger's value, not all of it."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- tokenizer_config.json --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
    """What the loaders take from a HF directory's tokenizer_config.json, type-checked:
    `chat_template` (the string, or the template named "default" of a list of named templates;
    None when there is none), the special tokens' text (None when absent or null), and
    `added_tokens` (added_tokens_decoder: id -> text)."""

    chat_template: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None
    unk_token: str | None = None
    pad_token: str | None = None
    added_tokens: dict[int, str] = dataclasses.field(default_factory=dict)


def read_tokenizer_config(directory: str) -> TokenizerConfig:
    """The TokenizerConfig of `directory`'s tokenizer_config.json (an empty one when the directory
    has none). gpt.ModelFileError, naming the file and the key, for a file read_json_object refuses
    or a key of the wrong type: the special tokens are strings or AddedToken objects
    {"content": "..."}; chat_template a string or a list of {"name": ..., "template": ...}."""
    name = "tokenizer_config.json"
    if not present(directory, name):
        return TokenizerConfig()
    path = os.path.join(directory, name)
    config = read_json_object(directory, name)
    tokens = {
        key: _token_text(config.get(key), path, key) for key in ("bos_token", "eos_token", "unk_token", "pad_token")
    }
    return TokenizerConfig(
        chat_template=_chat_template(config.get("chat_template"), path),
        added_tokens=_added_tokens(config.get("added_tokens_decoder"), path),
        **tokens,
    )


def _token_text(value, path: str, key: str) -> str | None:
    """A special token: a string, an AddedToken object {"content": "..."}, or null."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        content = value.get("content")
        if isinstance(content, str):
            return content
        raise ModelFileError(f"{path}: {key}.content is {json_kind(content)} {short(content)}, expected a string")
    raise ModelFileError(
        f"{path}: {key} is {json_kind(value)} {short(value)}, expected a string or an object with a string content"
    )


def _chat_template(value, path: str) -> str | None:
    """chat_template: a string, or the "default" entry of a list of named templates."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise ModelFileError(
            f"{path}: chat_template is {json_kind(value)} {short(value)}, expected a string or a list of "
            f"named templates"
        )
    for i, entry in enumerate(value):
        if not (
            isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("template"), str)
        ):
            raise ModelFileError(
                f"{path}: chat_template[{i}] is {json_kind(entry)} {short(entry)}, expected an object with a string "
                f"name and a string template"
            )
    return next((entry["template"] for entry in value if entry["name"] == "default"), None)


def _added_tokens(value, path: str) -> dict[int, str]:
    """added_tokens_decoder: {"<id>": {"content": "...", ...}} as id -> text."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ModelFileError(f"{path}: added_tokens_decoder is {json_kind(value)} {short(value)}, expected an object")
    added = {}
    for key, entry in value.items():
        if not (key.isascii() and key.isdigit()) or len(key) > 10:
            raise ModelFileError(f"{path}: added_tokens_decoder key {short(key)} is not a token id")
        content = entry.get("content") if isinstance(entry, dict) else None
        if not isinstance(content, str):
            raise ModelFileError(
                f"{path}: added_tokens_decoder[{key!r}] is {json_kind(entry)} {short(entry)}, expected an object with "
                f"a string content"
            )
        added[int(key)] = content
    return added
