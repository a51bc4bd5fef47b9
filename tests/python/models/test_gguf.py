"""GGUF files written by save_gguf (F32, F16, BF16, Q8_0 and Q4_0, with their tokenizer): read
back by from_gguf, by gguf's reader against llama.cpp's names and layout, and by HF transformers;
written again from a loaded model; refused where they cannot be written; used by the command line.
Reading files and half-precision safetensors is test_gguf_reading.py's."""

import os
import subprocess
import sys

import gguf
import numpy as np
import pytest

import gpt
from checkpoints import rewrite
from gpt.gguf_file import FORMATS, save_gguf
from gpt2_gguf import CFG, IDS, QTYPES, T, assert_weights_equal, dequantized_as_written
from shapes import exercising_weights

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))


@pytest.fixture(scope="module")
def weights():
    return exercising_weights(CFG, seed=5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_save_and_load_gguf_in_every_format(tmp_path, weights, fmt):
    path = tmp_path / f"model-{fmt}.gguf"
    save_gguf(weights, CFG, path, fmt)
    # The file's values widened to f32 (not "auto", its own formats), to compare with a float model of them.
    model = gpt.GPT.from_gguf(str(path), gpt.CompileOptions(weights="f32"))
    assert model.config == CFG and model.config.layer_norm_eps == 1e-5
    assert model.tokenizer is None
    loaded = model.state_dict()
    expected = dequantized_as_written(weights, fmt)
    assert_weights_equal(loaded, expected)
    if fmt == "f32":
        assert_weights_equal(loaded, weights)
    else:
        # The embedding and matmul weights went through the format; the rest stayed exact.
        assert not np.array_equal(loaded["transformer.wte.weight"], weights["transformer.wte.weight"])
        assert not np.array_equal(
            loaded["transformer.h.1.mlp.c_proj.weight"], weights["transformer.h.1.mlp.c_proj.weight"]
        )
        for name in ("transformer.wpe.weight", "transformer.h.0.attn.c_attn.bias", "transformer.ln_f.weight"):
            np.testing.assert_array_equal(loaded[name], weights[name])
    reference = gpt.GPT.from_weights(CFG, expected).forward(IDS)
    np.testing.assert_allclose(model.forward(IDS), reference, rtol=0, atol=1e-5)


@pytest.mark.parametrize("fmt", ["f32", "q8_0"])
def test_gguf_file_has_llama_cpps_names_layout_and_metadata(tmp_path, weights, fmt):
    """The file, read with gguf's reader, against what llama.cpp's gpt2 loader asks for
    (llama-model.cpp: tok_embd {n_embd, n_vocab}, wqkv {n_embd, 3 n_embd}, ffn_up {n_embd, n_ff},
    ffn_down {n_ff, n_embd}, ...; ne order) and convert_hf_to_gguf.py's GPT2Model writes."""
    path = tmp_path / "model.gguf"
    save_gguf(weights, CFG, path, fmt)
    reader = gguf.GGUFReader(path)
    meta = {name: field.contents() for name, field in reader.fields.items()}
    assert meta["general.architecture"] == "gpt2"
    assert meta["gpt2.block_count"] == 2 and meta["gpt2.context_length"] == 32
    assert meta["gpt2.embedding_length"] == 64 and meta["gpt2.feed_forward_length"] == 256
    assert meta["gpt2.attention.head_count"] == 2
    assert meta["gpt2.attention.layer_norm_epsilon"] == pytest.approx(1e-5)
    assert meta["general.file_type"] == {"f32": 0, "q8_0": 7}[fmt]
    assert meta["general.quantization_version"] == 2
    assert meta["tokenizer.ggml.model"] == "none" and meta["gpt2.vocab_size"] == 96
    e, ff, v, ctx = 64, 256, 96, 32
    ne = {
        "token_embd.weight": [e, v],
        "position_embd.weight": [e, ctx],
        "output_norm.weight": [e],
        "output_norm.bias": [e],
    }
    for i in range(2):
        ne.update(
            {
                f"blk.{i}.attn_norm.weight": [e],
                f"blk.{i}.attn_norm.bias": [e],
                f"blk.{i}.attn_qkv.weight": [e, 3 * e],
                f"blk.{i}.attn_qkv.bias": [3 * e],
                f"blk.{i}.attn_output.weight": [e, e],
                f"blk.{i}.attn_output.bias": [e],
                f"blk.{i}.ffn_norm.weight": [e],
                f"blk.{i}.ffn_norm.bias": [e],
                f"blk.{i}.ffn_up.weight": [e, ff],
                f"blk.{i}.ffn_up.bias": [ff],
                f"blk.{i}.ffn_down.weight": [ff, e],
                f"blk.{i}.ffn_down.bias": [e],
            }
        )
    tensors = {t.name: t for t in reader.tensors}
    assert {name: [int(n) for n in t.shape] for name, t in tensors.items()} == ne
    quantized = {"token_embd.weight"} | {
        n for n in ne if n.endswith(("qkv.weight", "output.weight", "up.weight", "down.weight"))
    }
    for name, t in tensors.items():
        assert t.tensor_type == (QTYPES[fmt] if name in quantized else T.F32), name
    if fmt == "f32":
        # Contents: ggml's y = W x with W [out, in] in numpy order is HF's x @ Conv1D [in, out].
        np.testing.assert_array_equal(
            tensors["blk.1.attn_qkv.weight"].data, weights["transformer.h.1.attn.c_attn.weight"].T
        )
        np.testing.assert_array_equal(
            tensors["blk.0.attn_output.weight"].data, weights["transformer.h.0.attn.c_proj.weight"].T
        )
        np.testing.assert_array_equal(
            tensors["blk.0.ffn_down.weight"].data, weights["transformer.h.0.mlp.c_proj.weight"].T
        )
        np.testing.assert_array_equal(tensors["token_embd.weight"].data, weights["transformer.wte.weight"])
        np.testing.assert_array_equal(tensors["blk.1.ffn_norm.bias"].data, weights["transformer.h.1.ln_2.bias"])


@pytest.mark.parametrize("fmt", ["f32", "q4_0"])
def test_transformers_reads_the_same_weights_from_our_gguf(tmp_path, weights, fmt):
    """An independent reader: HF transformers' GGUF loader (its GPT-2 tensor processor undoes
    llama.cpp's converter) sees the weights from_gguf sees."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = str(tmp_path / "model.gguf")
    save_gguf(weights, CFG, path, fmt)
    # The loader maps names against a model of the file's shape (HF's config from the file lacks
    # the vocabulary size when there is no tokenizer, and names the context n_ctx).
    meta = load_gguf_checkpoint(path)["config"]
    assert (meta["n_layer"], meta["n_head"], meta["n_embd"], meta["n_ctx"]) == (2, 2, 64, 32)
    skeleton = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, n_positions=32, vocab_size=96))
    theirs = load_gguf_checkpoint(path, return_tensors=True, model_to_load=skeleton)["tensors"]
    # The values as read (f32): "auto" would store a 4-bit file's tied head as q8_0.
    ours = gpt.GPT.from_gguf(path, gpt.CompileOptions(weights="f32")).state_dict()
    assert set(theirs) == set(ours)
    for name, value in ours.items():
        np.testing.assert_array_equal(theirs[name].float().numpy(), value, err_msg=name)


def test_a_gguf_round_trips_through_save_gguf_of_the_loaded_model(tmp_path, weights):
    save_gguf(weights, CFG, tmp_path / "a.gguf", "q8_0")
    model = gpt.GPT.from_gguf(str(tmp_path / "a.gguf"))
    save_gguf(model, None, tmp_path / "b.gguf", "q8_0")
    a, b = gguf.GGUFReader(tmp_path / "a.gguf"), gguf.GGUFReader(tmp_path / "b.gguf")
    for ta, tb in zip(a.tensors, b.tensors, strict=True):
        assert ta.name == tb.name and ta.tensor_type == tb.tensor_type
        np.testing.assert_array_equal(np.asarray(ta.data), np.asarray(tb.data), err_msg=ta.name)


def test_save_gguf_refusals(tmp_path, weights):
    with pytest.raises(ValueError, match="format must be one of"):
        save_gguf(weights, CFG, tmp_path / "x.gguf", "q3_k")
    rope = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=96, block_size=32, pos_embedding="rope")
    with pytest.raises(ValueError, match="pos_embedding='rope' cannot be written"):
        save_gguf(gpt.GPT.random(rope), None, tmp_path / "x.gguf")
    odd = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=48, vocab_size=96, block_size=32)
    with pytest.raises(ValueError, match="token_embd.weight rows have 48 values, not a multiple of q8_0's block of 32"):
        save_gguf(gpt.GPT.random(odd), None, tmp_path / "x.gguf", "q8_0")
    assert not (tmp_path / "x.gguf").exists()


# -- tokenizer -----------------------------------------------------------------------------------

CORPUS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "Once upon a time, there was a little compiler that wanted to run GPT-2 quickly.",
    "The quick brown fox jumps over the lazy dog. It's 12:30 and we're done!",
] * 20


def byte_level_bpe(vocab_size=300):
    """A GPT-2-style tokenizer (byte-level BPE with <|endoftext|>), trained here: no network."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    assert tokenizer.get_vocab_size() == vocab_size
    return tokenizer


TEXTS = [
    "def fibonacci(n): return 42",
    "Once upon a time<|endoftext|>The quick brown fox",
    "  spaces,\ttabs\nand UTF-8: héllo wörld ✓ 日本",
]


def test_tokenizer_round_trips_through_gguf(tmp_path):
    tokenizer = byte_level_bpe()
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=300, block_size=32)
    save_gguf(exercising_weights(cfg, seed=2), cfg, tmp_path / "tok.gguf", "f16", tokenizer=tokenizer)
    meta = {name: field.contents() for name, field in gguf.GGUFReader(tmp_path / "tok.gguf").fields.items()}
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "gpt-2"
    vocab = tokenizer.get_vocab()
    assert meta["tokenizer.ggml.tokens"] == sorted(vocab, key=vocab.get)
    endoftext = vocab["<|endoftext|>"]
    assert meta["tokenizer.ggml.bos_token_id"] == meta["tokenizer.ggml.eos_token_id"] == endoftext
    assert meta["tokenizer.ggml.token_type"][endoftext] == gguf.TokenType.CONTROL
    assert len(meta["tokenizer.ggml.merges"]) == 300 - 256 - 1

    model = gpt.GPT.from_gguf(str(tmp_path / "tok.gguf"))
    assert isinstance(model.tokenizer, gpt.HFTokenizer) and model.tokenizer.vocab_size == 300
    for text in TEXTS:
        ids = tokenizer.encode(text).ids
        assert model.tokenizer.encode(text) == ids, text
        assert model.tokenizer.decode(ids) == tokenizer.decode(ids)
    assert endoftext in model.tokenizer.encode(TEXTS[1])  # the special token is one token
    assert len(model.tokenizer.encode(TEXTS[0])) < len(TEXTS[0].encode())  # merges are applied
    assert model.tokenizer.decode(model.tokenizer.encode(TEXTS[2])) == TEXTS[2]

    # Written again from the loaded model (its tokenizer by default): the same vocabulary.
    save_gguf(model, None, tmp_path / "again.gguf", "f32")
    again = {name: field.contents() for name, field in gguf.GGUFReader(tmp_path / "again.gguf").fields.items()}
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
        assert again[key] == meta[key], key


def test_a_smaller_tokenizer_is_padded_as_llama_cpp_does(tmp_path):
    tokenizer = byte_level_bpe(280)
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=288, block_size=32)
    save_gguf(exercising_weights(cfg), cfg, tmp_path / "pad.gguf", "f32", tokenizer=tokenizer)
    meta = {name: field.contents() for name, field in gguf.GGUFReader(tmp_path / "pad.gguf").fields.items()}
    assert meta["tokenizer.ggml.tokens"][280:] == [f"[PAD{i}]" for i in range(280, 288)]
    assert meta["tokenizer.ggml.token_type"][280:] == [gguf.TokenType.USER_DEFINED] * 8
    model = gpt.GPT.from_gguf(str(tmp_path / "pad.gguf"))
    assert model.tokenizer.encode(TEXTS[0]) == tokenizer.encode(TEXTS[0]).ids
    with pytest.raises(ValueError, match="token id 279, outside the model's vocabulary of 96"):
        save_gguf(exercising_weights(CFG), CFG, tmp_path / "x.gguf", tokenizer=tokenizer)


def test_a_gguf_tokenizer_that_does_not_fit_is_refused(tmp_path):
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=300, block_size=32)
    save_gguf(exercising_weights(cfg), cfg, tmp_path / "tok.gguf", "f32", tokenizer=byte_level_bpe())
    rewrite(
        tmp_path / "tok.gguf",
        tmp_path / "pre.gguf",
        set_keys={"tokenizer.ggml.pre": ("llama3", gguf.GGUFValueType.STRING)},
    )
    with pytest.raises(ValueError, match="tokenizer.ggml.pre 'llama3' is not supported"):
        gpt.GPT.from_gguf(str(tmp_path / "pre.gguf"))
    # Another kind of vocabulary (SentencePiece): loaded without a tokenizer.
    rewrite(
        tmp_path / "tok.gguf",
        tmp_path / "spm.gguf",
        set_keys={"tokenizer.ggml.model": ("llama", gguf.GGUFValueType.STRING)},
    )
    assert gpt.GPT.from_gguf(str(tmp_path / "spm.gguf")).tokenizer is None


# -- the command line ----------------------------------------------------------------------------


def run_cli(*args):
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    return subprocess.run([sys.executable, "-m", "gpt", *args], capture_output=True, text=True, env=env, timeout=600)


def test_generate_with_a_gguf_file(tmp_path):
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=300, block_size=32)
    path = str(tmp_path / "cli.gguf")
    save_gguf(exercising_weights(cfg, seed=9), cfg, path, "q8_0", tokenizer=byte_level_bpe())
    result = run_cli("generate", "--model", path, "--prompt", "def fib", "--max_new_tokens", "8", "--temperature", "0")
    assert result.returncode == 0, result.stderr
    model = gpt.GPT.from_gguf(path)
    prompt = model.tokenizer.encode("def fib")
    expected = "def fib" + model.tokenizer.decode(model.generate(prompt, max_new_tokens=8))
    assert result.stdout.split("\n[gpt]")[0] == expected
    assert f"[gpt] prompt: {len(prompt)} tokens" in result.stdout

    save_gguf(exercising_weights(CFG), CFG, tmp_path / "bare.gguf")  # vocabulary 96, no tokenizer
    bare = run_cli("generate", "--model", str(tmp_path / "bare.gguf"))
    assert bare.returncode == 2 and "no tokenizer" in bare.stderr
    missing = run_cli("generate", "--model", str(tmp_path / "nope.gguf"))
    assert missing.returncode == 2 and "no such GGUF file" in missing.stderr


def test_save_gguf_leaves_the_callers_arrays_writable(tmp_path, weights):
    """Writing a file reads the weights; it must not flip the caller's arrays to read-only."""
    mine = {name: value.copy() for name, value in weights.items()}
    save_gguf(mine, CFG, tmp_path / "w.gguf", "q8_0")
    assert all(value.flags.writeable for value in mine.values())
    mine["transformer.wte.weight"] += 1.0  # would raise on a read-only array
