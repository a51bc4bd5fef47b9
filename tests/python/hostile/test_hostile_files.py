"""Model files from strangers: GGUF headers whose counts, lengths, types, dimensions or offsets
lie, GGUF tokenizer data that panics `tokenizers`, NaN or infinite block scales in kept-quantized
weights, hostile config.json and safetensors headers. Each is refused with gpt.ModelFileError
naming the file and the key or tensor; the ones that used to hang or grow memory are loaded in
a child process under an address-space limit and must be refused within 1 s and 100 MB. Also
the loader fuzzer's regression corpus (tests/fuzz/loader_regressions) and a short fuzzing run
over every surface it covers (GGUF, HF directories, chat templates, GPU artifacts)."""

import json
import os
import pathlib
import struct
import subprocess
import sys

import gguf
import numpy as np
import pytest
from safetensors.numpy import save_file

import gpt
from checkpoints import hf_config, rewrite
from gpt.gguf_file import load_gguf, save_gguf
from gpt.weights import load_pretrained, random_weights

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
FUZZER = os.path.join("tools", "fuzz", "fuzz_loaders.py")  # in the runfiles, as from the repository root
CORPUS = os.path.join("tests", "fuzz", "loader_regressions")
CFG = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=260, block_size=8)
V = gguf.GGUFValueType
T = gguf.GGMLQuantizationType
MiB = 1 << 20

# -- GGUF bytes, written by hand so that they can lie ----------------------------------------


def string(text) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv(key, value_type, payload: bytes) -> bytes:
    return string(key) + struct.pack("<I", value_type) + payload


def array(element_type, count, elements=b"") -> bytes:
    return struct.pack("<IQ", element_type, count) + elements


def tensor_info(name, dims, tensor_type=T.F32, offset=0) -> bytes:
    return string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, tensor_type, offset)


def gguf_bytes(kvs=(), tensors=(), data=b"", version=3, n_kv=None, n_tensors=None, magic=b"GGUF") -> bytes:
    header = magic + struct.pack(
        "<IQQ", version, len(tensors) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv
    )
    header += b"".join(kvs) + b"".join(tensors)
    if data:
        header += bytes(-len(header) % 32)  # the default alignment
    return header + data


def write(tmp_path, data: bytes, name="model.gguf") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def refused(path, *fragments, keep=None):
    """Loads `path` in this process: gpt.ModelFileError whose message names the file and holds
    every fragment."""
    with pytest.raises(gpt.ModelFileError) as raised:
        load_gguf(path, keep_quantized=keep) if path.endswith(".gguf") else load_pretrained(path)
    message = str(raised.value)
    assert os.path.basename(path) in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


# A child that loads one file under an address-space limit 1 GiB above what its imports mapped
# (a regression then fails with MemoryError instead of taking the machine), and reports the
# exception, the seconds, and how far the resident peak rose above the RSS before loading (the
# peak of the imports is cleared first: /proc/self/clear_refs, "5").
CHILD = r"""
import json, resource, sys, time
import gguf, safetensors, tokenizers  # imported before the clock starts, as a loading program has them
import gpt
from gpt.gguf_file import load_gguf
from gpt.weights import load_pretrained

def status():
    with open("/proc/self/status", encoding="ascii") as f:
        return {key: int(value.split()[0]) * 1024 for key, value in (line.split(":", 1) for line in f) if "kB" in value}

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status()
resource.setrlimit(resource.RLIMIT_AS, (before["VmSize"] + (1 << 30), resource.RLIM_INFINITY))
path, keep = sys.argv[1], sys.argv[2] or None
started = time.perf_counter()
try:
    load_gguf(path, keep_quantized=keep) if path.endswith(".gguf") else load_pretrained(path)
    result = {"type": None, "message": ""}
except BaseException as e:
    result = {"type": type(e).__name__, "model_file_error": isinstance(e, gpt.ModelFileError), "message": str(e)}
result["seconds"] = time.perf_counter() - started
result["peak_growth"] = status()["VmHWM"] - before["VmRSS"]
print(json.dumps(result))
"""


def refused_in_child(path, *fragments, keep=None):
    """Loads `path` in a child process: gpt.ModelFileError naming the file and the fragments,
    within 1 s of loading and 100 MB of peak memory growth (the child itself is given 60 s)."""
    run = subprocess.run(
        [sys.executable, "-c", CHILD, path, keep or ""],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=PACKAGE),
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.splitlines()[-1])
    assert result.get("model_file_error"), result
    assert os.path.basename(path) in result["message"], result
    for fragment in fragments:
        assert fragment in result["message"], result
    assert result["seconds"] < 1.0, result
    assert result["peak_growth"] < 100 * MiB, result
    return result["message"]


# -- the reproducers that hung: declared lengths the file cannot hold --------------------------


def test_an_array_of_2_to_the_50_u32_is_refused_at_once(tmp_path):
    """The issue's 46-byte reproducer: one key, an array of u32 declaring 2^50 elements. It ran
    for ever while RSS grew 75 MB/s."""
    path = write(tmp_path, gguf_bytes([kv("abcd", V.ARRAY, array(V.UINT32, 2**50))]))
    refused_in_child(path, "metadata key 'abcd': 2^50 u32 elements need 4 PiB", "bytes left")


@pytest.mark.parametrize(
    "payload, fragment",
    [
        (array(V.ARRAY, 2**40), "metadata key 'abcd': 2^40 array elements need at least 12 TiB"),
        (array(V.ARRAY, 1, array(V.UINT32, 2**40)), "metadata key 'abcd'[0]: 2^40 u32 elements need 4 TiB"),
        (array(V.ARRAY, 2, array(V.UINT8, 0)), "metadata key 'abcd': 2 array elements need at least 24 bytes"),
        (array(V.STRING, 2**40), "metadata key 'abcd': 2^40 string elements need at least 8 TiB"),
        (array(V.STRING, 2, string("ok") + struct.pack("<Q", 2**40)), "metadata key 'abcd'[1]: a string of 2^40"),
    ],
    ids=["array-of-arrays", "inner-array", "inner-arrays-past-the-end", "strings", "inner-string"],
)
def test_nested_arrays_and_strings_count_toward_the_same_budget(tmp_path, payload, fragment):
    path = write(tmp_path, gguf_bytes([kv("abcd", V.ARRAY, payload)]))
    refused_in_child(path, fragment)


def test_huge_string_lengths_and_counts_are_refused_at_once(tmp_path):
    cases = {
        "string.gguf": (gguf_bytes([kv("abcd", V.STRING, struct.pack("<Q", 2**60))]), "a string of 2^60 bytes"),
        "key.gguf": (
            gguf_bytes([struct.pack("<Q", 2**40) + bytes(16)]),
            "metadata key 0's name is a string of 2^40 bytes",
        ),
        "kv-count.gguf": (gguf_bytes(n_kv=2**62), "2^62 metadata keys need at least 56 EiB"),
        "tensor-count.gguf": (gguf_bytes(n_tensors=2**40), "2^40 tensor descriptions need at least 25 TiB"),
    }
    for name, (data, fragment) in cases.items():
        refused_in_child(write(tmp_path, data, name), fragment)


def test_metadata_arrays_beyond_what_the_vocabulary_needs_are_refused(tmp_path):
    """Bytes that are really there still cost gguf's reader about 1 KB and 10 us per element:
    for a token embedding of 1 row, 4 + 32768 elements are read, not 40000."""
    arrays = [kv("abcd", V.ARRAY, array(V.UINT8, 40000, bytes(40000)))]
    path = write(tmp_path, gguf_bytes(arrays, [tensor_info("token_embd.weight", [8, 1])], F32_DATA))
    refused_in_child(path, "metadata arrays hold 40000 elements, more than the 32772 read for token_embd.weight's 1")


def test_a_file_without_token_embd_says_so_not_that_its_arrays_are_too_long(tmp_path):
    """A real vocabulary (here 40000 tokens) in a file without token_embd.weight: the message was
    about metadata-array limits, as the tensor's rows bound them."""
    tokens = b"".join(string(f"t{i}") for i in range(40000))
    path = write(tmp_path, gguf_bytes([kv("tokenizer.ggml.tokens", V.ARRAY, array(V.STRING, 40000, tokens))]))
    refused(path, "tensor token_embd.weight is missing")


# -- header corruption, in GGUF's terms rather than numpy's -----------------------------------


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"GGU", "3 bytes, too short for GGUF's magic"),
        (b"GGML" + bytes(20), "it starts with b'GGML', not GGUF's magic"),
        (gguf_bytes(version=1), "version 1; versions 2 and 3 are read"),
        (gguf_bytes(version=0x03000000), "a file of the other byte order"),
        (gguf_bytes()[:12], "the tensor count needs 8 bytes, the file has 4"),
        (gguf_bytes([kv("abcd", 99, b"xxxx")]), "metadata key 'abcd' has type id 99, which is not a GGUF value type"),
        (gguf_bytes([kv("abcd", V.ARRAY, array(13, 1, b"x"))]), "an array of type id 13"),
        (gguf_bytes([kv("", V.UINT8, b"x") + bytes(8)]), "metadata key 0 has an empty name"),
        (gguf_bytes([kv(b"\xff\xfe", V.UINT8, b"x")]), "metadata key 0's name is not UTF-8"),
        (gguf_bytes([kv("a", V.UINT8, b"x"), kv("a", V.UINT8, b"y")]), "metadata key 'a' appears twice"),
        (gguf_bytes([kv("abcd", V.UINT32, b"")]), "metadata key 'abcd': a u32 needs 4 bytes"),
        (gguf_bytes([kv("general.alignment", V.UINT64, bytes(8))]), "'general.alignment' has type id 10, expected u32"),
        (gguf_bytes([kv("general.alignment", V.UINT32, struct.pack("<I", 24))]), "is 24, expected a power of 2"),
    ],
    ids=lambda value: value[:40] if isinstance(value, str) else None,
)
def test_header_corruption_is_named(tmp_path, data, fragment):
    refused(write(tmp_path, data), "is not a readable GGUF file", fragment)


F32_DATA = bytes(32)  # 8 float32 zeros


@pytest.mark.parametrize(
    "info, data, fragment",
    [
        (tensor_info("t", [8, 1, 1, 1, 1]), F32_DATA, "tensor 't' has 5 dimensions, GGUF allows at most 4"),
        (tensor_info("t", [2**32, 2**32]), F32_DATA, "tensor 't' has dimensions [4294967296, 4294967296]"),
        (tensor_info("t", [2**63]), F32_DATA, "ggml's are int64, so these are negative"),
        (tensor_info("t", [8], 99), F32_DATA, "tensor 't' has type id 99, which is not a ggml type"),
        (tensor_info("t", [33], T.Q8_0), bytes(34), "rows of 33 values, not a multiple of its block of 32"),
        (tensor_info("t", [8], offset=32), F32_DATA, "tensor 't' is at offset 32 of the data, expected 0"),
        (tensor_info("t", [64]), F32_DATA, "tensor 't' (F32, ne [64]) needs 256 bytes from file offset"),
        (tensor_info("t", [2**40]), F32_DATA, "needs 4 TiB from file offset"),
        (tensor_info("x" * 64, [8]), F32_DATA, "is longer than GGUF's 63 bytes"),
        (tensor_info(b"\xc3", [8]), F32_DATA, "tensor 0's name is not UTF-8"),
        ([tensor_info("t", [8]), tensor_info("t", [8], offset=32)], F32_DATA * 2, "tensor 't' appears twice"),
    ],
    ids=[
        "n_dims",
        "dims-overflow",
        "negative-dim",
        "type-id",
        "block",
        "offset",
        "past-eof",
        "huge",
        "name",
        "utf8",
        "dup",
    ],
)
def test_tensor_descriptions_are_checked_against_the_file(tmp_path, info, data, fragment):
    path = write(tmp_path, gguf_bytes(tensors=info if isinstance(info, list) else [info], data=data))
    refused(path, "is not a readable GGUF file", fragment)


# -- whole models: tokenizer data, block scales, metadata values ------------------------------


def byte_level_tokenizer(merges):
    """GPT-2's kind of tokenizer with 256 byte tokens and the given merges, none longer than 2
    bytes (tokenizers panics on a bad merge only when no token is longer)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    tokens = [chr(c) for c in printable + [256 + i for i in range(256 - len(printable))]]
    tokens += ["".join(pair) for pair in merges]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=list(merges)))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer, tokens


MERGES = [("h", "e"), ("a", "b"), ("c", "d"), ("e", "f")]


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    """A nano GPT-2 with a byte-level tokenizer, in f32, q8_0 and q4_0."""
    directory = tmp_path_factory.mktemp("models")
    weights = random_weights(CFG, seed=3)
    tokenizer, _ = byte_level_tokenizer(MERGES)
    paths = {}
    for fmt in ("f32", "q8_0", "q4_0"):
        paths[fmt] = str(directory / f"{fmt}.gguf")
        save_gguf(weights, CFG, paths[fmt], fmt, tokenizer=tokenizer)
    return paths


def test_the_valid_files_load(model_files):
    for fmt, path in model_files.items():
        config, weights, tokenizer = load_gguf(path, keep_quantized=fmt if fmt != "f32" else None)
        assert config == CFG and tokenizer.decode(tokenizer.encode("hello")) == "hello"


def test_a_merge_that_panics_tokenizers_is_refused(tmp_path, model_files):
    """The issue's reproducer: the merge "Ġ t" of two tokens whose concatenation is not a token
    makes tokenizers' BPE panic (pyo3's PanicException, not an Exception); also with "" and
    "\\x00" tokens."""
    from tokenizers import Tokenizer, models

    _, tokens = byte_level_tokenizer(MERGES)
    with pytest.raises(BaseException) as panic:  # the premise, with the pinned tokenizers
        Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[("Ġ", "t")]))
    assert not isinstance(panic.value, Exception)
    for extra in ([], ["", "\x00", "\x01", "\x02"]):
        changed = tokens[: len(tokens) - len(extra)] + extra
        rewrite(
            model_files["f32"],
            tmp_path / "panic.gguf",
            set_keys={
                "tokenizer.ggml.merges": (["Ġ t"], V.ARRAY),
                "tokenizer.ggml.tokens": (changed, V.ARRAY),
            },
        )
        refused(str(tmp_path / "panic.gguf"), "tokenizer.ggml.merges entry 0 'Ġ t' needs 'Ġt'")


@pytest.mark.parametrize(
    "keys, fragment",
    [
        ({"tokenizer.ggml.merges": (["h e f"], V.ARRAY)}, "tokenizer.ggml.merges entry 0 'h e f' is not two tokens"),
        ({"tokenizer.ggml.merges": (["h q"], V.ARRAY)}, "entry 0 'h q' needs 'hq', which is not in"),
        ({"tokenizer.ggml.merges": ([1, 2], V.ARRAY)}, "tokenizer.ggml.merges holds 1, expected an array of str"),
        ({"tokenizer.ggml.tokens": (list(range(260)), V.ARRAY)}, "tokenizer.ggml.tokens holds 0, expected"),
        ({"tokenizer.ggml.token_type": ([1] * 3, V.ARRAY)}, "token_type has 3 entries for 260 tokens"),
        (
            {"gpt2.attention.layer_norm_epsilon": (1e300, V.FLOAT64)},
            "layer_norm_epsilon is 1e+300, expected a positive",
        ),
        ({"gpt2.attention.layer_norm_epsilon": (float("inf"), V.FLOAT32)}, "layer_norm_epsilon is inf"),
    ],
    ids=["three-parts", "not-a-token", "merges-ints", "tokens-ints", "types", "eps-overflow", "eps-inf"],
)
def test_bad_tokenizer_data_and_metadata_are_named(tmp_path, model_files, keys, fragment):
    rewrite(model_files["f32"], tmp_path / "bad.gguf", set_keys=keys)
    refused(str(tmp_path / "bad.gguf"), fragment)


def test_tokenizer_construction_is_guarded_against_panics_but_not_interrupts(model_files, monkeypatch):
    """Whatever tokenizers raises while the tokenizer is built, a Rust panic included, is a
    ModelFileError naming the tokenizer data; KeyboardInterrupt is not swallowed."""
    from tokenizers import Tokenizer, models

    _, tokens = byte_level_tokenizer(MERGES)
    try:
        Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[("Ġ", "t")]))
        pytest.skip("this tokenizers release does not panic")
    except BaseException as e:  # noqa: B036 -- the panic's type, a BaseException
        panic_type, panic = type(e), e

    def panicking(*args, **kwargs):
        raise panic_type(*panic.args)

    monkeypatch.setattr(models, "BPE", panicking)
    message = refused(model_files["f32"], "tokenizer.ggml.tokens, tokenizer.ggml.merges")
    assert "PanicException" in message

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "BPE", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_gguf(model_files["f32"])


def block_scale_offset(path, tensor_name, block):
    """File offset of block `block`'s fp16 scale in a Q8_0 or Q4_0 tensor."""
    reader = gguf.GGUFReader(path)
    tensor = next(t for t in reader.tensors if t.name == tensor_name)
    return tensor.data_offset + block * gguf.GGML_QUANT_SIZES[tensor.tensor_type][1]


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
@pytest.mark.parametrize("bits, shown", [(0x7E00, "nan"), (0x7C00, "inf"), (0xFC00, "-inf")])
def test_non_finite_block_scales_are_refused_when_kept_quantized(tmp_path, model_files, fmt, bits, shown):
    """A NaN or infinite fp16 scale loaded silently with weights kept in their format (all
    logits then NaN); the dequantizing path refused it. Now both refuse, naming tensor and block."""
    data = bytearray(pathlib.Path(model_files[fmt]).read_bytes())
    offset = block_scale_offset(model_files[fmt], "blk.0.ffn_up.weight", 5)  # row 5, block 0 (K = 32)
    data[offset : offset + 2] = struct.pack("<H", bits)
    path = write(tmp_path, bytes(data))
    refused(path, f"tensor blk.0.ffn_up.weight ({fmt.upper()}): block 0 of row 5", f"fp16 scale {shown}", keep=fmt)
    refused(path, "tensor blk.0.ffn_up.weight", "weights must be finite")


def test_a_non_finite_f32_weight_is_named_with_its_file(tmp_path, model_files):
    data = bytearray(pathlib.Path(model_files["f32"]).read_bytes())
    reader = gguf.GGUFReader(model_files["f32"])
    offset = next(t for t in reader.tensors if t.name == "blk.0.attn_qkv.bias").data_offset + 4 * 7
    data[offset : offset + 4] = struct.pack("<f", float("nan"))
    refused(write(tmp_path, bytes(data)), "tensor blk.0.attn_qkv.bias (F32) holds nan at index [7]")


def test_a_truncated_model_names_the_tensor_past_the_end(tmp_path, model_files):
    data = pathlib.Path(model_files["q8_0"]).read_bytes()
    refused(write(tmp_path, data[: len(data) - 100]), "tensor 'output_norm.bias'", "past the end of the file")


# -- HF directories: config.json and the safetensors header -----------------------------------


@pytest.fixture
def checkpoint(tmp_path):
    """A nano HF directory (config.json + model.safetensors)."""
    (tmp_path / "config.json").write_text(json.dumps(hf_config(CFG)))
    save_file(random_weights(CFG), str(tmp_path / "model.safetensors"))
    assert load_pretrained(str(tmp_path))[0] == CFG
    return tmp_path


@pytest.mark.parametrize(
    "text, fragment",
    [
        (b"[1, 2]", "config.json holds an array, expected a JSON object"),
        (b"[" * 200_000 + b"]" * 200_000, "config.json nests JSON arrays or objects too deeply"),
        (b'{"n_layer": "\xff"}', "config.json is not UTF-8 text: byte 13 is b'\\xff'"),
        (b'{"n_layer": 1,', "config.json is not valid JSON: Expecting property name"),
        (b'{"n_layer": ' + b"9" * 5000 + b"}", "config.json is not valid JSON: Exceeds the limit"),
        (json.dumps({**hf_config(CFG), "n_layer": "2"}).encode(), "config.json: n_layer is a string '2', expected an"),
        (json.dumps({**hf_config(CFG), "n_head": True}).encode(), "config.json: n_head is a boolean True"),
        (json.dumps({**hf_config(CFG), "layer_norm_epsilon": float("inf")}).encode(), "layer_norm_epsilon is inf"),
        (json.dumps({**hf_config(CFG), "layer_norm_epsilon": 10**400}).encode(), "too large for a float"),
        (json.dumps({**hf_config(CFG), "model_type": ["gpt2"]}).encode(), "model_type is an array ['gpt2']"),
    ],
    ids=["list", "deep", "utf8", "invalid", "digits", "string", "bool", "inf", "huge", "type"],
)
def test_config_json_is_read_defensively(checkpoint, text, fragment):
    (checkpoint / "config.json").write_bytes(text)
    refused_in_child(str(checkpoint), fragment)


def test_an_oversized_config_json_is_not_read(checkpoint):
    with open(checkpoint / "config.json", "wb") as f:
        f.truncate(17 * MiB)  # sparse: nothing is written
    refused(str(checkpoint), "config.json is 17825792 bytes, more than the 16777216")


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda raw: struct.pack("<Q", 2**60) + raw[8:], "the header length is 1152921504606846976 bytes"),
        (lambda raw: raw[:5], "5 bytes, too short for the 8-byte header length"),
        (lambda raw: struct.pack("<Q", 400_002) + b"[" * 200_001 + b"]" * 200_001, "its JSON header nests too deeply"),
        (lambda raw: struct.pack("<Q", 2) + b"[]", "its header is a JSON list, expected an object"),
        (lambda raw: raw[: len(raw) // 2], "is not a readable safetensors file"),
    ],
    ids=["length", "short", "deep", "list", "truncated"],
)
def test_the_safetensors_header_is_checked_against_the_file(checkpoint, change, fragment):
    path = checkpoint / "model.safetensors"
    path.write_bytes(change(path.read_bytes()))
    message = refused(str(checkpoint), fragment)
    assert "model.safetensors" in message


def test_non_finite_and_missing_safetensors_weights_name_the_file(checkpoint):
    weights = random_weights(CFG)
    weights["transformer.h.0.ln_1.bias"] = weights["transformer.h.0.ln_1.bias"].astype(np.float64)
    weights["transformer.h.0.ln_1.bias"][3] = 1e300  # finite in float64, inf as float32
    save_file(weights, str(checkpoint / "model.safetensors"))
    message = refused(str(checkpoint), "parameter transformer.h.0.ln_1.bias contains NaN or infinity (as float32)")
    assert "model.safetensors" in message
    del weights["transformer.h.0.ln_1.bias"]
    save_file(weights, str(checkpoint / "model.safetensors"))
    assert "missing parameter(s): transformer.h.0.ln_1.bias" in refused(str(checkpoint))


# -- the fuzzer's regression corpus and a short fuzzing run -----------------------------------


def test_every_regression_file_is_refused_in_bounded_time():
    files = sorted(os.listdir(CORPUS))
    assert len(files) >= 8 and any(name.endswith(".hf.tar.gz") for name in files), files
    run = subprocess.run(
        [sys.executable, FUZZER, "--replay", CORPUS, "--timeout", "10"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=PACKAGE),
    )
    results = [json.loads(line) for line in run.stdout.splitlines()]
    assert sorted(os.path.basename(r["file"]) for r in results) == files
    for result in results:
        assert result["outcome"] == "refused" and result["type"] in DOCUMENTED_REFUSALS, result
        assert result["seconds"] < 2.0, result  # each took milliseconds; some used to hang
    assert run.returncode == 0, run.stdout + run.stderr
    # Issue 43's vocabularies: a token past 4 KiB, a NaN score, no token_embd.weight beside long arrays.
    messages = {os.path.basename(r["file"]): r["message"] for r in results}
    assert "tokenizer.ggml.tokens[270] is 4100 bytes long" in messages["gguf_spm_token_past_4_kib.gguf"]
    assert "tokenizer.ggml.scores[265] (token 'l') is NaN" in messages["gguf_spm_nan_score.gguf"]
    assert "tensor token_embd.weight is missing" in messages["gguf_no_token_embd_beside_long_arrays.gguf"]


# What the loaders document as refusals (the fuzzer's worker counts any ValueError as one, and
# FileNotFoundError; MemoryError only with the estimate's message).
DOCUMENTED_REFUSALS = {
    "ModelFileError",
    "MemoryError",
    "ChatTemplateError",
    "RenderTooLong",
    "NoChatTemplate",
    "ArtifactError",
    "FileNotFoundError",
    "ValueError",
}


def test_the_fuzzers_writer_takes_whatever_a_mutation_leaves_in_an_array(monkeypatch):
    """A token list whose elements had become arrays, one doubled by the tokenizer mutation into a
    4-tuple, stopped a CI run's fuzzing campaign in the writer (a ValueError unpacking it). The
    writer now puts an empty array where an array's value is not an (element type, elements) pair,
    and the mutation doubles only byte strings."""
    monkeypatch.syspath_prepend(os.path.join("tools", "fuzz"))  # in the runfiles, as FUZZER
    import loader_formats as formats

    doubled_pair = (4, [1]) + (4, [1])
    tokens = (formats.ARRAY, [(formats.STRING, [b"a"]), doubled_pair, 7])
    doc = formats.GGUFDoc(3, [[b"tokenizer.ggml.tokens", formats.ARRAY, tokens]], [])
    raw, _, _ = formats.emit_gguf(doc)
    assert formats.parse_gguf(raw).kvs == [
        [b"tokenizer.ggml.tokens", formats.ARRAY, (formats.ARRAY, [(formats.STRING, [b"a"]), (0, []), (0, [])])]
    ]


def test_the_loader_fuzzer_mutates_and_finds_nothing(tmp_path):
    """A few seconds of fuzzing: hundreds of mutated inputs of each kind (GGUF files of GPT-2 and
    of a Llama with a SentencePiece vocabulary, HF directories with their tokenizer and chat
    template, chat templates from a grammar of jinja2 constructs, GPU artifacts), new ones joining
    the corpus, many kinds of refusal (each seed replayed as is would give none), no finding."""
    run = subprocess.run(
        [sys.executable, FUZZER, "--seconds", "10", "--seed", "3", "--out", str(tmp_path), "--corpus", CORPUS],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=PACKAGE),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "exec/s" in run.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["findings"] == [] and summary["seeds_that_do_not_load"] == [], summary
    assert summary["executions"] >= 100, summary
    assert summary["new_inputs"] > 0 and summary["outcomes"]["loaded"] > 0, summary
    assert summary["distinct_refusals"] >= 20, summary
    assert set(summary["refusals_by_type"]) <= DOCUMENTED_REFUSALS, summary
    kinds = summary["executions_by_kind"]
    assert set(kinds) == {"gguf", "hf", "template", "artifact"} and min(kinds.values()) >= 20, summary
    assert {"ChatTemplateError", "ArtifactError"} <= set(summary["refusals_by_type"]), summary
