"""The loader fuzzer's inputs (tools/fuzz/fuzz_loaders.py): GGUF files parsed into a structure and
written back with consistent lengths and offsets, HF directories, chat templates, GPU artifacts
and tokenizer inputs (a vocabulary and a text), the Input that holds any of them with its byte
patches, written into a directory for the worker, and the regression corpus's files."""

import dataclasses
import functools
import io
import json
import os
import shutil
import struct
import tarfile

# -- formats ------------------------------------------------------------------------------------

# What an input is, and what the worker does with it: "gguf" a GGUF file loaded (the GPT
# constructor, its tokenizer and chat template), "hf" a HF directory likewise, "template" a chat
# template rendered, "artifact" a GPU artifact loaded up to the driver, "model" a Llama-family
# GGUF built as GPT.from_gguf(weights="auto") builds it (its K-quant blocks repacked) and run one
# decode step, "tokenizer" a text encoded and decoded by a GGUF or tokenizer.json tokenizer.
KINDS = ("gguf", "hf", "template", "artifact", "model", "tokenizer")
# The kinds a run fuzzes unless told otherwise (--kinds): the cheap ones, each input milliseconds.
DEFAULT_KINDS = ("gguf", "hf", "template", "artifact")
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
    "tokenizer.ggml.scores",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_space_prefix",
    "tokenizer.chat_template",
    "llama.block_count",
    "llama.context_length",
    "llama.embedding_length",
    "llama.feed_forward_length",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.attention.layer_norm_rms_epsilon",
    "llama.rope.freq_base",
    "llama.vocab_size",
)
# The same keys of the other Llama-family readers, and the ones only some of them read.
KNOWN_KEYS += tuple(
    key.replace("llama.", f"{arch}.") for arch in ("qwen2", "phi3") for key in KNOWN_KEYS if key.startswith("llama.")
)
KNOWN_KEYS += ("phi3.attention.sliding_window", "llama.rope.scaling.type", "llama.rope.scaling.factor")
KNOWN_KEYS += ("llama.rope.scaling.original_context_length", "tokenizer.ggml.eot_token_id")
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


@functools.cache
def kept_formats() -> tuple[str, ...]:
    """The formats gpt.gguf_file writes a GPT-2 in and loads as blocks (`keep_quantized`)."""
    from gpt.gguf_file import FORMATS, KEPT_QUANTIZED

    return tuple(fmt for fmt in KEPT_QUANTIZED if fmt in FORMATS)


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
            # (element type, elements); anything else a mutation left where an array is (an int,
            # or a pair doubled into a 4-tuple by the tokenizer mutation) is an empty array.
            is_pair = isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], (list, tuple))
            element_type, items = item if is_pair and isinstance(item[0], int) else (0, [])
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
    extra: dict = dataclasses.field(default_factory=dict)  # other files: tokenizer_config.json, ...
    links: dict = dataclasses.field(default_factory=dict)  # name -> symbolic link target
    fifos: list = dataclasses.field(default_factory=list)  # names made FIFOs
    weights_name: str = "model.safetensors"  # a shard's name when model.safetensors.index.json lists shards


@dataclasses.dataclass
class TemplateDoc:
    """A chat template as the pieces of jinja2 source it was generated from (one construct each)."""

    pieces: list


@dataclasses.dataclass
class ArtifactDoc:
    """A GPU artifact (gpt_runtime): manifest.json's value (or its raw bytes), the PTX module and
    the weights' safetensors bytes, under the names the manifest gives them."""

    manifest: object
    ptx: bytes
    weights: bytes
    manifest_raw: bytes | None = None
    links: dict = dataclasses.field(default_factory=dict)
    fifos: list = dataclasses.field(default_factory=list)

    def files(self) -> dict[str, bytes]:
        manifest = self.manifest_raw if self.manifest_raw is not None else json.dumps(self.manifest).encode()
        target = self.manifest.get("target") if isinstance(self.manifest, dict) else None
        module = target.get("module") if isinstance(target, dict) else None
        module = module if isinstance(module, str) and _plain_name(module) else "kernels.sm_80.ptx"
        weights = self.manifest.get("weights") if isinstance(self.manifest, dict) else None
        weights = weights.get("file") if isinstance(weights, dict) else None
        weights = weights if isinstance(weights, str) and _plain_name(weights) else "weights.safetensors"
        return {"manifest.json": manifest, module: self.ptx, weights: self.weights}


def _plain_name(name: str) -> bool:
    """A name the fuzzer may create inside the input's directory (the loaders get the others)."""
    return 0 < len(name) < 100 and "/" not in name and "\x00" not in name and name not in (".", "..")


@dataclasses.dataclass
class TokenizerDoc:
    """A tokenizer and a text for it: a GGUF file's vocabulary (`vocab`, a GGUFDoc of a nano model,
    read by gpt.gguf_file.load_gguf) or a tokenizer.json (`tokenizer_json`, read by
    gpt.tokenizer.HFTokenizer), and the text encoded and decoded (no lone surrogates)."""

    vocab: GGUFDoc | None
    tokenizer_json: bytes | None
    text: str

    def files(self) -> dict[str, bytes]:
        files = {"text.txt": self.text.encode()}
        if self.vocab is not None:
            files["vocab.gguf"] = emit_gguf(self.vocab)[0]
        if self.tokenizer_json is not None:
            files["tokenizer.json"] = self.tokenizer_json
        return files


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
    """A fuzz input of one kind (KINDS), as a structure (`doc`) or raw bytes (`raw`, a regression
    file that does not parse), plus mutations of the written bytes (`patches`), applied in order.
    `keep`: the format a GGUF's weights are kept quantized in, or None."""

    kind: str  # one of KINDS
    doc: object
    raw: object = None  # bytes (gguf, model, template) or (files, links, FIFOs) when doc is None
    keep: str | None = None
    patches: list = dataclasses.field(default_factory=list)
    origin: str = ""
    loaded: bool = False  # whether it loaded when it ran (the campaign's choice of parents)

    def files(self) -> dict[str, bytes]:
        """File name -> bytes: {"model.gguf"}, {"config.json", "model.safetensors", ...},
        {"chat_template.jinja"}, {"manifest.json", the PTX module, the weights} or {"text.txt",
        "vocab.gguf" or "tokenizer.json"}."""
        if self.kind in ("gguf", "model"):
            data, fields, _ = emit_gguf(self.doc) if self.doc is not None else (self.raw, [], [])
            return {"model.gguf": apply_patches(data, fields, self.patches, "model.gguf")}
        if self.kind == "template":
            text = "".join(self.doc.pieces).encode("utf-8", "surrogatepass") if self.doc is not None else self.raw
            return {"chat_template.jinja": apply_patches(text, [], self.patches, "chat_template.jinja")}
        if self.kind in ("artifact", "tokenizer"):
            files = self.doc.files() if self.doc is not None else dict(self.raw[0])
        elif self.doc is not None:
            config, weights = emit_hf(self.doc)
            files = {"config.json": config, self.doc.weights_name: weights, **self.doc.extra}
        else:
            files = dict(self.raw[0])
        return {name: apply_patches(data, [], self.patches, name) for name, data in files.items()}

    def special(self) -> tuple[dict, list]:
        """(name -> symbolic link target, names of FIFOs): made in place of files of those names."""
        if self.doc is not None and self.kind in ("hf", "artifact"):
            return self.doc.links, self.doc.fifos
        if self.doc is None and self.kind in ("hf", "artifact"):
            return self.raw[1], self.raw[2]
        return {}, []


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
    """Writes the input's files, links and FIFOs into `directory` (emptied first); the path the
    loader takes. A link's target is written as it is: an absolute path, a name in the directory,
    "../outside" (the file OUTSIDE beside the directory, which exists) or one that does not exist."""
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    with open(os.path.join(os.path.dirname(directory), "outside"), "wb") as f:
        f.write(b'{"secret": "outside the model directory"}')
    links, fifos = item.special()
    for name, data in item.files().items():
        if _plain_name(name) and name not in links and name not in fifos:
            with open(os.path.join(directory, name), "wb") as f:
                f.write(data)
    for name, target in links.items():
        if _plain_name(name):
            os.symlink(target, os.path.join(directory, name))
    for name in fifos:
        if _plain_name(name) and name not in links:
            os.mkfifo(os.path.join(directory, name))
    if item.kind in ("gguf", "model"):
        return os.path.join(directory, "model.gguf")
    if item.kind == "template":
        return os.path.join(directory, "chat_template.jinja")
    return directory


# -- the regression corpus ----------------------------------------------------------------------


def read_regression(path: str) -> Input:
    """A file of the regression corpus as an input: NAME.gguf (NAME.keep-q8_0.gguf: loaded with
    that format kept quantized), NAME.model.gguf (a model built and run one decode step),
    NAME.hf.tar.gz (a HF directory: config.json, model.safetensors and any other files, links and
    FIFOs), NAME.jinja (a chat template), NAME.artifact.tar.gz (a GPU artifact: manifest.json, its
    PTX module and weights, links and FIFOs) or NAME.tokenizer.tar.gz (text.txt and vocab.gguf or
    tokenizer.json)."""
    base = os.path.basename(path)
    with open(path, "rb") as f:
        raw = f.read()
    if base.endswith(".jinja"):
        return Input("template", None, raw=raw, origin=base)
    if base.endswith(".model.gguf"):
        try:
            return Input("model", parse_gguf(raw), origin=base)
        except Exception:
            return Input("model", None, raw=raw, origin=base)
    if base.endswith(TAR_SUFFIXES):
        files, links, fifos = {}, {}, []
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as tar:
            for member in tar.getmembers():
                if member.issym():
                    links[member.name] = member.linkname
                elif member.isfifo():
                    fifos.append(member.name)
                elif member.isfile():
                    files[member.name] = tar.extractfile(member).read()
        kind = next(kind for kind, suffix in TAR_SUFFIXES_BY_KIND.items() if base.endswith(suffix))
        try:
            if kind == "tokenizer":
                vocab = parse_gguf(files["vocab.gguf"]) if "vocab.gguf" in files else None
                doc = TokenizerDoc(vocab, files.get("tokenizer.json"), files["text.txt"].decode())
            elif kind == "hf":
                header, data = parse_safetensors(files["model.safetensors"])
                extra = {k: v for k, v in files.items() if k not in ("config.json", "model.safetensors")}
                doc = HFDoc(None, header, data, config_raw=files["config.json"], extra=extra, links=links, fifos=fifos)
            else:
                doc = ArtifactDoc(json.loads(files["manifest.json"]), b"", b"", files["manifest.json"], links, fifos)
                names = list(doc.files())
                doc.ptx, doc.weights = files[names[1]], files[names[2]]
                if set(names) != set(files):
                    raise ValueError("files the manifest does not name")
            return Input(kind, doc, origin=base)
        except Exception:
            return Input(kind, None, raw=(files, links, fifos), origin=base)
    keep = next((fmt for fmt in kept_formats() if f".keep-{fmt}." in base), None)
    try:
        return Input("gguf", parse_gguf(raw), keep=keep, origin=base)
    except Exception:
        return Input("gguf", None, raw=raw, keep=keep, origin=base)


# Kinds whose inputs are saved as a tar file of their files, by the suffix of its name.
TAR_SUFFIXES_BY_KIND = {"hf": ".hf.tar.gz", "artifact": ".artifact.tar.gz", "tokenizer": ".tokenizer.tar.gz"}
TAR_SUFFIXES = tuple(TAR_SUFFIXES_BY_KIND.values())
REGRESSION_SUFFIXES = (".gguf", ".jinja", *TAR_SUFFIXES)


def regression_files(directory: str) -> list[str]:
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, name) for name in os.listdir(directory) if name.endswith(REGRESSION_SUFFIXES))


def save_finding(item: Input, path_stem: str) -> str:
    """Writes an input as one regression-corpus file; returns its path."""
    files = item.files()
    if item.kind in ("gguf", "model", "template"):
        suffix = ".jinja" if item.kind == "template" else (f".keep-{item.keep}" if item.keep else "") + ".gguf"
        suffix = ".model.gguf" if item.kind == "model" else suffix
        with open(path_stem + suffix, "wb") as f:
            f.write(next(iter(files.values())))
        return path_stem + suffix
    path = path_stem + TAR_SUFFIXES_BY_KIND[item.kind]
    links, fifos = item.special()
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            if name not in links and name not in fifos:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for name in fifos:
            info = tarfile.TarInfo(name)
            info.type = tarfile.FIFOTYPE
            tar.addfile(info)
    return path


# -- mutations ----------------------------------------------------------------------------------
