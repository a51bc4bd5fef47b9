"""A hand-made GPU artifact (docs/GPU.md) around toy_kernels.ptx, for gpt_runtime's tests: its
next token is known in closed form (next_token), so a test checks every token the runtime
produces, on the fake driver (fake_libcuda.c) here and on a real GPU alike."""

import copy
import ctypes
import json
import os
import shutil
import struct
import subprocess
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PTX = os.path.join(HERE, "toy_kernels.ptx")
VOCAB = 13  # what a user sees; the logits rows are ROW_STRIDE wide, the rest padding (100.0)
ROW_STRIDE = 16
BLOCK_SIZE = 32
CACHE_LENGTH = 32
SHIFT, SHIFT_BF16 = 3.0, 2.0  # the weights: f32, and bf16 (0x4000)
FORWARD_BUCKETS = (8, 32)
STEP_BUCKETS = (1, 4)
INPUT_BYTES = 1024
WORDS = [chr(ord("a") + i) for i in range(VOCAB)]  # the toy tokenizer's words, one per id

# Buffer indices.
SHIFT_BUFFER, SHIFT16_BUFFER, INPUTS, KEY0, VALUE0, KEY1, VALUE1, SCRATCH, LOGITS = range(9)


def next_token(sequence) -> int:
    """What the toy model predicts after `sequence` (toy_kernels.ptx's toy_logits)."""
    return int(sum(int(t) + 1 for t in sequence) + SHIFT + SHIFT_BF16) % VOCAB


def greedy(prompt, count: int, stop=()) -> list[int]:
    sequence, new = list(prompt), []
    for _ in range(count):
        token = next_token(sequence)
        if token in stop:
            break
        new.append(token)
        sequence.append(token)
    return new


def _place(buffer: int, offset: int = 0) -> dict:
    return {"buffer": buffer, "offset": offset}


def _launch(kernel: str, args: list) -> dict:
    # "op" says what a launch computes, for a reader: the runtime ignores it.
    return {"kernel": kernel, "grid": [1, 1, 1], "block": [1, 1, 1], "shared_bytes": 0, "args": args, "op": {}}


def _forward(tokens: int) -> dict:
    ids, positions = _place(INPUTS, 0), _place(INPUTS, 8 * tokens)
    return {
        "entry": "forward",
        "tokens": tokens,
        "inputs": {"token_ids": ids, "positions": positions},
        "launches": [
            # positions[0] is 0 in a forward program: the store's offset.
            _launch("toy_store", [ids, positions, _place(SCRATCH), {"i64": tokens}, {"i64": BLOCK_SIZE}]),
            _launch(
                "toy_logits",
                [
                    positions,
                    {"i64": 0},
                    _place(SCRATCH),
                    _place(SHIFT_BUFFER),
                    _place(SHIFT16_BUFFER),
                    _place(LOGITS),
                    {"i64": tokens},
                    {"i64": ROW_STRIDE},
                    {"i64": VOCAB},
                ],
            ),
        ],
        "logits": {"buffer": LOGITS, "offset": 0, "rows": tokens, "row_stride": ROW_STRIDE},
    }


def _step(tokens: int) -> dict:
    ids, positions = _place(INPUTS, 0), _place(INPUTS, 8 * tokens)
    last_row, offset = _place(INPUTS, 16 * tokens), _place(INPUTS, 16 * tokens + 8)
    store = [ids, offset, None, {"i64": tokens}, {"i64": CACHE_LENGTH}]
    return {
        "entry": "step",
        "tokens": tokens,
        "inputs": {"token_ids": ids, "positions": positions, "last_row": last_row, "cache_offset": offset},
        "launches": [
            _launch("toy_store", store[:2] + [_place(KEY0)] + store[3:]),
            # The logits read layer 1's cache: a step bound to the wrong cache reads another's sums.
            _launch("toy_store", store[:2] + [_place(KEY1)] + store[3:]),
            _launch(
                "toy_logits",
                [
                    positions,
                    last_row,
                    _place(KEY1),
                    _place(SHIFT_BUFFER),
                    _place(SHIFT16_BUFFER),
                    _place(LOGITS),
                    {"i64": 1},
                    {"i64": ROW_STRIDE},
                    {"i64": VOCAB},
                ],
            ),
        ],
        "logits": {"buffer": LOGITS, "offset": 0, "rows": 1, "row_stride": ROW_STRIDE},
    }


def manifest() -> dict:
    cache_bytes = 4 * CACHE_LENGTH
    return {
        "format": "gpt.gpu-artifact",
        "version": 1,
        "target": {"chip": "sm_80", "ptx_version": "7.0", "module": "kernels.sm_80.ptx"},
        "config": {"block_size": BLOCK_SIZE, "vocab_size": VOCAB, "n_layer": 2, "pos_embedding": "learned"},
        "eos_token_id": None,
        "weights": {"file": "weights.safetensors", "dtype": "f32"},
        "tokenizer": None,
        "vocab_size": VOCAB,
        "buffers": [
            {"name": "shift", "role": "weight", "bytes": 4, "dtype": "f32", "shape": [1], "layout": "as_given"},
            {"name": "shift_bf16", "role": "weight", "bytes": 2, "dtype": "bf16", "shape": [1], "layout": "as_given"},
            {"name": "inputs", "role": "input", "bytes": INPUT_BYTES},
            {"name": "cache.0.key", "role": "cache", "bytes": cache_bytes},
            {"name": "cache.0.value", "role": "cache", "bytes": cache_bytes},
            {"name": "cache.1.key", "role": "cache", "bytes": cache_bytes},
            {"name": "cache.1.value", "role": "cache", "bytes": cache_bytes},
            {"name": "scratch", "role": "scratch", "bytes": 4 * BLOCK_SIZE},
            {"name": "logits", "role": "output", "bytes": 4 * ROW_STRIDE * BLOCK_SIZE},
        ],
        "cache": {"length": CACHE_LENGTH, "layers": [{"key": KEY0, "value": VALUE0}, {"key": KEY1, "value": VALUE1}]},
        "programs": [_forward(t) for t in FORWARD_BUCKETS] + [_step(t) for t in STEP_BUCKETS],
    }


def write_safetensors(path: str, tensors: dict[str, tuple[str, list[int], bytes]]) -> None:
    """{name: (dtype, shape, raw bytes)} as safetensors lays them out (header padded to 8 bytes)."""
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def toy_weights() -> dict[str, tuple[str, list[int], bytes]]:
    bf16 = (np.array([SHIFT_BF16], np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return {
        "shift": ("F32", [1], np.array([SHIFT], np.float32).tobytes()),
        "shift_bf16": ("BF16", [1], bf16.tobytes()),
    }


def _parent(m: dict, path: str):
    """The node of manifest `m` that holds `path` (dotted, with list indices), and the last key."""
    *parents, last = path.split(".")
    node = m
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node, (int(last) if isinstance(node, list) else last)


def set_key(path: str, value):
    """A write_artifact edit that sets manifest[path] to `value`."""

    def edit(m):
        node, key = _parent(m, path)
        node[key] = value

    return edit


def delete_key(path: str):
    """A write_artifact edit that deletes manifest[path]."""

    def edit(m):
        node, key = _parent(m, path)
        del node[key]

    return edit


def write_artifact(directory: str, edit=None, weights=None, ptx: str | None = None, tokenizer: bool = False) -> str:
    """The toy artifact in `directory`; `edit(manifest)` changes the manifest first, `weights`
    replaces the tensors, `ptx` the module's text."""
    os.makedirs(directory, exist_ok=True)
    m = copy.deepcopy(manifest())
    if tokenizer:
        m["tokenizer"] = "tokenizer.json"
        _write_tokenizer(os.path.join(directory, "tokenizer.json"))
    if edit is not None:
        edit(m)
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump(m, f, indent=1)
    module = os.path.join(directory, "kernels.sm_80.ptx")
    if ptx is None:
        shutil.copyfile(PTX, module)
    else:
        with open(module, "w") as f:
            f.write(ptx)
    write_safetensors(os.path.join(directory, "weights.safetensors"), toy_weights() if weights is None else weights)
    return directory


def _write_tokenizer(path: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="a"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(path)


# -- the fake driver ------------------------------------------------------------------------------


def fake_libcuda() -> str:
    """The path of fake_libcuda.so: Bazel's in the runfiles, else built here with cc (a pytest run
    outside Bazel), and rebuilt when the source is newer."""
    if os.path.isfile(os.path.join(HERE, "fake_libcuda.so")):
        return os.path.join(HERE, "fake_libcuda.so")
    out = os.path.join(tempfile.gettempdir(), f"gpt_runtime_fake_libcuda_{os.getuid()}.so")
    source = os.path.join(HERE, "fake_libcuda.c")
    if not os.path.isfile(out) or os.path.getmtime(out) < os.path.getmtime(source):
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", out + ".tmp", source, "-lpthread"], check=True)
        os.replace(out + ".tmp", out)
    return out


STATS = ("allocations", "bytes", "graphs", "modules", "contexts", "launches", "graphs_made", "graph_launches")


def fake_stats(path: str) -> dict[str, int]:
    """What the fake driver (the library at `path`, loaded in this process) holds and has run."""
    out = (ctypes.c_longlong * 8)()
    ctypes.CDLL(path).fake_cuda_stats(out)
    return dict(zip(STATS, out, strict=True))
