"""GGUF vocabularies from strangers (issue 43): SentencePiece vocabularies whose conversion to a
`tokenizers` BPE was quadratic in a token's length, long tokens, vocabularies past their bounds,
control tokens that cost tokenizers about 80 bytes of memory per byte of their text. Each file is
a nano Llama (tokenizer.ggml.model "llama") loaded through gpt.gguf_file.load_gguf; the ones that
used to hang or grow memory are loaded in a child process under an address-space limit."""

import json
import os
import random
import subprocess
import sys

import gguf
import numpy as np
import pytest

import gpt
from gpt import architectures
from gpt.gguf_file import load_gguf
from gpt.gguf_tokenizer import MAX_MATCHED_WHOLE_BYTES, MAX_TOKEN_BYTES, MAX_VOCABULARY_BYTES
from spm_reference import LlamaCppSPM

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/python: the helper modules
MiB = 1 << 20
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6
# What llama.cpp's converter writes first: <unk>, <s>, </s> and the 256 byte tokens.
BASE = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
BASE_TYPES = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256


def write_llama(path, tokens, scores=None, types=None) -> str:
    """A nano Llama GGUF (1 layer, n_embd 32) with a SentencePiece vocabulary of `tokens`: every
    tensor the loader expects, random, the token embedding one row per token."""
    config = gpt.GPTConfig(
        architecture="llama", n_layer=1, n_head=2, n_embd=32, vocab_size=len(tokens), block_size=8, n_ff=64
    )
    writer = gguf.GGUFWriter(str(path), arch="llama")
    for key, value in (("block_count", 1), ("context_length", 8), ("embedding_length", 32)):
        writer.add_uint32(f"llama.{key}", value)
    writer.add_uint32("llama.feed_forward_length", 64)
    writer.add_uint32("llama.attention.head_count", 2)
    writer.add_uint32("llama.attention.head_count_kv", 2)
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores if scores is not None else [-float(i) for i in range(len(tokens))])
    writer.add_token_types(types if types is not None else BASE_TYPES + [NORMAL] * (len(tokens) - len(BASE)))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    rng = np.random.default_rng(0)
    for parameter, layer in architectures.parameters(config):
        name = parameter.gguf.replace("{i}", str(layer)) if layer is not None else parameter.gguf
        shape = architectures.gguf_shape(parameter, config)
        writer.add_tensor(name, rng.standard_normal(shape).astype(np.float32) * 0.02)
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file, writer.close):
        step()
    return str(path)


# A child that loads one file under an address-space limit 1 GiB above what its imports mapped,
# and reports the exception, the seconds, the resident peak's growth, and (for a file that loads)
# the ids of the texts it is given, with llama.cpp's (spm_reference.py) for comparison.
CHILD = r"""
import json, resource, sys, time
import gguf, tokenizers
import gpt
from gpt.gguf_file import load_gguf
from spm_reference import LlamaCppSPM

def status():
    with open("/proc/self/status", encoding="ascii") as f:
        return {key: int(value.split()[0]) * 1024 for key, value in (line.split(":", 1) for line in f) if "kB" in value}

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status()
resource.setrlimit(resource.RLIMIT_AS, (before["VmSize"] + (1 << 30), resource.RLIM_INFINITY))
path, texts = sys.argv[1], json.loads(sys.argv[2])
started = time.perf_counter()
result = {"type": None, "message": ""}
try:
    config, weights, tokenizer = load_gguf(path)
except BaseException as e:
    result = {"type": type(e).__name__, "model_file_error": isinstance(e, gpt.ModelFileError), "message": str(e)}
result["seconds"] = time.perf_counter() - started
result["peak_growth"] = status()["VmHWM"] - before["VmRSS"]
if result["type"] is None and texts:
    meta = gguf.GGUFReader(path)
    field = lambda key: meta.get_field(key).contents()
    reference = LlamaCppSPM(field("tokenizer.ggml.tokens"), field("tokenizer.ggml.scores"),
                            field("tokenizer.ggml.token_type"), bos_id=1)
    result["ids"] = [tokenizer.encode(text) for text in texts]
    result["reference"] = [reference.encode(text) for text in texts]
print(json.dumps(result))
"""


def load_in_child(path, texts=(), timeout=120):
    """load_gguf(path) in a child process (given `timeout` seconds): its result dict."""
    run = subprocess.run(
        [sys.executable, "-c", CHILD, path, json.dumps(list(texts))],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join((PACKAGE, TESTS))),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def refused_in_child(path, *fragments, seconds=2.0, memory=100 * MiB):
    result = load_in_child(path)
    assert result.get("model_file_error"), result
    assert os.path.basename(path) in result["message"], result
    for fragment in fragments:
        assert fragment in result["message"], result
    assert result["seconds"] < seconds, result
    assert result["peak_growth"] < memory, result
    return result["message"]


def test_ten_tokens_of_a_million_characters_are_refused_at_once(tmp_path):
    """The issue's reproducer: a SentencePiece vocabulary with 10 tokens of 1,000,000 characters
    did not load within 150 s (its conversion sliced every token at every cut). A token is now at
    most MAX_TOKEN_BYTES, checked as the header is walked, before any string is decoded."""
    tokens = BASE + ["a", "b"] + [("ab"[i % 2] + "a" * 999_999) for i in range(10)]
    path = write_llama(tmp_path / "long.gguf", tokens)
    refused_in_child(path, "tokenizer.ggml.tokens[261] is 1000000 bytes long", f"more than the {MAX_TOKEN_BYTES}")


# The conversion alone, with the bounds raised so that the tokens of 1,000,000 characters
# reach it: read_tokenizer on the file's metadata, timed, and the ids of `texts` with llama.cpp's.
CONVERT = r"""
import json, sys, time
import gguf
from gpt import gguf_file, gguf_tokenizer
from spm_reference import LlamaCppSPM

gguf_tokenizer.MAX_TOKEN_BYTES = 1 << 21
gguf_tokenizer.MAX_VOCABULARY_BYTES = 1 << 26
path, texts = sys.argv[1], json.loads(sys.argv[2])
reader = gguf.GGUFReader(path)
field = lambda key: reader.get_field(key).contents()
tokens = field("tokenizer.ggml.tokens")
started = time.perf_counter()
tokenizer = gguf_tokenizer.read_tokenizer(gguf_file._Metadata(reader, path), path, len(tokens))
seconds = time.perf_counter() - started
reference = LlamaCppSPM(tokens, field("tokenizer.ggml.scores"), field("tokenizer.ggml.token_type"), bos_id=1)
print(json.dumps({"seconds": seconds, "ids": [tokenizer.encode(t) for t in texts],
                  "reference": [reference.encode(t) for t in texts]}))
"""


def test_the_sentencepiece_conversion_is_linear_in_a_tokens_length(tmp_path):
    """The issue's reproducer, 10 tokens of 1,000,000 characters (each two tokens of 500,000,
    down to single characters, level by level): slicing every token at every cut did not finish
    in 150 s; hashing every prefix and suffix takes seconds. Ids are llama.cpp's (spm_reference.py)
    on texts made of the long tokens' pieces."""
    rng = random.Random(43)
    levels = [list("abcdefgh")]
    while len(levels[-1][0]) < 500_000:
        below, wanted = levels[-1], 64 if len(levels[-1][0]) < 64 else 8
        levels.append(list(dict.fromkeys(rng.choice(below) + rng.choice(below) for _ in range(wanted))))
    top = list(dict.fromkeys(rng.choice(levels[-1]) + rng.choice(levels[-1]) for _ in range(10)))
    pieces = [token for level in levels for token in level] + top
    tokens = BASE + pieces
    assert len(top[0]) > 1_000_000
    path = write_llama(tmp_path / "long.gguf", tokens)  # each piece its own score, shorter ones higher
    texts = [levels[11][0], levels[10][1] + " " + levels[9][2][:700] + "hgfedcba", top[0][:3000]]
    run = subprocess.run(
        [sys.executable, "-c", CONVERT, path, json.dumps(texts)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join((PACKAGE, TESTS))),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["seconds"] < 60, result["seconds"]  # 3 to 7 s here
    assert result["ids"] == result["reference"], "ids differ from llama.cpp's"
    assert len(result["ids"][0]) < 1500, "the pieces' merges did not apply"  # 2,048 characters (941 ids)


def test_a_long_multibyte_token_is_refused_by_its_bytes(tmp_path):
    """The bound is in UTF-8 bytes, as the file stores them: 2,049 "é" are 4,098 bytes."""
    tokens = BASE + ["é", "é" * 2049]
    path = write_llama(tmp_path / "accents.gguf", tokens)
    with pytest.raises(gpt.ModelFileError, match=r"accents.gguf: tokenizer.ggml.tokens\[260\] is 4098 bytes"):
        load_gguf(path)


def test_a_vocabulary_past_its_total_is_refused_naming_the_token(tmp_path):
    tokens = BASE + [f"{i:06d}" + "x" * 4000 for i in range(MAX_VOCABULARY_BYTES // 4006 + 10)]
    path = write_llama(tmp_path / "huge.gguf", tokens)
    first_past = len(BASE) + MAX_VOCABULARY_BYTES // 4006
    message = refused_in_child(path, f"tokenizer.ggml.tokens passes {MAX_VOCABULARY_BYTES} bytes at token")
    assert abs(int(message.split("at token ")[1].split(",")[0]) - first_past) <= 2, message


def test_forty_megabytes_of_control_tokens_are_refused_before_they_cost_gigabytes(tmp_path):
    """The issue's reproducer: 40 MB of control tokens took 3.77 GB (tokenizers' Aho-Corasick
    automaton over the tokens it matches whole peaks at about 78 bytes per byte). Refused as the
    header is walked, by the vocabulary's total."""
    tokens = BASE + [f"<ctl{i:05d}" + "x" * 3980 + ">" for i in range(10_000)]
    path = write_llama(tmp_path / "controls.gguf", tokens, types=BASE_TYPES + [CONTROL] * 10_000)
    refused_in_child(path, "tokenizer.ggml.tokens passes", memory=150 * MiB)


def test_control_tokens_are_bounded_apart_from_the_vocabulary(tmp_path):
    """1.2 MB of control tokens, in a vocabulary well within its total: refused naming the token
    types and the token where the 1 MiB bound is passed (they loaded, costing about 95 MB)."""
    count = MAX_MATCHED_WHOLE_BYTES // 4000 + 20
    tokens = BASE + [f"<ctl{i:05d}" + "x" * 3990 + ">" for i in range(count)]
    path = write_llama(tmp_path / "controls.gguf", tokens, types=BASE_TYPES + [CONTROL] * count)
    message = refused_in_child(path, "the control, user-defined and unknown tokens", f"pass {MAX_MATCHED_WHOLE_BYTES}")
    assert f"at token {len(BASE) + MAX_MATCHED_WHOLE_BYTES // 4000}" in message, message


def test_a_vocabulary_of_nested_repeats_is_refused_not_converted(tmp_path):
    """ "a", "aa", ..., "a" * 2000 split at every cut into two tokens: the merges' text is cubic in
    the longest (1.3 billion characters for tokenizers to copy). Refused by the merges' bound."""
    tokens = BASE + ["a" * k for k in range(1, 2001)]
    path = write_llama(tmp_path / "repeats.gguf", tokens)
    refused_in_child(path, "split into pairs of tokens whose text passes", seconds=10.0, memory=300 * MiB)


def test_nan_scores_are_refused_by_index(tmp_path):
    tokens = BASE + ["a", "b", "ab"]
    scores = [0.0] * len(BASE) + [-1.0, float("nan"), -3.0]
    path = write_llama(tmp_path / "nan.gguf", tokens, scores)
    with pytest.raises(gpt.ModelFileError, match=r"nan.gguf: tokenizer.ggml.scores\[260\] \(token 'b'\) is NaN"):
        load_gguf(path)


def test_a_small_sentencepiece_vocabulary_loads_with_llama_cpps_ids(tmp_path):
    """The bounds refuse none of what real vocabularies hold: merges, byte fallback, BOS."""
    pieces = ["\u2581", "a", "b", "c", "\u2581a", "\u2581ab", "bc", "\u2581abc", "ab"]
    tokens = BASE + pieces
    path = write_llama(tmp_path / "small.gguf", tokens)
    _, _, tokenizer = load_gguf(path)
    reference = LlamaCppSPM(tokens, [-float(i) for i in range(len(tokens))], BASE_TYPES + [NORMAL] * len(pieces), 1)
    for text in ["abc", "ab abc cab", "a☃b"]:
        assert tokenizer.encode(text) == reference.encode(text), text
