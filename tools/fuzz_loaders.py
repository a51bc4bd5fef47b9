#!/usr/bin/env python3
"""A structure-aware fuzzer for the model-file loaders: GGUF files (every tensor type the project
reads, kept quantized or dequantized, with GPT-2 tokenizer data) through gpt.gguf_file.load_gguf,
and HF directories (config.json + model.safetensors) through gpt.weights.load_pretrained.

    PYTHONPATH=bazel-bin/python python3 tools/fuzz_loaders.py --seconds 60 --seed 1 --out DIR
    PYTHONPATH=bazel-bin/python python3 tools/fuzz_loaders.py --replay tests/fuzz/loader_regressions

Seeds are small valid files of a nano GPT-2: GGUF in f32, f16, bf16, q8_0, q4_0 and q4_1 written by
gpt.gguf_file.save_gguf with a byte-level BPE tokenizer, and HF directories in F32, F16 and BF16;
the regression corpus joins them. Each input is a seed, or an earlier input that ran new code,
parsed into its structure and given one to four mutations that know the format (GGUF counts,
lengths, value types, dimensions, tensor types and offsets, metadata values, tensor bytes and fp16
block scales, tokenizer tokens, merges and token types; config.json values and syntax;
safetensors header entries and length), then written back. A worker process loads it under an
address-space limit (RLIMIT_AS) and a time limit, recording which pairs of consecutive lines of
the loaders ran (sys.settrace); an input that runs a new pair joins the corpus ("new inputs").

Loading stops before compiling: the loader, gpt.weights.validate_weights and, for a file that
loads, the GPT constructor (which binds and repacks the weights but compiles nothing) and its
tokenizer on a sample text. An input may load, or be refused with a ValueError (the documented
refusal: gpt.ModelFileError, a ValueError) or the MemoryError that names what a configuration
needs. Anything else is a finding: another exception, a time-out (a hang), the worker killed by a
signal (a crash) or a MemoryError from memory over the limit. Findings are minimized into
OUT/findings/ (one file each); once fixed, they belong in tests/fuzz/loader_regressions/, which
tests/python/test_hostile_files.py replays. Exits 1 on any finding."""

import argparse
import copy
import dataclasses
import hashlib
import io
import json
import os
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import tempfile
import time

# -- formats ------------------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"
# GGUF metadata value types: id -> struct format (strings and arrays have none).
SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
# What emit_gguf records of each number it writes, for mutations of the written file.
FIELD_KINDS = (
    "version",
    "tensor count",
    "key count",
    "key length",
    "value type",
    "scalar",
    "string length",
    "array type",
    "array length",
    "tensor name length",
    "dimension count",
    "dimension",
    "tensor type",
    "tensor offset",
)
INTEGER_TYPES = (0, 1, 2, 3, 4, 5, 10, 11)
# Keys the GPT-2 loader reads, so that mutations reach what it checks, not only unknown keys.
KNOWN_KEYS = (
    "general.architecture",
    "general.alignment",
    "gpt2.block_count",
    "gpt2.context_length",
    "gpt2.embedding_length",
    "gpt2.feed_forward_length",
    "gpt2.attention.head_count",
    "gpt2.attention.head_count_kv",
    "gpt2.attention.layer_norm_epsilon",
    "gpt2.vocab_size",
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.token_type",
)
INTERESTING_INTS = (
    0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 255, 256, 257, 1023, 1024, 4096,
    65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**50, 2**62, 2**63 - 1, 2**63, 2**64 - 1,
)  # fmt: skip
INTERESTING_FLOATS = (
    0.0,
    -0.0,
    1.0,
    -1.0,
    1e-5,
    1e-45,
    1e-310,
    65504.0,
    3.4e38,
    1e300,
    float("inf"),
    -float("inf"),
    float("nan"),
)
# fp16 bit patterns for block scales: NaN, +-inf, the largest, the smallest subnormal, -0, 1.
INTERESTING_HALVES = (0x7E00, 0x7C01, 0x7C00, 0xFC00, 0x7BFF, 0x0001, 0x8000, 0x3C00)
SAMPLE_TEXT = "Hello, world! héllo wörld ✓ 日本 \x00\t\n<|endoftext|> 1234"


def scalar_bytes(value_type: int, value) -> bytes:
    """The bytes of a scalar of `value_type`; an integer out of the type's range wraps, a value of
    the wrong kind is written as 0 or 1.5."""
    fmt = "<" + SCALAR_FORMATS[value_type]
    if value_type in (6, 12):
        value = value if isinstance(value, (int, float)) and not isinstance(value, bool) else 1.5
        value = float(value) if not isinstance(value, int) or abs(value) < 2**1000 else float("inf")
        return struct.pack("<I", _float32_bits(value)) if value_type == 6 else struct.pack(fmt, value)
    value = value if isinstance(value, int) else 0
    bits = struct.calcsize(fmt) * 8
    return (value % (1 << bits)).to_bytes(bits // 8, "little")


def _float32_bits(value: float) -> int:
    import numpy as np

    with np.errstate(over="ignore"):
        return int(np.array([value], dtype=np.float32).view(np.uint32)[0])


@dataclasses.dataclass
class Tensor:
    name: bytes
    dims: list
    type: int
    data: bytes
    offset: int | None = None  # None: laid out in order, as a writer does; else this offset is written


@dataclasses.dataclass
class GGUFDoc:
    """A GGUF file as a structure: mutations change it, `emit` writes it (consistent lengths and
    offsets unless a mutation overrides them)."""

    version: int
    kvs: list  # [key bytes, value type, value]; strings are bytes, arrays (element type, [values])
    tensors: list
    n_tensors: int | None = None  # counts written instead of the real ones
    n_kv: int | None = None


def parse_gguf(raw: bytes) -> GGUFDoc:
    """Parses a well-formed GGUF file (a seed); raises on anything else."""
    import gguf

    position = 0

    def take(fmt):
        nonlocal position
        values = struct.unpack_from("<" + fmt, raw, position)
        position += struct.calcsize("<" + fmt)
        return values[0]

    def string():
        nonlocal position
        length = take("Q")
        if length > len(raw) - position:
            raise ValueError("string past the end")
        position += length
        return raw[position - length : position]

    def value(value_type, depth=0):
        if value_type in SCALAR_FORMATS:
            return take(SCALAR_FORMATS[value_type])
        if value_type == STRING:
            return string()
        if value_type == ARRAY and depth < 4:
            element_type, count = take("I"), take("Q")
            if count > len(raw):
                raise ValueError("array longer than the file")
            return (element_type, [value(element_type, depth + 1) for _ in range(count)])
        raise ValueError(f"value type {value_type}")

    if raw[:4] != GGUF_MAGIC:
        raise ValueError("not GGUF")
    position = 4
    version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    if n_kv > len(raw) or n_tensors > len(raw):
        raise ValueError("counts larger than the file")
    kvs = []
    for _ in range(n_kv):
        key = string()
        value_type = take("I")
        kvs.append([key, value_type, value(value_type)])
    infos = []
    for _ in range(n_tensors):
        name = string()
        n_dims = take("I")
        if n_dims > 8:
            raise ValueError("dimensions")
        dims = [take("Q") for _ in range(n_dims)]
        infos.append((name, dims, take("I"), take("Q")))
    alignment = next((kv[2] for kv in kvs if kv[0] == b"general.alignment" and kv[1] == 4), 32) or 32
    start = -(-position // alignment) * alignment
    tensors = []
    for name, dims, kind, offset in infos:
        block, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(kind)]
        elements = 1
        for n in dims:
            elements *= n
        nbytes = elements // block * block_bytes
        if start + offset + nbytes > len(raw):
            raise ValueError("tensor past the end")
        tensors.append(Tensor(name, dims, kind, raw[start + offset : start + offset + nbytes]))
    return GGUFDoc(version, kvs, tensors)


def emit_gguf(doc: GGUFDoc):
    """(bytes, header fields, tensor data regions). Fields are (offset, struct format, what) of
    every count, length, type, dimension and offset, for mutations of the written bytes; regions
    are (tensor, file offset) of each tensor's data."""
    out = bytearray()
    fields = []

    def number(fmt, value, what):
        fields.append((len(out), fmt, what))
        bits = struct.calcsize("<" + fmt) * 8
        out.extend(struct.pack("<" + fmt, int(value) % (1 << bits)))

    def string(raw, what):
        number("Q", len(raw), what)
        out.extend(raw)

    def value(value_type, item, depth=0):
        if value_type in SCALAR_FORMATS:
            fields.append((len(out), SCALAR_FORMATS[value_type], "scalar"))
            out.extend(scalar_bytes(value_type, item))
        elif value_type == STRING:
            string(item if isinstance(item, bytes) else str(item).encode(), "string length")
        elif value_type == ARRAY:
            element_type, items = item if isinstance(item, tuple) else (0, [])
            number("I", element_type, "array type")
            number("Q", len(items), "array length")
            for element in items:
                value(element_type, element, depth + 1)
        # Another type id has no value: the file says so, and the reader must refuse it.

    out.extend(GGUF_MAGIC)
    number("I", doc.version, "version")
    number("Q", len(doc.tensors) if doc.n_tensors is None else doc.n_tensors, "tensor count")
    number("Q", len(doc.kvs) if doc.n_kv is None else doc.n_kv, "key count")
    alignment = 32
    for key, value_type, item in doc.kvs:
        string(key, "key length")
        number("I", value_type, "value type")
        value(value_type, item)
        if key == b"general.alignment" and value_type == 4 and isinstance(item, int) and 0 < item <= 4096:
            alignment = item if item & (item - 1) == 0 else alignment
    offsets = []
    running = 0
    for tensor in doc.tensors:
        offsets.append(running)
        running += -(-len(tensor.data) // alignment) * alignment
    for tensor, offset in zip(doc.tensors, offsets, strict=True):
        string(tensor.name, "tensor name length")
        number("I", len(tensor.dims), "dimension count")
        for n in tensor.dims:
            number("Q", n, "dimension")
        number("I", tensor.type, "tensor type")
        number("Q", offset if tensor.offset is None else tensor.offset, "tensor offset")
    out.extend(bytes(-len(out) % alignment))
    start = len(out)
    regions = []
    for tensor, offset in zip(doc.tensors, offsets, strict=True):
        out.extend(bytes(start + offset - len(out)))
        regions.append((tensor, len(out)))
        out.extend(tensor.data)
    out.extend(bytes(-len(out) % alignment))
    return bytes(out), fields, regions


@dataclasses.dataclass
class HFDoc:
    """A HF directory as a structure: config.json's value (or its raw bytes) and the safetensors
    header and data."""

    config: object
    header: dict
    data: bytes
    config_raw: bytes | None = None
    header_raw: bytes | None = None  # written instead of the JSON of `header`


def emit_hf(doc: HFDoc) -> tuple[bytes, bytes]:
    config = doc.config_raw if doc.config_raw is not None else json.dumps(doc.config).encode()
    header = doc.header_raw if doc.header_raw is not None else json.dumps(doc.header).encode()
    return config, struct.pack("<Q", len(header)) + header + doc.data


def parse_safetensors(raw: bytes):
    (length,) = struct.unpack_from("<Q", raw)
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


# -- inputs -------------------------------------------------------------------------------------


@dataclasses.dataclass
class Input:
    """A fuzz input: a GGUF (`keep`: the format kept quantized, or None) or an HF directory, as a
    structure (`doc`) or raw bytes (`raw`, a regression file that does not parse), plus mutations
    of the written bytes (`patches`), applied in order."""

    kind: str  # "gguf" or "hf"
    doc: object
    raw: object = None  # bytes (gguf) or (config, safetensors) bytes (hf) when doc is None
    keep: str | None = None
    patches: list = dataclasses.field(default_factory=list)
    origin: str = ""

    def files(self) -> dict[str, bytes]:
        """File name -> bytes: {"model.gguf"} or {"config.json", "model.safetensors"}."""
        if self.kind == "gguf":
            data, fields, _ = emit_gguf(self.doc) if self.doc is not None else (self.raw, [], [])
            return {"model.gguf": apply_patches(data, fields, self.patches, "model.gguf")}
        config, weights = emit_hf(self.doc) if self.doc is not None else self.raw
        files = {"config.json": config, "model.safetensors": weights}
        return {name: apply_patches(data, [], self.patches, name) for name, data in files.items()}


def apply_patches(data: bytes, fields: list, patches: list, name: str) -> bytes:
    out = bytearray(data)
    for patch in patches:
        kind, target = patch[0], patch[1]
        if target != name:
            continue
        matching = [field for field in fields if field[2] == patch[2]] if kind == "field" else []
        if matching:
            offset, fmt, _ = matching[patch[3] % len(matching)]
            bits = struct.calcsize("<" + fmt) * 8
            out[offset : offset + bits // 8] = (patch[4] % (1 << bits)).to_bytes(bits // 8, "little")
        elif kind == "truncate":
            del out[min(patch[2], len(out)) :]
        elif kind == "bytes" and out:
            position = patch[2] % len(out)
            out[position : position + len(patch[3])] = patch[3]
        elif kind == "insert":
            position = patch[2] % (len(out) + 1)
            out[position:position] = patch[3]
        elif kind == "delete" and out:
            position = patch[2] % len(out)
            del out[position : position + patch[3]]
    return bytes(out)


def write_input(item: Input, directory: str) -> str:
    """Writes the input's files into `directory` (emptied first); the path the loader takes."""
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    for name, data in item.files().items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)
    return os.path.join(directory, "model.gguf") if item.kind == "gguf" else directory


# -- seeds --------------------------------------------------------------------------------------


def byte_level_tokenizer(extra_merges, special=True):
    """A byte-level BPE (GPT-2's kind): the 256 byte tokens, merged tokens and <|endoftext|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    characters = printable + [256 + i for i in range(256 - len(printable))]
    tokens = [chr(c) for c in characters] + ["".join(pair) for pair in extra_merges]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=list(extra_merges)))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    if special:
        tokenizer.add_special_tokens(["<|endoftext|>"])
    return tokenizer


def make_seeds(scratch: str) -> list[Input]:
    """Valid inputs of a nano GPT-2 (vocabulary 260: bytes, 3 merges, <|endoftext|>), small so
    that a finding's file is small."""
    import numpy as np

    import gpt
    from gpt.gguf_file import FORMATS, save_gguf
    from gpt.weights import random_weights

    config = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=260, block_size=8)
    weights = random_weights(config, seed=1)
    # Non-zero biases and LayerNorm parameters, so that every tensor's bytes carry information.
    rng = np.random.default_rng(1)
    weights = {name: (value + rng.normal(0, 0.01, value.shape)).astype(np.float32) for name, value in weights.items()}
    # Two vocabularies of 260: GPT-2's kind, and one whose tokens are all at most 2 bytes long
    # (tokenizers' BPE has panicked on a bad merge only when no token was longer).
    tokenizers = {
        "long": byte_level_tokenizer([("Ġ", "t"), ("h", "e"), ("Ġt", "he")]),
        "short": byte_level_tokenizer([("h", "e"), ("a", "b"), ("c", "d"), ("e", "f")], special=False),
    }
    seeds = []
    for fmt in FORMATS:
        path = os.path.join(scratch, f"seed-{fmt}.gguf")
        save_gguf(weights, config, path, fmt, tokenizer=tokenizers["short" if fmt in ("f16", "q4_0") else "long"])
        with open(path, "rb") as f:
            doc = parse_gguf(f.read())
        keep = fmt if fmt in ("q8_0", "q4_0", "q4_1") else None
        seeds.append(Input("gguf", doc, keep=keep, origin=f"seed {fmt}"))
    hf = dict(model_type="gpt2", n_layer=1, n_head=2, n_embd=32, vocab_size=260, n_positions=8)
    hf.update(activation_function="gelu_new", layer_norm_epsilon=1e-5, tie_word_embeddings=True)
    for dtype in ("F32", "F16", "BF16"):
        header, chunks, offset = {}, [], 0
        for name, value in weights.items():
            if dtype == "F32":
                data = value.astype("<f4").tobytes()
            elif dtype == "F16":
                data = value.astype("<f2").tobytes()
            else:
                data = (value.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
            header[name] = {"dtype": dtype, "shape": list(value.shape), "data_offsets": [offset, offset + len(data)]}
            chunks.append(data)
            offset += len(data)
        seeds.append(Input("hf", HFDoc(dict(hf), header, b"".join(chunks)), origin=f"seed hf {dtype}"))
    return seeds


def read_regression(path: str) -> Input:
    """A file of the regression corpus as an input: NAME.gguf (NAME.keep-q8_0.gguf: loaded with
    that format kept quantized) or NAME.hf.tar.gz (config.json and model.safetensors)."""
    base = os.path.basename(path)
    with open(path, "rb") as f:
        raw = f.read()
    if base.endswith(".hf.tar.gz"):
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as tar:
            config = tar.extractfile("config.json").read()
            weights = tar.extractfile("model.safetensors").read()
        try:
            header, data = parse_safetensors(weights)
            doc = HFDoc(None, header, data, config_raw=config)
            return Input("hf", doc, origin=base)
        except Exception:
            return Input("hf", None, raw=(config, weights), origin=base)
    keep = next((fmt for fmt in ("q8_0", "q4_0", "q4_1") if f".keep-{fmt}." in base), None)
    try:
        return Input("gguf", parse_gguf(raw), keep=keep, origin=base)
    except Exception:
        return Input("gguf", None, raw=raw, keep=keep, origin=base)


def regression_files(directory: str) -> list[str]:
    if not os.path.isdir(directory):
        return []
    return sorted(
        os.path.join(directory, name) for name in os.listdir(directory) if name.endswith((".gguf", ".hf.tar.gz"))
    )


def save_finding(item: Input, path_stem: str) -> str:
    """Writes an input as one regression-corpus file; returns its path."""
    files = item.files()
    if item.kind == "gguf":
        path = path_stem + (f".keep-{item.keep}" if item.keep else "") + ".gguf"
        with open(path, "wb") as f:
            f.write(files["model.gguf"])
        return path
    path = path_stem + ".hf.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


# -- mutations ----------------------------------------------------------------------------------


def interesting_int(rng: random.Random, current: int | None = None) -> int:
    if current is not None and rng.random() < 0.4:
        return rng.choice(
            (current + 1, current - 1, current * 2, current // 2, current + rng.randint(-64, 64), -current)
        )
    return rng.choice(INTERESTING_INTS) if rng.random() < 0.8 else rng.getrandbits(rng.choice((8, 16, 32, 64)))


def random_text(rng: random.Random) -> bytes:
    choice = rng.randrange(8)
    if choice == 0:
        return b""
    if choice == 1:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 16)))  # often not UTF-8
    if choice == 2:
        return rng.choice((b"gpt2", b"llama", b"none", b"no_vocab", b"gpt-2", b"llama3", b"\x00", "Ġ".encode()))
    if choice == 3:
        return b"x" * rng.choice((63, 64, 65, 1000, 70000))
    if choice == 4:
        return "".join(chr(rng.randint(0x20, 0x2FFF)) for _ in range(rng.randint(1, 8))).encode()
    if choice == 5:
        return b"\xed\xa0\x80"  # an encoded surrogate: not UTF-8
    if choice == 6:
        return b" ".join(rng.choice((b"a", b"b", "Ġ".encode(), b"t", b"he", b"")) for _ in range(rng.randint(1, 3)))
    return rng.choice((b"\xff", b"\xc3", b"a\x00b", b"<|endoftext|>"))


def random_value(rng: random.Random, value_type: int, depth: int = 0):
    if value_type in INTEGER_TYPES or value_type == 7:
        return interesting_int(rng)
    if value_type in (6, 12):
        return rng.choice(INTERESTING_FLOATS)
    if value_type == STRING:
        return random_text(rng)
    if value_type == ARRAY:
        element_type = rng.choice((4, 5, 6, STRING, ARRAY, 0)) if depth < 5 else 4
        return (element_type, [random_value(rng, element_type, depth + 1) for _ in range(rng.choice((0, 1, 2, 5)))])
    return 0


def mutate_value(rng: random.Random, value_type: int, value):
    """A mutated value of the same type (an array's elements mutated, dropped or repeated)."""
    if value_type == ARRAY and isinstance(value, tuple):
        element_type, items = value[0], list(value[1])
        choice = rng.randrange(6)
        if choice == 0 and items:
            i = rng.randrange(len(items))
            items[i] = mutate_value(rng, element_type, items[i])
        elif choice == 1 and items:
            del items[rng.randrange(len(items)) :]
        elif choice == 2 and items:
            items.append(items[rng.randrange(len(items))])
        elif choice == 3:
            items = []
        elif choice == 4 and items:
            i, j = rng.randrange(len(items)), rng.randrange(len(items))
            items[i] = items[j]  # a repeated token, a repeated merge
        else:
            element_type = rng.choice((0, 1, 4, 5, 6, 10, STRING, ARRAY, 13, 2**32 - 1))
            items = [random_value(rng, element_type, 1) for _ in range(rng.choice((0, 1, 3)))]
        return (element_type, items)
    if value_type == STRING:
        if isinstance(value, bytes) and value and rng.random() < 0.5:
            out = bytearray(value)
            out[rng.randrange(len(out))] = rng.getrandbits(8)
            return bytes(out)
        return random_text(rng)
    if value_type in (6, 12):
        return rng.choice(INTERESTING_FLOATS)
    return interesting_int(rng, value if isinstance(value, int) else None)


def find_kv(doc: GGUFDoc, key: bytes):
    return next((kv for kv in doc.kvs if kv[0] == key), None)


def token_strings(doc: GGUFDoc) -> list[bytes]:
    kv = find_kv(doc, b"tokenizer.ggml.tokens")
    tokens = [t for t in kv[2][1] if isinstance(t, bytes)] if kv and isinstance(kv[2], tuple) else []
    return tokens or [b"a"]


def mutate_gguf(rng: random.Random, item: Input) -> str:
    """One structural mutation of a GGUF input; returns what it did."""
    import gguf

    doc: GGUFDoc = item.doc
    choice = rng.randrange(26)
    if choice == 0 and doc.kvs:  # a metadata value
        kv = rng.choice(doc.kvs)
        kv[2] = mutate_value(rng, kv[1], kv[2])
        return f"value of {kv[0][:40]!r}"
    if choice == 1 and doc.kvs:  # a metadata value's type
        kv = rng.choice(doc.kvs)
        kv[1] = rng.choice((*SCALAR_FORMATS, STRING, ARRAY, 13, 255, 2**31))
        kv[2] = random_value(rng, kv[1])
        return f"type of {kv[0][:40]!r}"
    if choice == 2:  # a key the loader reads, set to anything
        key = rng.choice(KNOWN_KEYS).encode()
        value_type = rng.choice((4, 4, 5, 10, 6, 12, STRING, ARRAY, 7))
        kv = find_kv(doc, key)
        if kv is None:
            doc.kvs.append(kv := [key, value_type, None])
        kv[1], kv[2] = value_type, random_value(rng, value_type)
        return f"known key {key!r}"
    if choice == 3 and doc.kvs:
        del doc.kvs[rng.randrange(len(doc.kvs))]
        return "key dropped"
    if choice == 4 and doc.kvs:
        doc.kvs.insert(rng.randrange(len(doc.kvs) + 1), copy.deepcopy(rng.choice(doc.kvs)))
        return "key repeated"
    if choice == 5:
        value_type = rng.choice((*SCALAR_FORMATS, STRING, ARRAY))
        doc.kvs.insert(rng.randrange(len(doc.kvs) + 1), [random_text(rng), value_type, random_value(rng, value_type)])
        return "key added"
    if choice == 6 or choice >= 22:  # tokenizer data
        return mutate_tokenizer(rng, doc)
    if choice == 7 and doc.tensors:  # dimensions
        tensor = rng.choice(doc.tensors)
        operation = rng.randrange(4)
        if operation == 0 and tensor.dims:
            i = rng.randrange(len(tensor.dims))
            tensor.dims[i] = interesting_int(rng, tensor.dims[i])
        elif operation == 1:
            tensor.dims.append(rng.choice((1, 1, 2, 0, 2**32)))
        elif operation == 2 and tensor.dims:
            tensor.dims.pop()
        else:
            tensor.dims.reverse()
        return f"dims of {tensor.name!r}"
    if choice == 8 and doc.tensors:  # a tensor type id, data unchanged
        tensor = rng.choice(doc.tensors)
        tensor.type = rng.choice((*range(0, 42), 42, 255, 2**31, 2**32 - 1)) if rng.random() < 0.7 else tensor.type ^ 1
        return f"type of {tensor.name!r}"
    if choice == 9 and doc.tensors:  # a tensor converted to another type the loader reads, consistently
        tensor = rng.choice(doc.tensors)
        target = rng.choice(("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q6_K", "Q2_K", "I32"))
        kind = gguf.GGMLQuantizationType[target]
        import numpy as np

        try:
            with np.errstate(all="ignore"):
                values = gguf.quants.dequantize(
                    np.frombuffer(tensor.data, np.uint8).reshape(list(tensor.dims[::-1][:-1]) + [-1]),
                    gguf.GGMLQuantizationType(tensor.type),
                ).astype(np.float32)
                tensor.data = (
                    gguf.quants.quantize(values, kind).tobytes()
                    if target != "I32"
                    else values.astype(np.int32).tobytes()
                )
                tensor.type = int(kind)
        except Exception:
            return "conversion skipped"
        return f"{tensor.name!r} as {target}"
    if choice == 10 and doc.tensors:  # a tensor's offset
        tensor = rng.choice(doc.tensors)
        tensor.offset = interesting_int(rng, 0) if rng.random() < 0.5 else rng.choice((1, 16, 31, 32, 33, 2**63))
        return f"offset of {tensor.name!r}"
    if choice == 11 and doc.tensors:  # a tensor dropped, repeated or renamed
        i = rng.randrange(len(doc.tensors))
        operation = rng.randrange(4)
        if operation == 0:
            del doc.tensors[i]
        elif operation == 1:
            doc.tensors.insert(rng.randrange(len(doc.tensors) + 1), copy.copy(doc.tensors[i]))
        elif operation == 2:
            doc.tensors[i].name = rng.choice(doc.tensors).name if rng.random() < 0.5 else random_text(rng)
        else:
            doc.tensors.insert(i, doc.tensors.pop(rng.randrange(len(doc.tensors))))
        return "tensor list"
    if choice == 12 and doc.tensors:  # tensor bytes
        tensor = rng.choice(doc.tensors)
        data = bytearray(tensor.data)
        if data:
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.getrandbits(8)
        tensor.data = bytes(data)
        return f"bytes of {tensor.name!r}"
    if choice in (13, 14) and doc.tensors:  # a block scale (or a float) made NaN, inf, huge, subnormal
        tensor = rng.choice(doc.tensors)
        kind = (
            gguf.GGMLQuantizationType(tensor.type)
            if tensor.type in set(int(t) for t in gguf.GGMLQuantizationType)
            else None
        )
        data = bytearray(tensor.data)
        if not data or kind is None:
            return "no scale"
        block, block_bytes = gguf.GGML_QUANT_SIZES[kind]
        if kind == gguf.GGMLQuantizationType.F32:
            position = rng.randrange(len(data) // 4) * 4
            data[position : position + 4] = struct.pack("<I", _float32_bits(rng.choice(INTERESTING_FLOATS)))
        else:
            # Block-quantized types open with fp16 scales (Q4_1/Q5_1 also a min at byte 2); F16
            # and BF16 are 2-byte values.
            position = rng.randrange(max(1, len(data) // block_bytes)) * block_bytes
            position += rng.choice((0, 2)) if block > 1 else 0
            data[position : position + 2] = struct.pack("<H", rng.choice(INTERESTING_HALVES))
        tensor.data = bytes(data)
        return f"scale of {tensor.name!r}"
    if choice == 15 and doc.tensors:  # tensor data cut or grown
        tensor = rng.choice(doc.tensors)
        tensor.data = tensor.data[: rng.randrange(len(tensor.data) + 1)] if rng.random() < 0.5 else tensor.data * 2
        return f"size of {tensor.name!r}"
    if choice == 16:
        doc.n_kv = interesting_int(rng, len(doc.kvs))
        return "key count"
    if choice == 17:
        doc.n_tensors = interesting_int(rng, len(doc.tensors))
        return "tensor count"
    if choice == 18:
        doc.version = rng.choice((0, 1, 2, 3, 4, 0x03000000, 2**32 - 1))
        return "version"
    if choice == 19:
        kv = find_kv(doc, b"general.alignment")
        if kv is None:
            doc.kvs.append(kv := [b"general.alignment", 4, 32])
        kv[1], kv[2] = rng.choice((4, 4, 4, 5, 10)), rng.choice((0, 1, 2, 3, 8, 16, 24, 64, 2**31, 2**32 - 1))
        return "alignment"
    if choice == 20:  # arrays of arrays
        items = (ARRAY, [(4, list(range(rng.choice((0, 1, 3))))) for _ in range(rng.choice((1, 2, 4)))])
        for _ in range(rng.randrange(6)):
            items = (ARRAY, [items])
        doc.kvs.insert(rng.randrange(len(doc.kvs) + 1), [random_text(rng) or b"k", ARRAY, items])
        return "nested arrays"
    item.keep = rng.choice((None, "q8_0", "q4_0", "q4_1"))
    return f"kept {item.keep}"


def mutate_tokenizer(rng: random.Random, doc: GGUFDoc) -> str:
    tokens = token_strings(doc)
    key = rng.choice((b"tokenizer.ggml.tokens", b"tokenizer.ggml.merges", b"tokenizer.ggml.token_type"))
    kv = find_kv(doc, key)
    if kv is None or not isinstance(kv[2], tuple):
        if key == b"tokenizer.ggml.token_type":
            doc.kvs.append([key, ARRAY, (5, [1] * len(tokens))])
        else:
            doc.kvs.append([key, ARRAY, (STRING, [])])
        return f"{key!r} added"
    element_type, items = kv[2][0], list(kv[2][1])
    operation = rng.randrange(5)
    if key == b"tokenizer.ggml.tokens" and items:
        i = rng.randrange(len(items))
        items[i] = rng.choice((b"", b"\x00", rng.choice(tokens), random_text(rng), items[i] + items[i]))
    elif key == b"tokenizer.ggml.merges":
        # Pairs of real tokens whose concatenation may or may not be a token: what a BPE checks.
        a, b = rng.choice(tokens), rng.choice(tokens)
        merge = rng.choice((a + b" " + b, a + b, a + b" " + b + b" " + a, b" " + a, a + b"  " + b, random_text(rng)))
        if operation < 3 or not items:
            items.insert(rng.randrange(len(items) + 1), merge)
        else:
            items[rng.randrange(len(items))] = merge
    elif items:
        i = rng.randrange(len(items))
        items[i] = rng.choice((0, 1, 2, 3, 4, 5, 6, -1, 2**31 - 1))
    kv[2] = (element_type, items)
    return f"tokenizer {key!r}"


def mutate_hf(rng: random.Random, item: Input) -> str:
    doc: HFDoc = item.doc
    choice = rng.randrange(12)
    if choice <= 2:  # a config value
        if not isinstance(doc.config, dict):
            doc.config = {}
        key = rng.choice(
            ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "n_ctx", "layer_norm_epsilon", "model_type")
            + ("activation_function", "tie_word_embeddings", "sliding_window", "pos_embedding", "scale_attn_weights")
        )
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
    if choice == 3 and isinstance(doc.config, dict) and doc.config:
        del doc.config[rng.choice(list(doc.config))]
        return "config key dropped"
    if choice == 4:  # config.json's syntax
        text = json.dumps(doc.config).encode() if doc.config_raw is None else doc.config_raw
        operation = rng.randrange(6)
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
        else:
            doc.config_raw = text + b" " * rng.choice((1, 1000))
        return "config.json syntax"
    entries = [name for name in doc.header if name != "__metadata__"]
    if choice == 5 and entries:  # a tensor's dtype
        entry = doc.header[rng.choice(entries)]
        if isinstance(entry, dict):
            entry["dtype"] = rng.choice(("F32", "F16", "BF16", "F64", "I8", "U8", "F8_E4M3", "BOOL", "X", 3))
        return "safetensors dtype"
    if choice == 6 and entries:  # a tensor's shape
        entry = doc.header[rng.choice(entries)]
        if isinstance(entry, dict) and isinstance(entry.get("shape"), list):
            shape = entry["shape"]
            operation = rng.randrange(4)
            if operation == 0 and shape:
                shape[rng.randrange(len(shape))] = interesting_int(rng, shape[0]) % 2**64
            elif operation == 1:
                shape.append(rng.choice((1, 2, 0)))
            elif operation == 2 and shape:
                shape.pop()
            else:
                shape.reverse()
        return "safetensors shape"
    if choice == 7 and entries:  # data offsets
        entry = doc.header[rng.choice(entries)]
        if isinstance(entry, dict) and isinstance(entry.get("data_offsets"), list):
            offsets = entry["data_offsets"]
            i = rng.randrange(2)
            offsets[i] = interesting_int(rng, offsets[i]) % 2**64 if rng.random() < 0.7 else offsets[1 - i]
        return "safetensors offsets"
    if choice == 8 and entries:  # entries dropped, renamed, added
        name = rng.choice(entries)
        operation = rng.randrange(3)
        if operation == 0:
            del doc.header[name]
        elif operation == 1:
            doc.header[name.removeprefix("transformer.") + rng.choice(("", "x"))] = doc.header.pop(name)
        else:
            doc.header["__metadata__"] = rng.choice(({"format": "pt"}, {"a": 1}, [1], "x"))
        return "safetensors entries"
    if choice == 9:  # the header's bytes
        text = json.dumps(doc.header).encode()
        operation = rng.randrange(3)
        if operation == 0:
            doc.header_raw = b"[" * 200 + b"]" * 200
        elif operation == 1 and text:
            cut = rng.randrange(len(text))
            doc.header_raw = text[:cut] + rng.choice((b"\xff", b"", b"}", b"{")) + text[cut + 1 :]
        else:
            doc.header_raw = text + b" " * rng.choice((1, 7))
        return "safetensors header syntax"
    if choice == 10 and doc.data:  # tensor bytes: NaN, inf, anything
        data = bytearray(doc.data)
        position = rng.randrange(len(data) // 4) * 4
        data[position : position + 4] = struct.pack("<I", _float32_bits(rng.choice(INTERESTING_FLOATS)))
        if rng.random() < 0.5:
            data[position : position + 2] = struct.pack("<H", rng.choice(INTERESTING_HALVES))
        doc.data = bytes(data)
        return "safetensors data"
    doc.data = doc.data[: rng.randrange(len(doc.data) + 1)]
    return "safetensors data cut"


def mutate_raw(rng: random.Random, item: Input) -> str:
    """A mutation of the written bytes: a header field set to an interesting value, bytes
    overwritten, inserted or deleted, the file cut."""
    name = "model.gguf" if item.kind == "gguf" else rng.choice(("config.json", "model.safetensors"))
    size = len(item.files()[name])
    choice = rng.randrange(6)
    if choice <= 1 and item.kind == "gguf":
        # A field kind first (there are hundreds of string lengths and a few array lengths).
        what = rng.choice(FIELD_KINDS)
        value = rng.choice((*range(14), 2**31, 2**32 - 1)) if what.endswith("type") else interesting_int(rng)
        item.patches.append(("field", name, what, rng.getrandbits(16), value))
        return f"header field: {what}"
    if choice == 2 and item.kind == "hf" and name == "model.safetensors":
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


def mutate(rng: random.Random, parent: Input) -> Input:
    child = copy.deepcopy(parent)
    for _ in range(rng.choice((1, 1, 2, 3, 4))):
        if child.doc is not None and rng.random() < 0.8:
            (mutate_gguf if child.kind == "gguf" else mutate_hf)(rng, child)
        else:
            mutate_raw(rng, child)
    child.origin = parent.origin
    return child


# -- the worker ---------------------------------------------------------------------------------

# Source files whose executed line pairs are the coverage signal.
TRACED = ("gpt/gguf_file.py", "gpt/weights.py", "gpt/config.py", "gpt/resources.py", "gpt/tokenizer.py")
TRACED_GGUF = ("gguf/gguf_reader.py", "gguf/quants.py")


def worker_main(memory_headroom: int) -> None:
    """Loads inputs named on stdin (one JSON request a line), answers one JSON line each: the
    outcome and the line pairs of the traced files that ran for the first time in this worker.
    `memory_headroom`: MiB of address space allowed above what the imports mapped."""
    import resource

    import gguf
    import numpy as np
    import tokenizers  # noqa: F401

    import gpt
    from gpt.gguf_file import QuantizedTensor, load_gguf
    from gpt.model import GPT
    from gpt.weights import load_pretrained, validate_weights

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # What a finding may take: the address space now (the extension, LLVM, numpy) plus the headroom.
    with open("/proc/self/status", encoding="ascii") as f:
        mapped = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (mapped + (memory_headroom << 20), resource.RLIM_INFINITY))

    seen = set()
    current = set()
    traced = {}  # co_filename -> short name, for the traced files only (None: not traced)
    previous = [0]

    def local_trace(frame, event, arg):
        if event == "line":
            current.add((traced[frame.f_code.co_filename], previous[0], frame.f_lineno))
            previous[0] = frame.f_lineno
        return local_trace

    def global_trace(frame, event, arg):
        filename = frame.f_code.co_filename
        if filename not in traced:
            suffix = next((name for name in TRACED + TRACED_GGUF if filename.endswith(os.sep + name)), None)
            traced[filename] = suffix
        if traced[filename] is None:
            return None
        previous[0] = -frame.f_code.co_firstlineno  # a function's entry is an edge of its own
        return local_trace

    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        request = json.loads(line)
        current.clear()
        started = time.perf_counter()
        sys.settrace(global_trace)
        try:
            if request["kind"] == "gguf":
                config, weights, tokenizer = load_gguf(request["path"], keep_quantized=request["keep"])
                quantized = {n: (w.format, w.blocks) for n, w in weights.items() if isinstance(w, QuantizedTensor)}
                floats = {n: w for n, w in weights.items() if n not in quantized}
                validate_weights(config, floats, copy=False, given_quantized=quantized)
                # An oracle for what loads: kept blocks dequantize (by gguf, not the loader) to finite values.
                for name, (fmt, blocks) in quantized.items():
                    with np.errstate(all="ignore"):
                        values = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[fmt.upper()])
                    if not np.isfinite(values).all():
                        raise AcceptedBadWeights(f"{name}: its kept {fmt} blocks dequantize to NaN or infinity")
                # As GPT.from_gguf builds it (binding and repacking the weights compiles nothing).
                options = gpt.CompileOptions(disk_cache=False, threads=1, weights=request["keep"] or "f32")
                GPT(config, floats, options, _copy_weights=False, _quantized=quantized)
                if tokenizer is not None:
                    ids = tokenizer.encode(SAMPLE_TEXT)
                    tokenizer.decode([*ids, 0, config.vocab_size - 1])
            else:
                config, tensors = load_pretrained(request["path"])
                options = gpt.CompileOptions(disk_cache=False, threads=1)
                GPT(config, validate_weights(config, tensors, copy=False), options, _copy_weights=False)
            outcome = {"outcome": "loaded"}
        except ValueError as e:  # gpt.ModelFileError or another ValueError: a refusal
            outcome = {"outcome": "refused", "type": type(e).__name__, "message": str(e)}
        except MemoryError as e:
            if "this process can use" in str(e):  # gpt.resources: the documented refusal
                outcome = {"outcome": "refused", "type": "MemoryError", "message": str(e)}
            else:
                outcome = finding(e, "memory")
        except BaseException as e:  # noqa: B036 -- a Rust panic (PanicException) is a BaseException
            outcome = finding(e, "accepted" if isinstance(e, AcceptedBadWeights) else "exception")
        finally:
            sys.settrace(None)
        outcome["seconds"] = time.perf_counter() - started
        new = current - seen
        seen |= new
        outcome["edges"] = [list(edge) for edge in new]
        sys.stdout.write(json.dumps(outcome) + "\n")
        sys.stdout.flush()


class AcceptedBadWeights(Exception):
    """A file loaded whose weights are not finite: the model would compute NaN."""


def finding(error: BaseException, kind: str) -> dict:
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"
    return {
        "outcome": "finding",
        "kind": kind,
        "type": type(error).__name__,
        "message": str(error)[:2000],
        "where": where,
        "traceback": "".join(traceback.format_exception(error))[-4000:],
    }


class Worker:
    """A worker process that loads input after input; restarted after each finding."""

    def __init__(self, memory_headroom: int):
        self.memory_headroom = memory_headroom  # MiB
        self.process = None
        self.buffer = b""

    def start(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", RUST_BACKTRACE="0")
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--worker",
            "--memory-headroom",
            str(self.memory_headroom),
        ]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        self.buffer = b""
        ready = self.read_line(120)
        if ready is None or not ready.get("ready"):
            self.stop()
            raise RuntimeError("the loader worker did not start (run it with --worker to see why)")

    def read_line(self, timeout: float) -> dict | None:
        """The worker's next answer, or None when it gives none in `timeout` seconds or dies."""
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def stop(self) -> int | None:
        """Ends the worker; its exit status (negative: the signal that ended it)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.kill()
        status = self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()
        self.process = None
        return status

    def run(self, kind: str, path: str, keep: str | None, timeout: float) -> dict:
        if self.process is None:
            self.start()
        try:
            self.process.stdin.write((json.dumps({"kind": kind, "path": path, "keep": keep}) + "\n").encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # it died: read_line says so
        result = self.read_line(timeout)
        if result is None:
            hung = self.process.poll() is None
            status = self.stop()
            if hung:
                return {"outcome": "finding", "kind": "hang", "type": "timeout", "message": f"no answer in {timeout} s"}
            return {
                "outcome": "finding",
                "kind": "crash",
                "type": f"exit status {status}",
                "message": "the worker died",
            }
        if result["outcome"] == "finding":
            self.stop()  # its state may be spoiled (a Rust panic, a half-built model)
        return result


# -- the campaign -------------------------------------------------------------------------------


def signature(result: dict) -> str:
    """What makes two findings the same: their kind, exception type and where it was raised."""
    return f"{result['kind']}:{result['type']}:{result.get('where', '')}"


def minimize(worker: Worker, item: Input, expected: str, scratch: str, timeout: float, budget: float) -> Input:
    """A smaller input with the same finding, for at most `budget` seconds: tensors, metadata keys
    and byte patches removed in ever smaller runs (delta debugging), and for a HF directory the
    safetensors file or config.json emptied where the finding does not need it."""

    deadline = time.monotonic() + budget

    def reproduces(candidate: Input) -> bool:
        if time.monotonic() > deadline:
            return False
        path = write_input(candidate, scratch)
        result = worker.run(candidate.kind, path, candidate.keep, timeout)
        return result["outcome"] == "finding" and signature(result) == expected

    def shrink(best: Input, items) -> Input:
        """Removes runs of the list that `items(input)` returns while the finding stays."""
        chunks = 2
        while items(best) and time.monotonic() < deadline:
            size = -(-len(items(best)) // chunks)
            for start in range(0, len(items(best)), size):
                candidate = copy.deepcopy(best)
                del items(candidate)[start : start + size]
                if reproduces(candidate):
                    best = candidate
                    chunks = max(chunks - 1, 2)
                    break
            else:
                if size == 1:
                    break
                chunks = min(chunks * 2, len(items(best)))
        return best

    best = item
    if best.kind == "gguf" and best.doc is not None:
        best = shrink(best, lambda candidate: candidate.doc.tensors)
        best = shrink(best, lambda candidate: candidate.doc.kvs)
    if best.kind == "hf" and best.doc is not None:
        for empty in ({"header": {}, "data": b"", "header_raw": None}, {"config": {}, "config_raw": None}):
            candidate = copy.deepcopy(best)
            for name, value in empty.items():
                setattr(candidate.doc, name, value)
            if reproduces(candidate):
                best = candidate
    return shrink(best, lambda candidate: candidate.patches)


def run_campaign(args) -> int:
    rng = random.Random(args.seed)
    out = os.path.abspath(args.out)
    os.makedirs(os.path.join(out, "findings"), exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="fuzz-loaders-", dir=out)
    started = time.monotonic()
    seeds = make_seeds(scratch)
    for path in regression_files(args.corpus):
        seeds.append(read_regression(path))
    corpus = list(seeds)
    edges = set()
    worker = Worker(args.memory_headroom)
    outcomes = {"loaded": 0, "refused": 0, "finding": 0}
    messages = set()
    refusals = {}  # exception type -> count
    broken_seeds = []
    findings = {}
    executions = 0
    new_inputs = 0
    last_report = time.monotonic()
    generated = len(seeds) - len(regression_files(args.corpus))
    print(f"loader fuzz: {len(seeds)} seeds ({generated} generated, the rest from {args.corpus}), seed {args.seed}")
    try:
        # The seeds first, as they are (they must load, or be refused as the corpus expects).
        queue = [(item, False) for item in seeds]
        deadline = started + args.seconds
        while time.monotonic() < deadline:
            if queue:
                item, mutated = queue.pop(0)
            else:
                parent = rng.choice(corpus)
                item, mutated = mutate(rng, parent), True
            path = write_input(item, os.path.join(scratch, "input"))
            result = worker.run(item.kind, path, item.keep, args.timeout)
            executions += 1
            outcomes[result["outcome"]] += 1
            if not mutated and item.origin.startswith("seed") and result["outcome"] != "loaded":
                # A generated seed must load: mutations of a refused file test little.
                print(f"loader fuzz: {item.origin} does not load: {result.get('type')}: {result.get('message')}")
                broken_seeds.append(item.origin)
            if result["outcome"] == "refused":
                messages.add(_template(result["message"]))
                refusals[result["type"]] = refusals.get(result["type"], 0) + 1
                if result["type"] != "ModelFileError" and args.verbose:
                    print(f"loader fuzz: refused with {result['type']}: {result['message'][:300]}")
            fresh = {tuple(edge) for edge in result.get("edges", [])} - edges
            if fresh:
                edges |= fresh
                if mutated:
                    corpus.append(item)
                    new_inputs += 1
            if result["outcome"] == "finding":
                key = signature(result)
                if key not in findings:
                    small = minimize(
                        worker, item, key, os.path.join(scratch, "minimize"), args.timeout, args.minimize_seconds
                    )
                    stem = os.path.join(
                        out, "findings", f"{result['kind']}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
                    )
                    saved = save_finding(small, stem)
                    with open(stem + ".txt", "w", encoding="utf-8") as f:
                        f.write(json.dumps({k: v for k, v in result.items() if k != "edges"}, indent=2))
                    findings[key] = saved
                    print(f"loader fuzz: NEW FINDING {key}: {result.get('message', '')[:300]}\n  saved {saved}")
            if time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                print(_status(executions, started, corpus, new_inputs, edges, outcomes, findings), flush=True)
    finally:
        worker.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - started
    summary = {
        "executions": executions,
        "seconds": elapsed,
        "executions_per_second": executions / elapsed if elapsed else 0.0,
        "new_inputs": new_inputs,
        "corpus": len(corpus),
        "edges": len(edges),
        "outcomes": outcomes,
        "distinct_refusals": len(messages),
        "refusals_by_type": refusals,
        "findings": sorted(findings.values()),
        "seeds_that_do_not_load": broken_seeds,
    }
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    print(_status(executions, started, corpus, new_inputs, edges, outcomes, findings))
    print(
        f"loader fuzz: {len(messages)} distinct refusals "
        f"({', '.join(f'{name} {count}' for name, count in sorted(refusals.items()))}); {len(findings)} new finding(s)"
        + (f" in {out}/findings" if findings else "")
    )
    return 1 if findings or broken_seeds else 0


def _template(message: str) -> str:
    """A refusal message with its numbers and quoted names blanked: one entry per kind of refusal."""
    import re

    message = re.sub(r"/[^\s:']+", "FILE", message)
    message = re.sub(r"'[^']*'|\"[^\"]*\"", "'_'", message)
    return re.sub(r"-?\d[\d.e+-]*", "N", message)[:160]


def _status(executions, started, corpus, new_inputs, edges, outcomes, findings) -> str:
    elapsed = max(time.monotonic() - started, 1e-9)
    return (
        f"loader fuzz: {executions} inputs in {elapsed:.0f} s ({executions / elapsed:.1f} exec/s), "
        f"corpus {len(corpus)} (+{new_inputs} new inputs), {len(edges)} line pairs, "
        f"loaded {outcomes['loaded']}, refused {outcomes['refused']}, findings {len(findings)}"
    )


def run_replay(args) -> int:
    """Runs every regression file (or the files named) through the worker; prints one JSON line
    each (file, outcome, exception type, seconds) and exits 1 unless each was refused with
    gpt.ModelFileError."""
    paths = []
    for target in args.replay:
        paths += regression_files(target) if os.path.isdir(target) else [target]
    worker = Worker(args.memory_headroom)
    scratch = tempfile.mkdtemp(prefix="fuzz-loaders-replay-")
    status = 0
    try:
        worker.start()  # not timed: each file's seconds are its own
        for path in paths:
            item = read_regression(path)
            started = time.monotonic()
            result = worker.run(item.kind, write_input(item, os.path.join(scratch, "input")), item.keep, args.timeout)
            record = {
                "file": path,
                "outcome": result["outcome"],
                "type": result.get("type"),
                "message": result.get("message", "")[:500],
                "seconds": round(time.monotonic() - started, 3),
            }
            print(json.dumps(record), flush=True)
            if result.get("type") != "ModelFileError":
                status = 1
    finally:
        worker.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return status


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60, help="time budget of the campaign")
    parser.add_argument("--seed", type=int, default=1, help="random seed (a fixed seed repeats a run)")
    parser.add_argument(
        "--out",
        default=os.path.join(tempfile.gettempdir(), "gpt-loader-fuzz"),
        help="findings and summary.json go here",
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds an input may take before it is a hang")
    parser.add_argument(
        "--memory-headroom", type=int, default=1024, help="MiB of address space an input may add (RLIMIT_AS)"
    )
    parser.add_argument("--minimize-seconds", type=float, default=20.0, help="time spent minimizing each new finding")
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    parser.add_argument(
        "--corpus",
        default=os.path.join(here, "tests", "fuzz", "loader_regressions"),
        help="regression corpus (extra seeds)",
    )
    parser.add_argument("--replay", nargs="*", help="replay these regression files or directories instead of fuzzing")
    parser.add_argument("--verbose", action="store_true", help="print refusals that are not gpt.ModelFileError")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args.memory_headroom)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if args.replay is not None:
        return run_replay(args)
    return run_campaign(args)


if __name__ == "__main__":
    sys.exit(main())
