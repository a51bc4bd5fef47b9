"""GPT.export: a model compiled for an NVIDIA GPU, written as an artifact directory (docs/GPU.md)
that `gpt_runtime` runs with only the CUDA driver.

The compiler (cc/codegen/gpu) forms the programs and emits the PTX; this module adds what only
the Python side knows (the config, the end-of-generation ids, the tokenizer) and writes the
weights in the layouts and dtypes the manifest names."""

import dataclasses
import json
import os
import re

import numpy as np

from gpt import _gpt, architectures, cuda_tools

ARTIFACT_WEIGHTS = "weights.safetensors"
ARTIFACT_TOKENIZER = "tokenizer.json"
_WEIGHT_FORMATS = ("f32", "bf16")


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


def export(model, path, target="cuda:sm_90", tokens=(1, 128), weights="f32", write_weights=True, cache_len=None) -> str:
    """Writes the artifact directory `path` (created if needed) and returns it."""
    parts = compile_artifact(model, target, tokens, weights, cache_len)
    manifest = parts["manifest"]
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, manifest["target"]["module"]), "w") as file:
        file.write(parts["ptx"])
    if write_weights:
        write_safetensors(os.path.join(path, ARTIFACT_WEIGHTS), stored_weights(manifest, model._compiler_weights()))
    if model.tokenizer is not None:
        model.tokenizer.backend.save(os.path.join(path, ARTIFACT_TOKENIZER))
    with open(os.path.join(path, "manifest.json"), "w") as file:
        json.dump(manifest, file, indent=1)
    return os.fspath(path)
