"""The device check's artifacts (tools/gpu/gpu_check.py): finding and reading them under --artifacts,
what a manifest says (weights' dtype, which model, whether HF can check it), the HF model of an
artifact's config, and HF's weights written into its buffers as a safetensors file."""

import json
import os
import shutil
import struct
import tempfile

import numpy as np

# HF GPT2Config()'s shape: a weight-less artifact of this config is checked against HF's model.
GPT2_SMALL = dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024)


def weights_dtype(manifest):
    return str(manifest.get("weights", {}).get("dtype", "f32")).lower()


def is_gpt2_small(manifest):
    config = manifest.get("config", {})
    return all(config.get(key) == value for key, value in GPT2_SMALL.items()) and config.get(
        "architecture", "gpt2"
    ) in ("gpt2", None)


def is_llama(manifest):
    return manifest.get("config", {}).get("architecture") == "llama"


def hf_checked(manifest):
    """Weight-less artifacts that HF can fill and check: GPT-2 small, and any llama-shaped model."""
    return is_gpt2_small(manifest) or is_llama(manifest)


def model_label(manifest):
    if is_gpt2_small(manifest):
        return "GPT-2 small"
    c = manifest["config"]
    return f"llama {c['n_layer']}x{c['n_embd']} (GQA {c['n_head']}/{c['n_kv_head']}, vocab {c['vocab_size']})"


def hf_model_for(manifest):
    """A HF model of the artifact's config, from torch.manual_seed(0), on the CPU."""
    import transformers

    if is_gpt2_small(manifest):
        return transformers.GPT2LMHeadModel(transformers.GPT2Config())
    c = manifest["config"]
    config = transformers.LlamaConfig(
        vocab_size=c["vocab_size"],
        hidden_size=c["n_embd"],
        intermediate_size=c["n_ff"],
        num_hidden_layers=c["n_layer"],
        num_attention_heads=c["n_head"],
        num_key_value_heads=c["n_kv_head"],
        max_position_embeddings=c["block_size"],
        rms_norm_eps=c["layer_norm_eps"],
        rope_theta=c["rope_base"],
        tie_word_embeddings=c["tied_head"],
    )
    return transformers.LlamaForCausalLM(config)


def find_artifacts(root):
    """(name, directory, manifest) of every artifact directory under root, sorted by name."""
    found = []
    for directory, _, files in sorted(os.walk(root)):
        if "manifest.json" in files:
            with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
                manifest = json.load(f)
            found.append((os.path.relpath(directory, root), directory, manifest))
    return found


def validate_manifest(directory, manifest):
    """gpt_runtime's own reading of the manifest: schema, references, files. An artifact exported
    without weights is read from a copy with an empty weights file in their place, which
    load_manifest only requires to exist (the device check writes the real one, and
    gpt_runtime.load checks it against the buffers)."""
    from gpt_runtime.manifest import load_manifest

    weights_file = manifest.get("weights", {}).get("file", "weights.safetensors")
    if not isinstance(weights_file, str) or os.path.exists(os.path.join(directory, weights_file)):
        return load_manifest(directory)
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as work:
        copy = os.path.join(work, "artifact")
        shutil.copytree(directory, copy)
        open(os.path.join(copy, os.path.basename(weights_file)), "wb").close()
        return load_manifest(copy)


def directory_bytes(directory):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(directory) for f in files)


# -- safetensors, written without the safetensors package ----------------------------------------

_SAFETENSORS_DTYPES = {"f32": "F32", "float32": "F32", "bf16": "BF16", "bfloat16": "BF16", "f16": "F16"}


def write_safetensors(path, tensors):
    """tensors: list of (name, safetensors dtype, shape, bytes) in file order."""
    header, offset = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for _, _, _, data in tensors:
            f.write(data)


def buffer_dtype_and_shape(buffer, manifest):
    """A weight buffer's dtype ("f32"/"bf16") and shape, as the manifest states them."""
    dtype = str(buffer.get("dtype", weights_dtype(manifest))).lower()
    shape = buffer.get("shape")
    return dtype, (tuple(shape) if shape is not None else None)


def hf_weights_file(path, manifest, state):
    """Writes the HF state dict's tensors into `path` as the manifest's weight buffers: the tensor
    of the buffer's name, in the buffer's layout (transposed or as given), dtype and shape
    (zero-padded where the buffer is larger in some dimension, as a padded vocabulary would be).
    Raises KeyError naming every buffer HF lacks."""
    import torch

    buffers = [b for b in manifest["buffers"] if b.get("role") == "weight"]
    # Each buffer's `hf` recipe (docs/GPU.md): concatenate([t.T if transpose else t], axis) of the
    # named HF tensors; without one, the tensor of the buffer's own name in its layout.
    recipes = {
        b["name"]: b.get("hf")
        or {"names": [b["name"]], "transpose": b.get("layout", "as_given") == "transposed", "axis": 0}
        for b in buffers
    }
    missing = sorted({n for r in recipes.values() for n in r["names"] if n not in state})
    if missing:
        raise KeyError(
            f"the manifest wants weights the HF model does not have: {missing[:8]}"
            + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        )
    tensors = []
    for buffer in buffers:
        dtype, shape = buffer_dtype_and_shape(buffer, manifest)
        recipe = recipes[buffer["name"]]
        parts = [state[n].detach().float() for n in recipe["names"]]
        parts = [p.t() if recipe["transpose"] else p for p in parts]
        value = (torch.cat(parts, dim=recipe["axis"]) if len(parts) > 1 else parts[0]).contiguous()
        if shape is not None and tuple(value.shape) != shape:
            if len(shape) != value.dim() or any(s < v for s, v in zip(shape, value.shape, strict=True)):
                raise ValueError(
                    f"weight buffer {buffer['name']}: manifest shape {list(shape)} does not hold HF's "
                    f"{list(value.shape)} (a different layout?)"
                )
            padded = torch.zeros(shape, dtype=value.dtype, device=value.device)
            padded[tuple(slice(0, n) for n in value.shape)] = value
            value = padded
        if dtype in ("bf16", "bfloat16"):
            data = value.to(torch.bfloat16).view(torch.int16).cpu().numpy().tobytes()
        elif dtype in ("f32", "float32"):
            data = value.cpu().numpy().astype(np.float32).tobytes()
        else:
            raise ValueError(f"weight buffer {buffer['name']}: dtype {dtype!r} is not f32 or bf16")
        if "bytes" in buffer and len(data) != int(buffer["bytes"]):
            raise ValueError(
                f"weight buffer {buffer['name']}: {len(data)} bytes written, manifest says {buffer['bytes']}"
            )
        tensors.append((buffer["name"], _SAFETENSORS_DTYPES[dtype], tuple(value.shape), data))
    write_safetensors(path, tensors)


def read_artifacts(args, log):
    """The (name, directory, manifest) of each artifact under --artifacts (those --only names), each logged."""
    try:
        artifacts = find_artifacts(args.artifacts) if os.path.isdir(args.artifacts) else []
    except (OSError, ValueError) as error:
        log.result("read artifacts", False, f"{type(error).__name__}: {error}")
        artifacts = []
    if args.only:
        wanted = set(args.only.split(","))
        artifacts = [a for a in artifacts if a[0] in wanted]
    if not artifacts:
        log.result("read artifacts", False, f"no artifact directory (with a manifest.json) under {args.artifacts}")
    for name, directory, manifest in artifacts:
        files = sorted(os.listdir(directory))
        kind = (
            "reference"
            if "reference.npz" in files
            else "hf"
            if hf_checked(manifest)
            else "none (no reference.npz, not GPT-2 small or llama)"
        )
        log(
            f"artifact {name}: target {manifest.get('target', {}).get('chip')}, weights {weights_dtype(manifest)}, "
            f"{len(manifest.get('programs', []))} programs, {directory_bytes(directory) / 2**20:.1f} MiB, "
            f"check {kind}, files {files}"
        )
    return artifacts
