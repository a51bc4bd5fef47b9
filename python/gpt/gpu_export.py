"""GPT.export: a model compiled for an NVIDIA GPU, written as an artifact directory (docs/GPU.md)
that `gpt_runtime` runs with only the CUDA driver.

The compiler (cc/codegen/gpu) forms the programs and emits the PTX; this module adds what only
the Python side knows (the config, the end-of-generation ids, the tokenizer) and writes the
weights in the layouts and dtypes the manifest names, or, for weights "none:f32" / "none:bf16",
no weights but the recipe that makes each weight buffer from a GGUF file or a HF directory at load
(format version 2: gpt_runtime.load(ARTIFACT, model=PATH), docs/GPU.md)."""

import dataclasses
import errno
import json
import os
import re
import secrets
import shutil
import stat

import numpy as np

from gpt import _gpt, architecture_weights, architectures, cuda_tools

ARTIFACT_WEIGHTS = "weights.safetensors"
ARTIFACT_TOKENIZER = "tokenizer.json"
ARTIFACT_MANIFEST = "manifest.json"
ARTIFACT_FORMAT = "gpt.gpu-artifact"  # the manifest's "format" (cc/codegen/gpu/GpuArtifact.cpp)
_WEIGHT_FORMATS = ("f32", "bf16")
# export's `weights` for an artifact of programs alone: the weights come from the model file at load.
_NO_WEIGHTS = "none"
# The manifest's format version: 1 holds its weights; 2 names the model file's tensors instead, which
# a version-1 runtime refuses by the version number rather than failing on a missing weights file.
FORMAT_WITH_WEIGHTS = 1
FORMAT_WITHOUT_WEIGHTS = 2
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
    parts = architecture_weights.hf_parts(config)
    for buffer in manifest["buffers"]:
        if buffer["role"] != "weight":
            continue
        names, linear = parts.get(buffer["name"], ([buffer["name"]], False))
        if buffer["layout"] == "transposed":  # the compiler's [in, out] transposed back
            buffer["hf"] = {"names": names, "transpose": not linear, "axis": 0}
        else:
            buffer["hf"] = {"names": names, "transpose": linear, "axis": 1 if linear else 0}


def parse_weights(weights: str) -> tuple[str, bool]:
    """(the dtype the kernels read, whether the artifact holds the weights) of export's `weights`:
    "f32" or "bf16" (written into the artifact), or "none", "none:f32" or "none:bf16" (no weights:
    read from the model file at load, in that dtype; "none" is "none:f32")."""
    if weights in _WEIGHT_FORMATS:
        return weights, True
    if isinstance(weights, str) and weights.partition(":")[0] == _NO_WEIGHTS:
        dtype = weights.partition(":")[2] or "f32"
        if dtype in _WEIGHT_FORMATS:
            return dtype, False
    expected = ", ".join(repr(w) for w in (*_WEIGHT_FORMATS, "none", "none:f32", "none:bf16"))
    raise ValueError(f"unknown GPU weight format {weights!r}; expected one of {expected}")


def _gguf_recipes_possible(config) -> str | None:
    """None when a GGUF file (llama.cpp's converter's names and layouts) can hold this model's
    weights, else why not."""
    if config.spec.compiler_names == "gpt2" and config.pos_embedding != "learned":
        return "GGUF's gpt2 architecture has learned positions"
    if config.spec.compiler_names != "gpt2" and config.rope_layout != "half" and config.spec.gguf_rope_layout == "half":
        return f"a {config.architecture} GGUF file stores q/k rows for rotate-half rope, not interleaved"
    return None


def describe_gguf_sources(manifest: dict, config) -> None:
    """Gives each weight buffer `gguf`: how to make its tensor from a GGUF file of llama.cpp's
    converter, as `hf` does from a HF checkpoint: each named tensor in its numpy shape (ne
    reversed), its rows un-permuted within `permute_heads[k]` heads where that is not null (llama.cpp
    permutes a `llama` file's q/k rows for its interleaved rope; gguf_llama.unpermute_rows), then
    stored = concatenate([t.T if transpose else t ...], axis). Needs describe_hf_sources first."""
    groups = architectures.compiler_groups(config)
    # A `llama` file's q/k rows are permuted from HF's rotate-half order; a model computing rope on
    # interleaved pairs reads them as stored.
    permuted = config.spec.gguf_rope_layout == "interleaved" and config.rope_layout == "half"
    heads = {".attn_q.weight": config.n_head, ".attn_q.bias": config.n_head}
    heads.update({".attn_k.weight": config.n_kv_head, ".attn_k.bias": config.n_kv_head})
    for buffer in manifest["buffers"]:
        if buffer["role"] != "weight":
            continue
        parts = groups[buffer["name"]]
        names = [architectures.layer_name(p.gguf, i) for p, i in parts]
        (transposed,) = {p.gguf_transposed for p, _ in parts}  # GGUF stores a group's parts alike
        recipe = buffer["hf"]
        buffer["gguf"] = {
            "names": names,
            # A GGUF tensor is the HF one, transposed where gguf_transposed says (GPT-2's Conv1D).
            "transpose": recipe["transpose"] != transposed,
            "axis": recipe["axis"],
            "permute_heads": [
                next((n for suffix, n in heads.items() if name.endswith(suffix)), None) if permuted else None
                for name in names
            ],
        }


def _check(key, value, default=None) -> dict:
    entry = {"key": key, "value": value}
    if default is not None:
        entry["default"] = default
    return entry


def describe_model_source(config) -> dict:
    """What a model file must say to be this artifact's model, beyond its tensors' shapes (which
    the recipes and the buffers' shapes hold): GGUF metadata keys and HF config.json keys, each
    `value` ("default" when the file may leave it out), the tensors a file may have that the
    artifact does not read (`optional`, HF: by name suffix), and GGUF tensors whose values matter
    (Llama 3's rope_freqs.weight)."""
    arch = config.architecture
    eps = float(config.layer_norm_eps)
    if config.spec.compiler_names == "gpt2":
        gguf = {
            "checks": [
                _check("general.architecture", "gpt2"),
                _check("gpt2.block_count", config.n_layer),
                _check("gpt2.embedding_length", config.n_embd),
                _check("gpt2.attention.head_count", config.n_head),
                _check("gpt2.attention.layer_norm_epsilon", eps),
            ],
            # Older converters wrote a copy of the tied head.
            "optional": ["output.weight"],
        }
        hf = {
            "checks": [
                _check("model_type", "gpt2", "gpt2"),
                _check("n_layer", config.n_layer),
                _check("n_head", config.n_head),
                _check("n_embd", config.n_embd),
                _check("layer_norm_epsilon", eps, 1e-5),
            ],
            "optional": ["lm_head.weight", ".attn.bias", ".attn.masked_bias"],
            # A checkpoint saved from GPT2Model (not GPT2LMHeadModel) names its tensors without it.
            "prefix": "transformer.",
        }
    else:
        scaling = config.rope_scaling
        gguf = {
            "checks": [
                _check("general.architecture", arch),
                _check(f"{arch}.block_count", config.n_layer),
                _check(f"{arch}.embedding_length", config.n_embd),
                _check(f"{arch}.feed_forward_length", config.n_ff),
                _check(f"{arch}.attention.head_count", config.n_head),
                _check(f"{arch}.attention.head_count_kv", config.n_kv_head, config.n_head),
                _check(f"{arch}.attention.layer_norm_rms_epsilon", eps),
                _check(f"{arch}.rope.freq_base", float(config.rope_base), 10000.0),
                _check(f"{arch}.rope.dimension_count", config.head_size, config.head_size),
            ],
            "optional": [],
        }
        if scaling is not None:
            from gpt import gguf_llama

            gguf["values"] = {"rope_freqs.weight": gguf_llama.llama3_rope_factors(config, scaling).tolist()}
        rope_type = ["rope_parameters.rope_type", "rope_scaling.rope_type", "rope_scaling.type"]
        hf = {
            "checks": [
                _check("model_type", arch),
                _check("num_hidden_layers", config.n_layer),
                _check("hidden_size", config.n_embd),
                _check("intermediate_size", config.n_ff),
                _check("num_attention_heads", config.n_head),
                _check("num_key_value_heads", config.n_kv_head, config.n_head),
                _check("rms_norm_eps", eps, 1e-6),
                _check(["rope_parameters.rope_theta", "rope_theta"], float(config.rope_base), 10000.0),
                _check(rope_type, "default" if scaling is None else "llama3", "default"),
                _check("tie_word_embeddings", config.tied_head, False),
            ],
            "optional": ["rotary_emb.inv_freq"] + (["lm_head.weight"] if config.tied_head else []),
        }
        if scaling is not None:
            for field, key in (
                ("factor", "factor"),
                ("low_freq_factor", "low_freq_factor"),
                ("high_freq_factor", "high_freq_factor"),
                ("original_max_position_embeddings", "original_max_position_embeddings"),
            ):
                keys = [f"rope_parameters.{key}", f"rope_scaling.{key}"]
                hf["checks"].append(_check(keys, getattr(scaling, field)))
    source = {"architecture": arch, "hf": hf}
    if _gguf_recipes_possible(config) is None:
        source["gguf"] = gguf
    return source


# Architectures whose GPU programs have not run on a device against the CPU's logits
# (tools/device_check.sh): refused rather than exported unchecked.
_NOT_CHECKED_ON_A_GPU = frozenset({"gemma3"})


def compile_artifact(model, target: str = "cuda:sm_90", tokens=(1, 128), weights: str = "f32", cache_len=None) -> dict:
    """The compiler's parts for `model` (see _gpt.compile_gpu_artifact) and the full manifest.
    `weights` "none:f32" / "none:bf16" ("none": f32) makes a version-2 manifest, whose weights come
    from a model file at load (parse_weights)."""
    chip = parse_target(target)
    dtype, holds_weights = parse_weights(weights)
    config = model.config
    if config.architecture in _NOT_CHECKED_ON_A_GPU:
        raise ValueError(
            f"model.export: {config.architecture} models are not exported for the GPU yet: their GPU programs "
            "(norms of q and k, sandwich norms, per-layer windows) have not run against the CPU's logits on a device"
        )
    tokens = sorted({int(t) for t in tokens})
    if not tokens or tokens[0] < 1 or tokens[-1] > config.block_size:
        raise ValueError(f"tokens must lie in 1..{config.block_size}, got {tokens}")
    cache_len = config.block_size if cache_len is None else int(cache_len)
    if not tokens[-1] <= cache_len <= config.block_size:
        raise ValueError(f"cache_len must lie in {tokens[-1]}..{config.block_size}, got {cache_len}")
    parts = _gpt.compile_gpu_artifact(config, chip, tokens, cache_len, dtype == "bf16", cuda_tools.libdevice_path())
    manifest = json.loads(parts["manifest"])
    manifest["config"] = dataclasses.asdict(config)
    manifest["vocab_size"] = config.vocab_size
    eos = sorted(model.end_of_generation)
    manifest["eos_token_id"] = eos[0] if eos else None
    manifest["eos_token_ids"] = eos
    manifest["weights"] = {"file": ARTIFACT_WEIGHTS, "dtype": dtype}
    describe_hf_sources(manifest, config)
    if not holds_weights:
        manifest["version"] = FORMAT_WITHOUT_WEIGHTS
        manifest["weights"] = {"file": None, "dtype": dtype, "source": describe_model_source(config)}
        if "gguf" in manifest["weights"]["source"]:
            describe_gguf_sources(manifest, config)
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
    if write_weights and manifest["weights"]["file"] is not None:
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
