"""The loader fuzzer's seeds (tools/fuzz/fuzz_loaders.py): small valid inputs of every kind, written by
the project's own writers and gguf's: GPT-2 and Llama-family GGUF files, HF directories, chat
templates, the toy GPU artifact, K-quant models and tokenizers with a text."""

import dataclasses
import functools
import importlib.util
import json
import os
import random
import struct

from loader_formats import ArtifactDoc, HFDoc, Input, TemplateDoc, TokenizerDoc, kept_formats, parse_gguf
from loader_templates import CHATML, LLAMA2_CHAT, LLAMA3_CHAT, REAL_TEMPLATES, template_statement

# The checkout this file is in (through links: Bazel's runfiles link to it).
REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
# A text every tokenizer seed starts from: words, digits, contractions, whitespace runs, control
# characters, scripts, an emoji sequence, and the chat specials of the seeds' vocabularies.
TOKENIZER_TEXT = (
    "Hello, world! It's 2025: 12345 apples.\n\n  \t x\r\n héllo wörld ✓ 日本語 Ελληνικά 👩‍💻 \x00\x7f"
    "<|im_start|>user\nHi<|im_end|><|endoftext|><tool> Ġt ▁a <|ü|>"
)


def make_seeds(scratch: str, kinds=("gguf", "hf", "template", "artifact")) -> list[Input]:
    """Valid inputs of each of `kinds`, small so that a finding's file is small."""
    seeds = []
    if "gguf" in kinds:
        seeds += gpt2_gguf_seeds(scratch) + family_gguf_seeds(scratch)
    if "hf" in kinds:
        seeds += hf_seeds() + qwen2_hf_seeds()
    if "template" in kinds:
        rng = random.Random(0)
        for name, source in REAL_TEMPLATES.items():
            seeds.append(Input("template", TemplateDoc([source]), origin=f"seed template {name}"))
        seeds.append(
            Input("template", TemplateDoc([CHATML, template_statement(rng)]), origin="seed template generated")
        )
    if "artifact" in kinds:
        artifact = toy_artifact_seed(scratch)
        if artifact is not None:
            seeds.append(Input("artifact", artifact, origin="seed artifact"))
    if "model" in kinds:
        seeds += model_seeds(scratch)
    if "tokenizer" in kinds:
        seeds += tokenizer_seeds(scratch)
    return seeds


# -- GPT-2 -------------------------------------------------------------------------------------


def byte_level_tokenizer(extra_merges, special=True):
    """A byte-level BPE (GPT-2's kind): the 256 byte tokens, merged tokens and <|endoftext|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokens = byte_alphabet() + ["".join(pair) for pair in extra_merges]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=list(extra_merges)))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    if special:
        tokenizer.add_special_tokens(["<|endoftext|>"])
    return tokenizer


def byte_alphabet() -> list[str]:
    """GPT-2's 256 byte-level characters, in its byte order's token order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    return [chr(c) for c in printable + [256 + i for i in range(256 - len(printable))]]


def nano_gpt2():
    """(config, weights) of a nano GPT-2 (vocabulary 260: bytes, 3 merges, <|endoftext|>), every
    tensor's bytes carrying information (non-zero biases and LayerNorm parameters)."""
    import numpy as np

    import gpt
    from gpt.weights import random_weights

    # 64 positions: the prompt bound of a chat (16 characters a position) holds MESSAGES.
    config = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=260, block_size=64)
    rng = np.random.default_rng(1)
    weights = random_weights(config, seed=1)
    weights = {name: (value + rng.normal(0, 0.01, value.shape)).astype(np.float32) for name, value in weights.items()}
    return config, weights


# Two vocabularies of 260: GPT-2's kind, and one whose tokens are all at most 2 bytes long
# (tokenizers' BPE has panicked on a bad merge only when no token was longer).
LONG_MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]
SHORT_MERGES = [("h", "e"), ("a", "b"), ("c", "d"), ("e", "f")]


def gpt2_gguf_seeds(scratch: str) -> list[Input]:
    """The nano GPT-2 written by gpt.gguf_file.save_gguf in each format it writes."""
    from gpt.gguf_file import FORMATS, save_gguf

    config, weights = nano_gpt2()
    tokenizers = {"long": byte_level_tokenizer(LONG_MERGES), "short": byte_level_tokenizer(SHORT_MERGES, False)}
    seeds = []
    for fmt in FORMATS:
        path = os.path.join(scratch, f"seed-{fmt}.gguf")
        save_gguf(weights, config, path, fmt, tokenizer=tokenizers["short" if fmt in ("f16", "q4_0") else "long"])
        with open(path, "rb") as f:
            doc = parse_gguf(f.read())
        keep = fmt if fmt in kept_formats() else None
        seeds.append(Input("gguf", doc, keep=keep, origin=f"seed {fmt}"))
    return seeds


def hf_seeds() -> list[Input]:
    """The nano GPT-2 as HF directories in F32, F16 and BF16 with a ChatML template, and a nano
    Llama directory (rope_scaling, generation_config.json, the template in chat_template.jinja)."""
    import gpt
    from gpt import architecture_weights
    from gpt.weights import random_weights

    _, weights = nano_gpt2()
    hf = dict(model_type="gpt2", n_layer=1, n_head=2, n_embd=32, vocab_size=260, n_positions=64)
    hf.update(activation_function="gelu_new", layer_norm_epsilon=1e-5, tie_word_embeddings=True)
    tokenizer_json = byte_level_tokenizer(LONG_MERGES).to_str().encode()
    tokenizer_config = {"chat_template": CHATML, "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    extra = {"tokenizer.json": tokenizer_json, "tokenizer_config.json": json.dumps(tokenizer_config).encode()}
    seeds = []
    for dtype in ("F32", "F16", "BF16"):
        header, data = safetensors_bytes(weights, dtype)
        seeds.append(Input("hf", HFDoc(dict(hf), header, data, extra=dict(extra)), origin=f"seed hf {dtype}"))
    llama = gpt.GPTConfig(
        architecture="llama", n_layer=1, n_head=2, n_kv_head=1, n_embd=32, vocab_size=260, block_size=64, n_ff=64
    )
    hf_llama = dict(model_type="llama", num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    hf_llama.update(hidden_size=32, intermediate_size=64, vocab_size=260, max_position_embeddings=64)
    hf_llama.update(rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, rope_scaling=None)
    header, data = safetensors_bytes(architecture_weights.from_compiler(llama, random_weights(llama, seed=2)), "F32")
    llama_extra = {
        "tokenizer.json": tokenizer_json,
        "tokenizer_config.json": json.dumps({"eos_token": {"content": "<|endoftext|>"}}).encode(),
        "chat_template.jinja": LLAMA3_CHAT.encode(),
        "generation_config.json": b'{"eos_token_id": [0, 259]}',
    }
    seeds.append(Input("hf", HFDoc(hf_llama, header, data, extra=llama_extra), origin="seed hf llama"))
    return seeds


def qwen2_hf_seeds() -> list[Input]:
    """A nano Qwen2 directory (q/k/v biases) with an untied head in two shards listed by
    model.safetensors.index.json, and one with a tied head in model.safetensors."""
    import gpt
    from gpt import architecture_weights
    from gpt.weights import random_weights

    tokenizer_json = byte_level_tokenizer(LONG_MERGES).to_str().encode()
    extra = {"tokenizer.json": tokenizer_json, "generation_config.json": b'{"eos_token_id": 259}'}
    extra["tokenizer_config.json"] = json.dumps({"chat_template": CHATML, "eos_token": "<|endoftext|>"}).encode()
    seeds = []
    for tied in (False, True):
        config = gpt.GPTConfig(
            architecture="qwen2", n_layer=1, n_head=2, n_kv_head=1, n_embd=32, vocab_size=260, block_size=64, n_ff=64
        )
        config = dataclasses.replace(config, tied_head=tied)
        hf = dict(model_type="qwen2", num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
        hf.update(hidden_size=32, intermediate_size=64, vocab_size=260, max_position_embeddings=64, rms_norm_eps=1e-6)
        hf.update(rope_theta=1000000.0, tie_word_embeddings=tied, use_sliding_window=False, sliding_window=32)
        weights = architecture_weights.from_compiler(config, random_weights(config, seed=3))
        if tied:
            header, data = safetensors_bytes(weights, "BF16")
            seeds.append(Input("hf", HFDoc(hf, header, data, extra=dict(extra)), origin="seed hf qwen2 tied"))
            continue
        names = sorted(weights)
        first, second = names[: len(names) // 2], names[len(names) // 2 :]
        shards = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
        header, data = safetensors_bytes({name: weights[name] for name in first}, "F16")
        second_header, second_data = safetensors_bytes({name: weights[name] for name in second}, "F16")
        weight_map = {name: shards[0] for name in first} | {name: shards[1] for name in second}
        index = {"metadata": {"total_size": len(data) + len(second_data)}, "weight_map": weight_map}
        shard_extra = dict(extra)
        shard_extra["model.safetensors.index.json"] = json.dumps(index).encode()
        shard_extra[shards[1]] = safetensors_file(second_header, second_data)
        doc = HFDoc(hf, header, data, extra=shard_extra, weights_name=shards[0])
        seeds.append(Input("hf", doc, origin="seed hf qwen2 shards"))
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


def safetensors_file(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


# -- Llama-family GGUF files ----------------------------------------------------------------------

SPM_PIECES = ["\u2581", "a", "b", "c", "h", "e", "l", "o", "\u2581a", "\u2581ab", "bc", "\u2581abc", "ab", "he"]
SPM_PIECES += ["ll", "hell", "hello", "\u2581hello", "<tool>"]
# A byte-level BPE vocabulary as llama.cpp's converter writes SmolLM2's or Qwen2's: GPT-2's byte
# alphabet, merged tokens, control tokens (matched whole, left out of decoded text), a
# user-defined one and a user-defined one that is not ASCII (decoded as its own text).
BPE_MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "l l", "he ll", "o r", "Ġ w", "1 2"]
BPE_SPECIALS = [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<tool>", 4), ("<|ü|>", 4)]


def spm_vocabulary(writer) -> int:
    """Writes a SentencePiece vocabulary (tokenizer.ggml.model "llama": <unk>, <s>, </s>, the 256
    byte tokens, pieces that merge, a user-defined token); returns its size."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + SPM_PIECES
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * 259 + [-float(i) for i in range(len(SPM_PIECES))])
    writer.add_token_types([2, 3, 3] + [6] * 256 + [1] * (len(SPM_PIECES) - 1) + [4])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_chat_template(LLAMA2_CHAT)
    return len(tokens)


def bpe_vocabulary(writer, pre: str) -> int:
    """Writes a byte-level BPE vocabulary (tokenizer.ggml.model "gpt2", tokenizer.ggml.pre `pre`);
    returns its size."""
    merged = ["".join(merge.split(" ")) for merge in BPE_MERGES]
    tokens = byte_alphabet() + merged + [text for text, _ in BPE_SPECIALS]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types([1] * (256 + len(merged)) + [kind for _, kind in BPE_SPECIALS])
    writer.add_token_merges(BPE_MERGES)
    writer.add_bos_token_id(256 + len(merged))
    writer.add_eos_token_id(256 + len(merged) + 2)
    writer.add_chat_template(CHATML)
    return len(tokens)


def family_gguf(path: str, architecture: str, vocabulary: str, types=None, **shape) -> bytes:
    """A Llama-family GGUF file (`architecture` "llama", "qwen2" or "phi3") with a SentencePiece
    vocabulary ("spm") or a byte-level BPE one with that pre-tokenizer ("bpe:llama-bpe"), as
    llama.cpp's converter writes them. `types`: matrix GGUF name fragment -> tensor type (random
    blocks, finite fp16 scales), F32 for the others; `shape`: GPTConfig fields (default n_embd 32,
    one layer)."""
    import gguf
    import numpy as np

    import gpt
    from gpt import architectures

    writer = gguf.GGUFWriter(path, arch=architecture)
    size = spm_vocabulary(writer) if vocabulary == "spm" else bpe_vocabulary(writer, vocabulary.split(":")[1])
    shape = dict(dict(n_layer=1, n_head=2, n_kv_head=2, n_embd=32, n_ff=64, block_size=64), **shape)
    config = gpt.GPTConfig(architecture=architecture, vocab_size=size, **shape)
    writer.add_block_count(config.n_layer)
    writer.add_context_length(config.block_size)
    writer.add_embedding_length(config.n_embd)
    writer.add_feed_forward_length(config.n_ff)
    writer.add_head_count(config.n_head)
    writer.add_head_count_kv(config.n_kv_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    rng = np.random.default_rng(0)
    for parameter, layer in architectures.parameters(config):
        name = parameter.gguf.replace("{i}", str(layer)) if layer is not None else parameter.gguf
        numpy_shape = architectures.gguf_shape(parameter, config)
        kind = next((kind for fragment, kind in (types or {}).items() if fragment in name), None)
        if kind is None or len(numpy_shape) != 2 or numpy_shape[1] % gguf.GGML_QUANT_SIZES[kind][0]:
            writer.add_tensor(name, rng.standard_normal(numpy_shape).astype(np.float32) * 0.02)
        else:
            writer.add_tensor(name, random_blocks(kind, *numpy_shape, rng), raw_dtype=kind)
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file, writer.close):
        step()
    with open(path, "rb") as f:
        return f.read()


def random_blocks(kind, rows: int, columns: int, rng):
    """[rows, bytes a row] of random `kind` blocks whose weights are about 0.02 (tools/dev/make_gguf.py's
    random_matrix: codes uniform, fp16 scales set)."""
    return _make_gguf().random_matrix(kind, rows, columns, rng)


@functools.cache
def _make_gguf():
    spec = importlib.util.spec_from_file_location("make_gguf", os.path.join(REPOSITORY, "tools", "dev", "make_gguf.py"))
    make_gguf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_gguf)
    return make_gguf


def family_gguf_seeds(scratch: str) -> list[Input]:
    """A nano Llama with a SentencePiece vocabulary and Llama 2's template (TinyLlama's, Mistral's
    kind); a Llama with a byte-level BPE vocabulary (SmolLM2's and Llama 3's); a Qwen2 (q/k/v
    biases, NEOX rope layout, an untied head in Q8_0) and a Phi-3 (fused attn_qkv and gate/up)."""
    import gguf

    T = gguf.GGMLQuantizationType
    files = {
        "llama spm": ("llama", "spm", None, {}),
        "llama bpe": ("llama", "bpe:llama-bpe", None, dict(n_kv_head=1)),
        "qwen2 bpe": ("qwen2", "bpe:qwen2", {"output.": T.Q8_0, "ffn_": T.Q4_0}, dict(n_kv_head=1, tied_head=False)),
        "phi3 spm": ("phi3", "spm", {"attn_qkv": T.Q8_0}, {}),
    }
    seeds = []
    for name, (architecture, vocabulary, types, shape) in files.items():
        path = os.path.join(scratch, f"seed-{name.replace(' ', '-')}.gguf")
        doc = parse_gguf(family_gguf(path, architecture, vocabulary, types, **shape))
        seeds.append(Input("gguf", doc, origin=f"seed {name}"))
    return seeds


def model_seeds(scratch: str) -> list[Input]:
    """Llama-family K-quant files of tiny shapes (2 layers) that GPT.from_gguf(weights="auto")
    repacks: Q4_K_M's mix (Q4_K, Q6_K where llama.cpp gives more bits, the tied table in Q6_K),
    Qwen2 in Q5_K with an untied Q8_0 head, and a Phi-3 of width 128 where K-quants do not tile a
    row (Q5_0, Q4_1, and Q6_K for ffn_down's rows of 256)."""
    import gguf

    T = gguf.GGMLQuantizationType
    k_m = {"attn_v": T.Q6_K, "ffn_down": T.Q6_K, "token_embd": T.Q6_K, "attn_": T.Q4_K, "ffn_": T.Q4_K}
    files = {
        "llama q4_k_m": ("llama", k_m, dict(n_embd=256, n_head=4, n_kv_head=2, n_ff=512)),
        "qwen2 q5_k": (
            "qwen2",
            {"output.": T.Q8_0, "token_embd": T.Q6_K, "blk.": T.Q5_K},
            dict(n_embd=256, n_head=4, n_kv_head=1, n_ff=256, tied_head=False),
        ),
        "phi3 q5_0": (
            "phi3",
            {"ffn_down": T.Q6_K, "attn_qkv": T.Q5_0, "ffn_up": T.Q4_1, "blk.": T.Q5_1, "token_embd": T.Q8_0},
            dict(n_embd=128, n_head=4, n_kv_head=4, n_ff=256),
        ),
    }
    seeds = []
    for name, (architecture, types, shape) in files.items():
        path = os.path.join(scratch, f"seed-model-{name.replace(' ', '-')}.gguf")
        vocabulary = "bpe:qwen2" if architecture == "qwen2" else "bpe:smollm"
        doc = parse_gguf(family_gguf(path, architecture, vocabulary, types, n_layer=2, **shape))
        seeds.append(Input("model", doc, origin=f"seed model {name}"))
    return seeds


def tokenizer_seeds(scratch: str) -> list[Input]:
    """TOKENIZER_TEXT with byte-level BPE vocabularies in GGUF files (pre-tokenizers llama-bpe,
    qwen2, smollm, gpt-2, and GPT-2's file without the key), a SentencePiece one, and a
    tokenizer.json (GPT-2's kind, with <|endoftext|> and a user-defined token)."""
    seeds = []
    for pre in ("llama-bpe", "qwen2", "smollm", "gpt-2"):
        path = os.path.join(scratch, f"seed-tokenizer-{pre}.gguf")
        vocab = parse_gguf(family_gguf(path, "llama", f"bpe:{pre}"))
        seeds.append(Input("tokenizer", TokenizerDoc(vocab, None, TOKENIZER_TEXT), origin=f"seed tokenizer {pre}"))
    path = os.path.join(scratch, "seed-tokenizer-spm.gguf")
    vocab = parse_gguf(family_gguf(path, "llama", "spm"))
    seeds.append(Input("tokenizer", TokenizerDoc(vocab, None, TOKENIZER_TEXT), origin="seed tokenizer spm"))
    from gpt.gguf_file import save_gguf

    config, weights = nano_gpt2()
    path = os.path.join(scratch, "seed-tokenizer-gpt2.gguf")
    save_gguf(weights, config, path, "f32", tokenizer=byte_level_tokenizer(LONG_MERGES))
    with open(path, "rb") as f:
        gpt2 = parse_gguf(f.read())
    seeds.append(Input("tokenizer", TokenizerDoc(gpt2, None, TOKENIZER_TEXT), origin="seed tokenizer gpt2"))
    tokenizer = byte_level_tokenizer(LONG_MERGES)
    tokenizer.add_tokens(["<tool>"])
    doc = TokenizerDoc(None, tokenizer.to_str().encode(), TOKENIZER_TEXT)
    seeds.append(Input("tokenizer", doc, origin="seed tokenizer json"))
    return seeds


def toy_artifact_seed(scratch: str) -> "ArtifactDoc | None":
    """The toy GPU artifact of tests/python/toy_artifact.py (a manifest around toy_kernels.ptx,
    which the runtime's checks accept), or None when this checkout has no tests directory."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for root in (here, REPOSITORY):
        helper = os.path.join(root, "tests", "python", "toy_artifact.py")
        if os.path.isfile(helper) and os.path.isfile(os.path.join(root, "tests", "python", "toy_kernels.ptx")):
            break
    else:
        return None
    spec = importlib.util.spec_from_file_location("toy_artifact", helper)
    toy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toy)
    directory = toy.write_artifact(os.path.join(scratch, "seed-artifact"))
    files = {}
    for name in ("manifest.json", "kernels.sm_80.ptx", "weights.safetensors"):
        with open(os.path.join(directory, name), "rb") as f:
            files[name] = f.read()
    return ArtifactDoc(json.loads(files["manifest.json"]), files["kernels.sm_80.ptx"], files["weights.safetensors"])
