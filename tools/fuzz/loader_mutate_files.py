"""The loader fuzzer's mutations of HF directories and GPU artifacts (config.json, the safetensors
header and data, the shard index, tokenizer_config.json, chat templates, manifests, links and
FIFOs) and of any input's written bytes (tools/fuzz/fuzz_loaders.py)."""

import copy
import json
import random
import struct

from loader_formats import (
    FIELD_KINDS,
    INTERESTING_FLOATS,
    INTERESTING_HALVES,
    ArtifactDoc,
    HFDoc,
    Input,
    _float32_bits,
    parse_safetensors,
)
from loader_mutate_gguf import interesting_int
from loader_templates import REAL_TEMPLATES, template_statement

# Where a link in a model directory or artifact may point: out of it, at devices that never end,
# at a file inside, nowhere.
LINK_TARGETS = ("/etc/passwd", "/dev/zero", "/dev/urandom", "/proc/self/environ", "../outside", "/", "config.json")
LINK_TARGETS += ("manifest.json", "missing.json", "/nonexistent/x", ".")
HF_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
HF_FILES += ("generation_config.json",)


def json_value(rng: random.Random, depth: int = 0):
    """A JSON value of any kind, nested now and then, deeply at times."""
    choice = rng.randrange(9)
    if choice == 0 and depth < 3:
        return {rng.choice(("content", "template", "name", "a", "")): json_value(rng, depth + 1)}
    if choice == 1 and depth < 3:
        return [json_value(rng, depth + 1) for _ in range(rng.choice((0, 1, 2)))]
    if choice == 2:
        value = 1
        for _ in range(rng.choice((10, 100, 300))):  # deeper nesting is written as text (syntax mutations)
            value = [value]
        return value
    return rng.choice(
        (None, True, False, 0, -1, 2**31, 2**62, 2**64, 10**30, 1.5, float("inf"), "", "x", "<|endoftext|>", "\x00")
    )


def mutate_directory_files(rng: random.Random, doc) -> str:
    """A file of a model directory or artifact made a link or a FIFO, or a link or FIFO dropped."""
    names = list(doc.files() if isinstance(doc, ArtifactDoc) else {*HF_FILES, *doc.extra, doc.weights_name})
    if isinstance(doc, ArtifactDoc):
        names.append("tokenizer.json")
    name = rng.choice(names)
    choice = rng.randrange(4)
    if choice <= 1:
        doc.links[name] = rng.choice(LINK_TARGETS)
        return f"{name} a link"
    if choice == 2:
        if name not in doc.fifos:
            doc.fifos.append(name)
        return f"{name} a FIFO"
    doc.links.pop(name, None)
    if name in doc.fifos:
        doc.fifos.remove(name)
    return f"{name} a file again"


def mutate_hf_files(rng: random.Random, doc: HFDoc) -> str:
    """tokenizer_config.json (the chat template, bos and eos tokens, added tokens: values of any
    type, invalid syntax, deep nesting, not UTF-8), chat_template.jinja, generation_config.json,
    tokenizer.json, rope_scaling, the shard index; links and FIFOs."""
    if "model.safetensors.index.json" in doc.extra and rng.random() < 0.3:
        return _shard_index(rng, doc)
    choice = rng.randrange(8)
    if choice <= 1:
        try:
            value = json.loads(doc.extra.get("tokenizer_config.json", b"{}"))
        except (ValueError, RecursionError):
            value = {}
        value = value if isinstance(value, dict) else {}
        key = rng.choice(("chat_template", "bos_token", "eos_token", "added_tokens_decoder", "chat_template"))
        if key == "chat_template" and rng.random() < 0.7:
            source = rng.choice(list(REAL_TEMPLATES.values())) + template_statement(rng)
            value[key] = source if rng.random() < 0.7 else [{"name": "default", "template": source}, json_value(rng)]
        else:
            value[key] = json_value(rng)
        doc.extra["tokenizer_config.json"] = json.dumps(value).encode()
        return f"tokenizer_config.json {key}"
    if choice == 2:
        name = rng.choice(("tokenizer_config.json", "generation_config.json", "tokenizer.json"))
        text = doc.extra.get(name, b"{}")
        doc.extra[name] = rng.choice(
            (
                b"[" * 100000 + b"]" * 100000,
                b'{"chat_template": "\xff\xfe"}',
                text[: rng.randrange(len(text) + 1)],
                b"\xef\xbb\xbf" + text,
                b"null",
                b'{"eos_token": ' * 2000 + b"1" + b"}" * 2000,
            )
        )
        return f"{name} syntax"
    if choice == 3:
        doc.extra["chat_template.jinja"] = "".join(template_statement(rng) for _ in range(rng.randint(1, 3))).encode()
        return "chat_template.jinja"
    if choice == 4:
        doc.extra["generation_config.json"] = json.dumps({"eos_token_id": json_value(rng)}).encode()
        return "generation_config.json"
    if choice == 5 and isinstance(doc.config, dict):
        doc.config[rng.choice(("rope_scaling", "rope_parameters", "rope_theta"))] = rng.choice(
            (
                json_value(rng),
                {"rope_type": "llama3", "factor": json_value(rng), "low_freq_factor": 1.0, "high_freq_factor": 4.0},
                {"rope_type": rng.choice(("llama3", "linear", "yarn", 3)), "original_max_position_embeddings": 8},
            )
        )
        doc.config_raw = None
        return "rope scaling"
    return mutate_directory_files(rng, doc)


def _shard_index(rng: random.Random, doc: HFDoc) -> str:
    """model.safetensors.index.json: a weight_map entry pointed at another shard, out of the
    directory, at a missing file or at a value of any type; entries dropped; metadata; syntax."""
    name = "model.safetensors.index.json"
    try:
        index = json.loads(doc.extra[name])
    except (ValueError, RecursionError):
        index = {}
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    operation = rng.randrange(5)
    if operation <= 1 and isinstance(weight_map, dict) and weight_map:
        key = rng.choice(sorted(weight_map))
        shards = sorted({value for value in weight_map.values() if isinstance(value, str)}) or ["x"]
        targets = ("../outside", "/etc/passwd", "missing.safetensors", "", ".", "config.json", rng.choice(shards))
        weight_map[key] = rng.choice(targets) if operation == 0 else json_value(rng)
    elif operation == 2 and isinstance(weight_map, dict) and weight_map:
        del weight_map[rng.choice(sorted(weight_map))]
    elif operation == 3 and isinstance(index, dict):
        index[rng.choice(("metadata", "weight_map"))] = json_value(rng)
    else:
        text = doc.extra[name]
        doc.extra[name] = rng.choice((text[: rng.randrange(len(text) + 1)], b"[]", b"{}", b"[" * 5000))
        return "shard index syntax"
    doc.extra[name] = json.dumps(index).encode()
    return "shard index"


def mutate_artifact(rng: random.Random, item: Input) -> str:
    """A manifest value (sizes, counts, dimensions, names, places: any JSON at any path), a key
    dropped, manifest.json's syntax, the PTX module's or the weights' bytes; links and FIFOs."""
    doc: ArtifactDoc = item.doc
    choice = rng.randrange(10)
    if choice <= 4 and isinstance(doc.manifest, (dict, list)):
        paths = []

        def walk(value, path):
            paths.append(path)
            if isinstance(value, dict):
                for key, inner in value.items():
                    walk(inner, (*path, key))
            elif isinstance(value, list):
                for i, inner in enumerate(value):
                    walk(inner, (*path, i))

        walk(doc.manifest, ())
        path = rng.choice(paths[1:] or paths)
        if not path:
            return "manifest unchanged"
        parent = doc.manifest
        for step in path[:-1]:
            parent = parent[step]
        current = parent[path[-1]]
        if choice == 4 and isinstance(parent, dict):
            del parent[path[-1]]
            doc.manifest_raw = None
            return f"manifest {path[-1]} dropped"
        if isinstance(current, int) and not isinstance(current, bool) and rng.random() < 0.7:
            parent[path[-1]] = rng.choice((interesting_int(rng, current), -current - 1, 2**40, 2**62, 2**64, 1.5))
        elif isinstance(current, str) and rng.random() < 0.5:
            parent[path[-1]] = rng.choice(("../outside", "/etc/passwd", "", "x" * 5000, current + "x", "\x00"))
        elif isinstance(current, list) and current and rng.random() < 0.5:
            current.append(copy.deepcopy(current[rng.randrange(len(current))]))
        else:
            parent[path[-1]] = json_value(rng)
        doc.manifest_raw = None
        return f"manifest {'.'.join(map(str, path))[:60]}"
    if choice == 5:
        text = json.dumps(doc.manifest).encode() if doc.manifest_raw is None else doc.manifest_raw
        doc.manifest_raw = rng.choice(
            (b"[" * 100000 + b"]" * 100000, text[: rng.randrange(len(text) + 1)], b"\xff" + text, b"{}", text * 2)
        )
        return "manifest.json syntax"
    if choice == 6 and doc.ptx:
        data = bytearray(doc.ptx)
        operation = rng.randrange(3)
        if operation == 0:
            data[rng.randrange(len(data))] = rng.getrandbits(8)
        elif operation == 1:
            del data[rng.randrange(len(data)) :]
        else:
            data = data.replace(b".entry", rng.choice((b".entry", b".func", b".entry .entry", b"")), 1)
        doc.ptx = bytes(data)
        return "PTX bytes"
    if choice == 7 and doc.weights:
        header, data = parse_safetensors(doc.weights)
        name = rng.choice(list(header)) if header else None
        if name is not None and isinstance(header[name], dict):
            header[name][rng.choice(("dtype", "shape", "data_offsets"))] = json_value(rng)
        text = json.dumps(header).encode()
        doc.weights = struct.pack("<Q", len(text)) + text + data
        return "weights header"
    return mutate_directory_files(rng, doc)


CONFIG_KEYS = ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "n_ctx", "layer_norm_epsilon", "model_type")
CONFIG_KEYS += ("activation_function", "tie_word_embeddings", "sliding_window", "pos_embedding", "scale_attn_weights")
# Llama-family keys (Qwen2's biases and windows, Phi-3's), read by gpt.hf_checkpoint.
CONFIG_KEYS += ("hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size", "rms_norm_eps")
CONFIG_KEYS += ("use_sliding_window", "max_window_layers", "attention_bias", "max_position_embeddings", "head_dim")


def _config_value(rng: random.Random, doc: HFDoc) -> str:
    if not isinstance(doc.config, dict):
        doc.config = {}
    key = rng.choice(CONFIG_KEYS)
    doc.config[key] = rng.choice(
        (
            interesting_int(rng, doc.config.get(key) if isinstance(doc.config.get(key), int) else None),
            rng.choice(INTERESTING_FLOATS),
            None,
            True,
            "gpt2",
            "12",
            [1],
            {"a": 1},
            -1,
            10**400,
        )
    )
    doc.config_raw = None
    return f"config {key}"


def _config_syntax(rng: random.Random, doc: HFDoc) -> str:
    """config.json's syntax (or a key dropped)."""
    text = json.dumps(doc.config).encode() if doc.config_raw is None else doc.config_raw
    operation = rng.randrange(7)
    if operation == 0:
        depth = rng.choice((10, 1000, 100000))
        doc.config_raw = b"[" * depth + b"]" * depth
    elif operation == 1:
        doc.config_raw = rng.choice((b"[]", b"null", b"3", b'"gpt2"', b"", b"\xef\xbb\xbf{}", b"{}"))
    elif operation == 2 and text:
        cut = rng.randrange(len(text))
        doc.config_raw = text[:cut] + rng.choice((b"\xff", b"\xc3", b"", b"NaN", b"}")) + text[cut + 1 :]
    elif operation == 3:
        doc.config_raw = text.replace(b"1e-05", b"Infinity").replace(b"16", b"9" * 5000)
    elif operation == 4:
        doc.config_raw = text[: rng.randrange(len(text) + 1)]
    elif operation == 5 and isinstance(doc.config, dict) and doc.config:
        del doc.config[rng.choice(list(doc.config))]
        return "config key dropped"
    else:
        doc.config_raw = text + b" " * rng.choice((1, 1000))
    return "config.json syntax"


def _safetensors_entry(rng: random.Random, doc: HFDoc) -> str:
    """A tensor's dtype, shape or data offsets; entries dropped, renamed, added."""
    entries = [name for name in doc.header if name != "__metadata__"]
    if not entries:
        return _safetensors_bytes(rng, doc)
    entry = doc.header[rng.choice(entries)]
    operation = rng.randrange(4)
    if operation == 0 and isinstance(entry, dict):
        entry["dtype"] = rng.choice(("F32", "F16", "BF16", "F64", "I8", "U8", "F8_E4M3", "BOOL", "X", 3))
        return "safetensors dtype"
    if operation == 1 and isinstance(entry, dict) and isinstance(entry.get("shape"), list):
        shape = entry["shape"]
        change = rng.randrange(4)
        if change == 0 and shape:
            shape[rng.randrange(len(shape))] = interesting_int(rng, shape[0]) % 2**64
        elif change == 1:
            shape.append(rng.choice((1, 2, 0)))
        elif change == 2 and shape:
            shape.pop()
        else:
            shape.reverse()
        return "safetensors shape"
    if operation == 2 and isinstance(entry, dict) and isinstance(entry.get("data_offsets"), list):
        offsets = entry["data_offsets"]
        i = rng.randrange(2)
        offsets[i] = interesting_int(rng, offsets[i]) % 2**64 if rng.random() < 0.7 else offsets[1 - i]
        return "safetensors offsets"
    name = rng.choice(entries)
    change = rng.randrange(3)
    if change == 0:
        del doc.header[name]
    elif change == 1:
        doc.header[name.removeprefix("transformer.") + rng.choice(("", "x"))] = doc.header.pop(name)
    else:
        doc.header["__metadata__"] = rng.choice(({"format": "pt"}, {"a": 1}, [1], "x"))
    return "safetensors entries"


def _safetensors_bytes(rng: random.Random, doc: HFDoc) -> str:
    """The header's bytes, tensor bytes (NaN, inf, anything), the data cut."""
    operation = rng.randrange(5)
    text = json.dumps(doc.header).encode()
    if operation == 0:
        doc.header_raw = b"[" * 200 + b"]" * 200
    elif operation == 1 and text:
        cut = rng.randrange(len(text))
        doc.header_raw = text[:cut] + rng.choice((b"\xff", b"", b"}", b"{")) + text[cut + 1 :]
    elif operation == 2:
        doc.header_raw = text + b" " * rng.choice((1, 7))
    elif operation == 3 and len(doc.data) >= 4:
        data = bytearray(doc.data)
        position = rng.randrange(len(data) // 4) * 4
        data[position : position + 4] = struct.pack("<I", _float32_bits(rng.choice(INTERESTING_FLOATS)))
        if rng.random() < 0.5:
            data[position : position + 2] = struct.pack("<H", rng.choice(INTERESTING_HALVES))
        doc.data = bytes(data)
        return "safetensors data"
    else:
        doc.data = doc.data[: rng.randrange(len(doc.data) + 1)]
        return "safetensors data cut"
    return "safetensors header syntax"


def mutate_hf(rng: random.Random, item: Input) -> str:
    """One structural mutation of a HF directory: its other files (40%), config.json's values
    and syntax, the safetensors header's entries and bytes, the data."""
    doc: HFDoc = item.doc
    if rng.random() < 0.4:
        return mutate_hf_files(rng, doc)
    mutation = rng.choices((_config_value, _config_syntax, _safetensors_entry, _safetensors_bytes), (3, 2, 4, 3))[0]
    return mutation(rng, doc)


def mutate_raw(rng: random.Random, item: Input) -> str:
    """A mutation of the written bytes: a header field set to an interesting value, bytes
    overwritten, inserted or deleted, the file cut."""
    name = rng.choice(list(item.files()))
    size = len(item.files()[name])
    choice = rng.randrange(6)
    if choice <= 1 and item.kind in ("gguf", "model"):
        # A field kind first (there are hundreds of string lengths and a few array lengths).
        what = rng.choice(FIELD_KINDS)
        value = rng.choice((*range(14), 2**31, 2**32 - 1)) if what.endswith("type") else interesting_int(rng)
        item.patches.append(("field", name, what, rng.getrandbits(16), value))
        return f"header field: {what}"
    if choice == 2 and item.kind == "hf" and name.endswith(".safetensors"):
        item.patches.append(("bytes", name, 0, (interesting_int(rng, size) % 2**64).to_bytes(8, "little")))
        return "safetensors header length"
    if choice == 3:
        item.patches.append(
            ("truncate", name, rng.randrange(size + 1) if rng.random() < 0.5 else rng.randrange(min(size, 4096) + 1))
        )
        return "cut"
    if choice == 4:
        item.patches.append(
            (
                "insert",
                name,
                rng.randrange(min(size, 4096) + 1),
                bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 16))),
            )
        )
        return "bytes inserted"
    position = rng.randrange(max(1, min(size, 4096))) if rng.random() < 0.8 else rng.randrange(max(1, size))
    item.patches.append(("bytes", name, position, bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 4)))))
    return "bytes"
