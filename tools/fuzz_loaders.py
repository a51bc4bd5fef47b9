#!/usr/bin/env python3
"""A structure-aware fuzzer for the loaders of files from strangers: GGUF files (GPT-2's, every
tensor type the project reads, kept quantized or dequantized, with their tokenizer data; a Llama's
with a SentencePiece vocabulary and a chat template) through gpt.gguf_file.load_gguf; HF
directories (config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
chat_template.jinja, generation_config.json, any of them a symbolic link or a FIFO) through
gpt.weights.load_pretrained or gpt.hf_checkpoint.load_pretrained and gpt.chat.chat_spec; chat
templates through gpt.chat.ChatTemplate; GPU artifacts (manifest.json, the PTX module, the
weights) through gpt_runtime.load.

    PYTHONPATH=bazel-bin/python python3 tools/fuzz_loaders.py --seconds 60 --seed 1 --out DIR
    PYTHONPATH=bazel-bin/python python3 tools/fuzz_loaders.py --replay tests/fuzz/loader_regressions

Seeds are small valid inputs: a nano GPT-2 as GGUF in f32, f16, bf16, q8_0, q4_0 and q4_1 written
by gpt.gguf_file.save_gguf with a byte-level BPE tokenizer, and as HF directories in F32, F16 and
BF16 with a ChatML template; a nano Llama GGUF with a SentencePiece vocabulary and Llama 2's
template; a nano Llama HF directory (rope_scaling, chat_template.jinja); ChatML, Llama 2's and
Llama 3's templates; the toy GPU artifact of tests/python/toy_artifact.py (when the checkout has
it). The regression corpus joins them. Each input is a seed, or an earlier input that ran new
code, of a kind chosen at random (each kind gets its share of the time), parsed into its
structure and given one to four mutations that know the format: GGUF counts, lengths, value
types, dimensions, tensor types and offsets, metadata values, tensor bytes and fp16 block scales,
tokens, merges, token types, SentencePiece scores, long tokens; config.json values (rope_scaling
of every JSON type) and syntax, tokenizer_config.json's template and tokens, deep nesting, bytes
that are not UTF-8; safetensors header entries and length; links out of the directory and to
devices (/dev/zero, /dev/urandom), FIFOs; templates from a grammar of jinja2 constructs (loops,
ranges nested, nested ifs, arithmetic with ** and *, string multiplication, filters,
strftime_now, raise_exception, attribute access and sandbox escapes, deep nesting, tags left
open); manifest values at any path (sizes, counts, dimensions, names and places), the PTX
module's and the weights' bytes. A worker process loads it under an address-space limit
(RLIMIT_AS) and a time limit, recording which pairs of consecutive lines of the loaders ran
(sys.settrace); an input that runs a new pair joins the corpus ("new inputs").

Loading stops before compiling: the loader, gpt.weights.validate_weights and, for a model that
loads, the GPT constructor (which binds and repacks the weights but compiles nothing), its
tokenizer on a sample text and, when it has a chat template, a first chat turn rendered (within
the prompt bound of its context) and tokenized; gpt_runtime.load up to the driver, which the
worker has none of (NoDeviceError then means every check passed). An input may load, or be
refused with a documented error: a ValueError (gpt.ModelFileError, ChatTemplateError,
gpt_runtime.ArtifactError), FileNotFoundError, or the MemoryError that names what a configuration
needs. Anything else is a finding: another exception, a time-out (a hang), the worker killed by
a signal (a crash) or a MemoryError from memory over the limit. Findings are minimized into
OUT/findings/ (one file each: NAME.gguf, NAME.hf.tar.gz, NAME.jinja or NAME.artifact.tar.gz);
once fixed, they belong in tests/fuzz/loader_regressions/, which
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
# The checkout this file is in (through links: Bazel's runfiles link to it).
REPOSITORY = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
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
# The conversation every chat template renders (transformers' apply_chat_template's variables).
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hello <|im_end|> ünï 日本"},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "2 + 2?"},
]
# A rendered prompt's characters, at most, in the fuzzer (a server allows its body limit).
TEMPLATE_MAX_CHARS = 1 << 16

# -- chat templates: real ones, and a grammar of jinja2 constructs ------------------------------

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
LLAMA2_CHAT = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
    "{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)
LLAMA3_CHAT = (
    "{{- bos_token }}{%- set date_string = strftime_now('%d %b %Y') %}{{- '<|start_header_id|>system"
    "<|end_header_id|>\\n\\nToday Date: ' + date_string + '<|eot_id|>' }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
    "'<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant"
    "<|end_header_id|>\\n\\n' }}{%- endif %}"
)
REAL_TEMPLATES = {"chatml": CHATML, "llama2": LLAMA2_CHAT, "llama3": LLAMA3_CHAT}


def template_expression(rng: random.Random, depth: int = 0) -> str:
    """A jinja2 expression: the variables a chat template gets, literals, arithmetic (** and * of
    numbers and strings), comparisons, filters, tests, calls (range, strftime_now,
    raise_exception, namespace, string methods) and attribute access, sandbox escapes included."""
    if depth > 3 or rng.random() < 0.3:
        return rng.choice(
            (
                "messages", "message", "message.role", "message['content']", "messages[0].content", "messages[-1]",
                "loop.index", "loop.length", "bos_token", "eos_token", "add_generation_prompt", "ns.n", "x", "none",
                "true", "'a'", "'%Y'", "'<|im_end|>'", "''", "[1, 2, 3]", "{'a': 1}", "1.5", "-1",
                str(rng.choice(INTERESTING_INTS)), str(rng.choice((2, 9, 10, 99, 1000, 100000, 10**9))),
                "messages.__class__", "message.__init__", "''.__class__.__mro__", "cycler", "joiner()", "lipsum(3)",
                "range.__globals__", "messages.append", "self", "config", "request", "undefined_name",
            )
        )  # fmt: skip
    a, b = template_expression(rng, depth + 1), template_expression(rng, depth + 1)
    n = str(rng.choice((0, 1, 2, 3, 9, 99, 10**4, 10**5, 10**9, 2**31)))
    return rng.choice(
        (
            f"{a} ** {b}", f"{a} * {b}", f"{a} + {b}", f"{a} - {b}", f"{a} / {b}", f"{a} // {b}", f"{a} % {b}",
            f"{a} ~ {b}", f"{a} == {b}", f"{a} in {b}", f"{a} and {b}", f"not {a}", f"({a})", f"{a}[{b}]",
            f"{a}.{rng.choice(('role', 'content', 'split', 'strip', 'upper', 'items', 'keys', 'format', 'mro'))}",
            f"'a' * {n}", f"'%Y' * {n}", f"{n} ** {n} ** {n}", f"range({n})", f"range({a})", f"strftime_now({a})",
            f"strftime_now('%Y' * {n})", f"raise_exception({a})", f"namespace(n={a})", f"{a}.split({b})",
            f"{a} if {b} else {n}", f"[{a}] * {n}", f"{a}|{rng.choice(TEMPLATE_FILTERS)}",
            f"{a}|{rng.choice(TEMPLATE_FILTERS)}|{rng.choice(TEMPLATE_FILTERS)}",
            f"{a} is {rng.choice(TEMPLATE_TESTS)}",
            "(" * int(rng.choice((2, 50, 3000))) + "1" + ")" * int(rng.choice((2, 50, 3000))),
        )
    )  # fmt: skip


TEMPLATE_FILTERS = (
    "length", "upper", "lower", "trim", "tojson", "string", "int", "float", "list", "first", "last", "reverse",
    "sort", "unique", "join(', ')", "replace('a', 'bb')", "default('x')", "indent(100000)", "center(100000)",
    "wordwrap(1)", "batch(3)", "map(attribute='role')", "selectattr('role', 'equalto', 'user')", "items",
    "format(1, 2)", "truncate(3)", "safe", "escape", "attr('__class__')", "max", "min", "sum", "abs", "round",
    "dictsort", "groupby('role')", "slice(3)", "title", "capitalize", "wordcount", "urlencode", "xmlattr",
)  # fmt: skip
TEMPLATE_TESTS = ("defined", "none", "string", "mapping", "iterable", "number", "divisibleby(0)", "sameas(1)")


def template_statement(rng: random.Random, depth: int = 0) -> str:
    """One jinja2 construct: output, if/elif/else, for (over messages, ranges and nested
    ranges), set, namespaces, macros, filter and raw blocks, loop controls, deep nesting, tags
    that do not close, include/extends/import (no loader), comments and plain text."""
    e = template_expression(rng)
    body = template_statement(rng, depth + 1) if depth < 3 and rng.random() < 0.6 else rng.choice(("x", "{{ e }}"))
    body = body.replace("{{ e }}", "{{ " + template_expression(rng, 2) + " }}")
    n = rng.choice((2, 3, 100, 1000, 10**5))
    deep = rng.choice((2, 30, 500, 5000))
    return rng.choice(
        (
            "{{ " + e + " }}", "{{- " + e + " -}}", f"{{% if {e} %}}{body}{{% endif %}}",
            f"{{% if {e} %}}{body}{{% elif {template_expression(rng)} %}}x{{% else %}}{body}{{% endif %}}",
            f"{{% for message in messages %}}{body}{{% endfor %}}", f"{{% for x in {e} %}}{body}{{% endfor %}}",
            f"{{% for i in range({n}) %}}{{% for j in range({n}) %}}{body}{{% endfor %}}{{% endfor %}}",
            f"{{% set x = {e} %}}", f"{{% set ns = namespace(n=0) %}}{{% set ns.n = {e} %}}",
            f"{{% macro m(a) %}}{body}{{{{ m(a) }}}}{{% endmacro %}}{{{{ m({e}) }}}}",
            f"{{% filter upper %}}{body}{{% endfilter %}}", "{% raw %}{{ x }}{% endraw %}",
            f"{{% for x in messages %}}{{% if {e} %}}{{% break %}}{{% endif %}}{{% continue %}}{{% endfor %}}",
            "{% if true %}" * deep + "x" + "{% endif %}" * deep, "{% for x in [1] %}" * 40 + "x" + "{% endfor %}" * 40,
            f"{{% if {e} %}}", "{% endfor %}", "{{ ", "{% include 'other.jinja' %}", "{% extends 'base' %}",
            "{% import 'x' as y %}", "{# a comment #}", "<|im_start|>", "\n", f"{{% set x = {e} %}}{{{{ x * {n} }}}}",
            f"{{{{ messages|map(attribute='content')|join({e}) }}}}",
            f"{{% for k, v in {e}|items %}}{{{{ k }}}}{{% endfor %}}",
        )
    )  # fmt: skip


def mutate_template(rng: random.Random, item: "Input") -> str:
    """A construct inserted, dropped, repeated, replaced or wrapped in a block; or a real template
    spliced in."""
    pieces = item.doc.pieces
    choice = rng.randrange(7)
    if choice <= 1 or not pieces:
        pieces.insert(rng.randrange(len(pieces) + 1), template_statement(rng))
        return "construct inserted"
    i = rng.randrange(len(pieces))
    if choice == 2:
        del pieces[i]
        return "construct dropped"
    if choice == 3:
        pieces.insert(i, pieces[i] * rng.choice((1, 2, 10)))
        return "construct repeated"
    if choice == 4:
        pieces[i] = template_statement(rng)
        return "construct replaced"
    if choice == 5:
        opening, closing = rng.choice(
            (
                (f"{{% if {template_expression(rng)} %}}", "{% endif %}"),
                ("{% for message in messages %}", "{% endfor %}"),
                (f"{{% for i in range({rng.choice((1, 3, 10**4))}) %}}", "{% endfor %}"),
                ("{% filter upper %}", "{% endfilter %}"),
            )
        )
        pieces[i] = opening + pieces[i] + closing
        return "construct wrapped"
    pieces.insert(i, rng.choice(list(REAL_TEMPLATES.values())))
    return "real template spliced"


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
    extra: dict = dataclasses.field(default_factory=dict)  # other files: tokenizer_config.json, ...
    links: dict = dataclasses.field(default_factory=dict)  # name -> symbolic link target
    fifos: list = dataclasses.field(default_factory=list)  # names made FIFOs


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

    kind: str  # "gguf", "hf", "template" or "artifact"
    doc: object
    raw: object = None  # bytes (gguf) or (config, safetensors) bytes (hf) when doc is None
    keep: str | None = None
    patches: list = dataclasses.field(default_factory=list)
    origin: str = ""

    def files(self) -> dict[str, bytes]:
        """File name -> bytes: {"model.gguf"}, {"config.json", "model.safetensors", ...},
        {"chat_template.jinja"} or {"manifest.json", the PTX module, the weights}."""
        if self.kind == "gguf":
            data, fields, _ = emit_gguf(self.doc) if self.doc is not None else (self.raw, [], [])
            return {"model.gguf": apply_patches(data, fields, self.patches, "model.gguf")}
        if self.kind == "template":
            text = "".join(self.doc.pieces).encode("utf-8", "surrogatepass") if self.doc is not None else self.raw
            return {"chat_template.jinja": apply_patches(text, [], self.patches, "chat_template.jinja")}
        if self.kind == "artifact":
            files = self.doc.files() if self.doc is not None else dict(self.raw[0])
        elif self.doc is not None:
            config, weights = emit_hf(self.doc)
            files = {"config.json": config, "model.safetensors": weights, **self.doc.extra}
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
    if item.kind == "gguf":
        return os.path.join(directory, "model.gguf")
    if item.kind == "template":
        return os.path.join(directory, "chat_template.jinja")
    return directory


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
    from gpt import architectures
    from gpt.gguf_file import FORMATS, save_gguf
    from gpt.weights import random_weights

    # 64 positions: the prompt bound of a chat (16 characters a position) holds MESSAGES.
    config = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=260, block_size=64)
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
    seeds.append(Input("gguf", parse_gguf(llama_gguf(scratch)), origin="seed llama spm"))
    hf = dict(model_type="gpt2", n_layer=1, n_head=2, n_embd=32, vocab_size=260, n_positions=64)
    hf.update(activation_function="gelu_new", layer_norm_epsilon=1e-5, tie_word_embeddings=True)
    # A directory a chat can use: tokenizer.json, tokenizer_config.json with the template and EOS.
    tokenizer_json = tokenizers["long"].to_str().encode()
    tokenizer_config = {"chat_template": CHATML, "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    extra = {"tokenizer.json": tokenizer_json, "tokenizer_config.json": json.dumps(tokenizer_config).encode()}
    for dtype in ("F32", "F16", "BF16"):
        header, data = safetensors_bytes(weights, dtype)
        seeds.append(Input("hf", HFDoc(dict(hf), header, data, extra=dict(extra)), origin=f"seed hf {dtype}"))
    # A Llama directory: rope_scaling, generation_config.json, the template in chat_template.jinja.
    llama = gpt.GPTConfig(
        architecture="llama", n_layer=1, n_head=2, n_kv_head=1, n_embd=32, vocab_size=260, block_size=64, n_ff=64
    )
    hf_llama = dict(model_type="llama", num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    hf_llama.update(hidden_size=32, intermediate_size=64, vocab_size=260, max_position_embeddings=64)
    hf_llama.update(rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, rope_scaling=None)
    header, data = safetensors_bytes(architectures.from_compiler(llama, random_weights(llama, seed=2)), "F32")
    llama_extra = {
        "tokenizer.json": tokenizer_json,
        "tokenizer_config.json": json.dumps({"eos_token": {"content": "<|endoftext|>"}}).encode(),
        "chat_template.jinja": LLAMA3_CHAT.encode(),
        "generation_config.json": b'{"eos_token_id": [0, 259]}',
    }
    seeds.append(Input("hf", HFDoc(hf_llama, header, data, extra=llama_extra), origin="seed hf llama"))
    rng = random.Random(0)
    for name, source in REAL_TEMPLATES.items():
        seeds.append(Input("template", TemplateDoc([source]), origin=f"seed template {name}"))
    seeds.append(Input("template", TemplateDoc([CHATML, template_statement(rng)]), origin="seed template generated"))
    artifact = toy_artifact_seed(scratch)
    if artifact is not None:
        seeds.append(Input("artifact", artifact, origin="seed artifact"))
    return seeds


def safetensors_bytes(weights: dict, dtype: str) -> tuple[dict, bytes]:
    """(header, data) of float32 `weights` stored as F32, F16 or BF16."""
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
    return header, b"".join(chunks)


def llama_gguf(scratch: str) -> bytes:
    """A nano Llama GGUF (1 layer, n_embd 32) with a SentencePiece vocabulary (tokenizer.ggml.model
    "llama": <unk>, <s>, </s>, the 256 byte tokens, pieces that merge, a user-defined token) and
    a chat template, as llama.cpp's converter writes TinyLlama's or Mistral's."""
    import gguf
    import numpy as np

    import gpt
    from gpt import architectures

    pieces = ["\u2581", "a", "b", "c", "h", "e", "l", "o", "\u2581a", "\u2581ab", "bc", "\u2581abc", "ab", "he"]
    pieces += ["ll", "hell", "hello", "\u2581hello", "<tool>"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = [2, 3, 3] + [6] * 256 + [1] * (len(pieces) - 1) + [4]
    config = gpt.GPTConfig(
        architecture="llama", n_layer=1, n_head=2, n_embd=32, vocab_size=len(tokens), block_size=64, n_ff=64
    )
    path = os.path.join(scratch, "seed-llama.gguf")
    writer = gguf.GGUFWriter(path, arch="llama")
    for key, value in (("block_count", 1), ("context_length", 64), ("embedding_length", 32)):
        writer.add_uint32(f"llama.{key}", value)
    writer.add_uint32("llama.feed_forward_length", 64)
    writer.add_uint32("llama.attention.head_count", 2)
    writer.add_uint32("llama.attention.head_count_kv", 2)
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * 259 + [-float(i) for i in range(len(pieces))])
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_chat_template(LLAMA2_CHAT)
    rng = np.random.default_rng(0)
    for parameter, layer in architectures.parameters(config):
        name = parameter.gguf.replace("{i}", str(layer)) if layer is not None else parameter.gguf
        values = rng.standard_normal(architectures.gguf_shape(parameter, config)).astype(np.float32) * 0.02
        writer.add_tensor(name, values)
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file, writer.close):
        step()
    with open(path, "rb") as f:
        return f.read()


def toy_artifact_seed(scratch: str) -> "ArtifactDoc | None":
    """The toy GPU artifact of tests/python/toy_artifact.py (a manifest around toy_kernels.ptx,
    which the runtime's checks accept), or None when this checkout has no tests directory."""
    for root in (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), REPOSITORY):
        helper = os.path.join(root, "tests", "python", "toy_artifact.py")
        if os.path.isfile(helper) and os.path.isfile(os.path.join(root, "tests", "python", "toy_kernels.ptx")):
            break
    else:
        return None
    import importlib.util

    spec = importlib.util.spec_from_file_location("toy_artifact", helper)
    toy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toy)
    directory = toy.write_artifact(os.path.join(scratch, "seed-artifact"))
    files = {}
    for name in ("manifest.json", "kernels.sm_80.ptx", "weights.safetensors"):
        with open(os.path.join(directory, name), "rb") as f:
            files[name] = f.read()
    return ArtifactDoc(json.loads(files["manifest.json"]), files["kernels.sm_80.ptx"], files["weights.safetensors"])


def read_regression(path: str) -> Input:
    """A file of the regression corpus as an input: NAME.gguf (NAME.keep-q8_0.gguf: loaded with
    that format kept quantized), NAME.hf.tar.gz (a HF directory: config.json, model.safetensors
    and any other files, links and FIFOs), NAME.jinja (a chat template) or NAME.artifact.tar.gz
    (a GPU artifact: manifest.json, its PTX module and weights, links and FIFOs)."""
    base = os.path.basename(path)
    with open(path, "rb") as f:
        raw = f.read()
    if base.endswith(".jinja"):
        return Input("template", None, raw=raw, origin=base)
    if base.endswith((".hf.tar.gz", ".artifact.tar.gz")):
        files, links, fifos = {}, {}, []
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as tar:
            for member in tar.getmembers():
                if member.issym():
                    links[member.name] = member.linkname
                elif member.isfifo():
                    fifos.append(member.name)
                elif member.isfile():
                    files[member.name] = tar.extractfile(member).read()
        kind = "hf" if base.endswith(".hf.tar.gz") else "artifact"
        try:
            if kind == "hf":
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
    keep = next((fmt for fmt in ("q8_0", "q4_0", "q4_1") if f".keep-{fmt}." in base), None)
    try:
        return Input("gguf", parse_gguf(raw), keep=keep, origin=base)
    except Exception:
        return Input("gguf", None, raw=raw, keep=keep, origin=base)


REGRESSION_SUFFIXES = (".gguf", ".hf.tar.gz", ".jinja", ".artifact.tar.gz")


def regression_files(directory: str) -> list[str]:
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, name) for name in os.listdir(directory) if name.endswith(REGRESSION_SUFFIXES))


def save_finding(item: Input, path_stem: str) -> str:
    """Writes an input as one regression-corpus file; returns its path."""
    files = item.files()
    if item.kind in ("gguf", "template"):
        suffix = ".jinja" if item.kind == "template" else (f".keep-{item.keep}" if item.keep else "") + ".gguf"
        with open(path_stem + suffix, "wb") as f:
            f.write(next(iter(files.values())))
        return path_stem + suffix
    path = path_stem + (".hf.tar.gz" if item.kind == "hf" else ".artifact.tar.gz")
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
    if rng.random() < 0.2:  # SentencePiece scores, long tokens, a generated chat template
        choice = rng.randrange(3)
        if choice == 0:
            kv = find_kv(doc, b"tokenizer.ggml.scores")
            if kv is not None and isinstance(kv[2], tuple) and kv[2][1]:
                items = list(kv[2][1])
                items[rng.randrange(len(items))] = rng.choice(INTERESTING_FLOATS)
                kv[2] = (kv[2][0], items)
            return "tokenizer scores"
        if choice == 1:
            kv = find_kv(doc, b"tokenizer.ggml.tokens")
            if kv is not None and isinstance(kv[2], tuple) and kv[2][1]:
                items = list(kv[2][1])
                i = rng.randrange(len(items))
                items[i] = (items[i] if isinstance(items[i], bytes) else b"x") * rng.choice((100, 1000, 5000))
                kv[2] = (kv[2][0], items)
            return "long token"
        kv = find_kv(doc, b"tokenizer.chat_template")
        if kv is None:
            doc.kvs.append(kv := [b"tokenizer.chat_template", STRING, b""])
        kv[1], kv[2] = STRING, (CHATML + template_statement(rng)).encode()
        return "chat template"
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
    names = list(doc.files() if isinstance(doc, ArtifactDoc) else HF_FILES)
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
    tokenizer.json, rope_scaling; links and FIFOs."""
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


def mutate_hf(rng: random.Random, item: Input) -> str:
    doc: HFDoc = item.doc
    if rng.random() < 0.4:
        return mutate_hf_files(rng, doc)
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
    name = rng.choice(list(item.files()))
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
    structural = {"gguf": mutate_gguf, "hf": mutate_hf, "template": mutate_template, "artifact": mutate_artifact}
    for _ in range(rng.choice((1, 1, 2, 3, 4))):
        if child.doc is not None and rng.random() < 0.8:
            structural[child.kind](rng, child)
        else:
            mutate_raw(rng, child)
    child.origin = parent.origin
    return child


# -- the worker ---------------------------------------------------------------------------------

# Source files whose executed line pairs are the coverage signal.
TRACED = ("gpt/gguf_file.py", "gpt/weights.py", "gpt/config.py", "gpt/resources.py", "gpt/tokenizer.py")
TRACED += ("gpt/gguf_llama.py", "gpt/gguf_tokenizer.py", "gpt/hf_checkpoint.py", "gpt/model_files.py", "gpt/chat.py")
TRACED += ("gpt/template_sandbox.py", "gpt_runtime/manifest.py", "gpt_runtime/weights.py", "gpt_runtime/schema.py")
TRACED += ("gpt_runtime/artifact_files.py", "gpt_runtime/model.py")
# The driver library the worker's gpt_runtime opens: none, so that loading an artifact stops at
# NoDeviceError once every check before the driver has passed (and never touches a real GPU).
NO_DRIVER = "/nonexistent/libcuda-for-fuzzing.so.1"
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
    import gpt_runtime
    from gpt import architectures, chat, hf_checkpoint
    from gpt.gguf_file import QuantizedTensor, load_gguf
    from gpt.model import GPT
    from gpt.tokenizer import tokenizer_for
    from gpt.weights import load_pretrained, validate_weights

    def render(tokenizer, block_size: int, **where) -> None:
        """A chat's first turn: the template rendered within the prompt bound, then tokenized."""
        spec = chat.chat_spec(tokenizer, **where)
        text = spec.template.render(MESSAGES, max_chars=chat.max_prompt_chars(block_size, TEMPLATE_MAX_CHARS))
        chat.prompt_ids(tokenizer, spec, text)

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
                if config.spec.compiler_names != "gpt2":  # as GPT.from_gguf: HF names -> the compiler's
                    quantized = architectures.to_compiler_quantized(config, quantized)
                    floats = architectures.to_compiler(config, floats, consume=True)
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
                    if getattr(tokenizer, "chat_template", None) is not None:
                        render(tokenizer, config.block_size, model_path=request["path"])
            elif request["kind"] == "hf":
                # As GPT.from_pretrained: a Llama-family directory goes to gpt.hf_checkpoint.
                if hf_checkpoint.architecture_of(hf_checkpoint.model_type(request["path"])) is not None:
                    config, tensors = hf_checkpoint.load_pretrained(request["path"])
                else:
                    config, tensors = load_pretrained(request["path"])
                options = gpt.CompileOptions(disk_cache=False, threads=1)
                GPT(config, validate_weights(config, tensors, copy=False), options, _copy_weights=False)
                tokenizer = tokenizer_for(request["path"], config.vocab_size)
                tokenizer.decode(tokenizer.encode(SAMPLE_TEXT))
                render(tokenizer, config.block_size, model_dir=request["path"])
            elif request["kind"] == "template":
                with open(request["path"], "rb") as f:
                    source = f.read().decode("utf-8", "replace")  # a file's text, as the loaders decode it
                template = chat.ChatTemplate(source, bos_token="<s>", eos_token="</s>", origin=request["path"])
                template.render(MESSAGES, max_chars=TEMPLATE_MAX_CHARS)
            else:
                try:
                    gpt_runtime.load(request["path"])
                except gpt_runtime.NoDeviceError:
                    pass  # every check before the driver passed: the artifact "loads"
            outcome = {"outcome": "loaded"}
        except (ValueError, FileNotFoundError) as e:  # ModelFileError, ChatTemplateError, ArtifactError...
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
        env = dict(os.environ, OMP_NUM_THREADS="1", RUST_BACKTRACE="0", GPT_RUNTIME_LIBCUDA=NO_DRIVER)
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
    if best.kind == "template" and best.doc is not None:
        best = shrink(best, lambda candidate: candidate.doc.pieces)
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
    sys.setrecursionlimit(20000)  # deepcopy and json.dumps of nested inputs, here (not in the worker)
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
    by_kind = {}  # input kind -> executions
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
                # A kind first, then a parent of that kind: each surface gets its share of the time.
                kind = rng.choice(sorted({entry.kind for entry in corpus}))
                parent = rng.choice([entry for entry in corpus if entry.kind == kind])
                item, mutated = mutate(rng, parent), True
            path = write_input(item, os.path.join(scratch, "input"))
            result = worker.run(item.kind, path, item.keep, args.timeout)
            executions += 1
            outcomes[result["outcome"]] += 1
            by_kind[item.kind] = by_kind.get(item.kind, 0) + 1
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
        "executions_by_kind": by_kind,
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
    each (file, outcome, exception type, seconds) and exits 1 unless each was refused with one of
    the documented errors (gpt.ModelFileError, ChatTemplateError, gpt_runtime.ArtifactError: a
    ValueError; FileNotFoundError)."""
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
            if result["outcome"] != "refused":
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
