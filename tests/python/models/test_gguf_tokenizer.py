"""The tokenizer a GGUF file carries (gpt.gguf_tokenizer), against llama.cpp's algorithms written
out plainly (bpe_reference.py, spm_reference.py) and ids derived from the vocabulary by hand:
SmolLM2's real vocabulary (pre-tokenizer "smollm"), small trained byte-level BPE vocabularies in
GGUF files written with gguf.GGUFWriter under each pre-tokenizer read (default, gpt-2, smollm,
llama-bpe, qwen2), and a small SentencePiece vocabulary (model "llama": Llama 2, TinyLlama,
Mistral) with byte fallback."""

import gguf
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from bpe_reference import LlamaCppBPE
from gpt import ModelFileError, gguf_file, gguf_tokenizer
from gpt import models as installed
from gpt.detokenizer import IncrementalDetokenizer
from spm_reference import LlamaCppSPM

# Text of the kinds llama.cpp's tokenizer tests use (its test-tokenizer-0 inputs): whitespace
# runs, contractions, digits, punctuation, accents, Cyrillic, Khmer, CJK, emoji, code.
TEXTS = [
    "",
    " ",
    "  ",
    "\t",
    "\n",
    "\n\n\n",
    "\t\n",
    "Hello world",
    " Hello world",
    "Hello World!",
    " Hello, world!",
    "    Hello\n    Hello",
    " (",
    "\n =",
    "' era",
    "!!!!!!",
    "3",
    "33",
    "3333333",
    "The year 2024 had 366 days; pi is 3.14159 and 12345 is not 1234.",
    "I've been 'told' he's here, we'll see, they're sure, I'd know, I'm in. DON'T SHOUT'S",
    "нещо на Български",
    "កាន់តែពិសេសអាចខលចេញ",
    "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
    "🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅",
    "Cửa Việt café naïve résumé",
    "def f(x):\n    return x**2  # square\n\n\nprint(f(12))",
    "  multiple   spaces\tand\ttabs  \n  ",
]
T = gguf.TokenType


# -- SmolLM2's vocabulary ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2():
    path = installed.find("smollm2")
    meta = gguf_file._Metadata(gguf.GGUFReader(path), path)
    tokenizer = gguf_tokenizer.read_tokenizer(meta, path, 49152)
    data = {key: meta.get(f"tokenizer.ggml.{key}", list) for key in ("tokens", "merges", "token_type")}
    return tokenizer, data


def test_smollm2_special_tokens_map_to_their_ids(smollm2):
    tokenizer, data = smollm2
    tokens = data["tokens"]
    assert tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.add_bos) == (1, 2, False)
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|im_start|>", "<|im_end|>")
    # llama.cpp ends generation at EOS and at <|endoftext|>, which it recognises by its text.
    assert tokenizer.end_of_generation == {0, 2}
    for i in range(17):  # every control token, matched whole wherever it stands
        assert data["token_type"][i] == T.CONTROL
        assert tokenizer.encode(tokens[i]) == [i]
        assert tokenizer.encode(f"x{tokens[i]}y") == [tokens.index("x"), i, tokens.index("y")]
    # A ChatML turn: the markers are ids 1 and 2, the rest whole tokens of the vocabulary.
    vocab = {token: i for i, token in enumerate(tokens)}
    turn = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    pieces = ["What", "Ġis", "Ġthe", "Ġcapital", "Ġof", "ĠFrance", "?"]  # GPT-2's split, byte-level spaces
    assert tokenizer.encode(turn) == [1, vocab["user"], vocab["Ċ"]] + [vocab[p] for p in pieces] + [2, vocab["Ċ"]]
    assert [vocab[p] for p in pieces] == [1780, 314, 260, 3575, 282, 4649, 47]
    # Decoding leaves control tokens out, as llama.cpp's detokenize does by default.
    assert tokenizer.decode(tokenizer.encode(turn)) == "user\nWhat is the capital of France?\n"


def test_smollm2_merges_by_hand(smollm2):
    """A word that is no token is merged by the ranks of tokenizer.ggml.merges, lowest first."""
    tokenizer, data = smollm2
    vocab = {token: i for i, token in enumerate(data["tokens"])}
    rank = {merge: i for i, merge in enumerate(data["merges"])}
    word = "Ġzyzzyvas"
    assert word not in vocab
    # Merge by hand: repeatedly the lowest-ranked adjacent pair.
    symbols = list(word)
    while True:
        pairs = [(rank.get(f"{a} {b}"), i) for i, (a, b) in enumerate(zip(symbols, symbols[1:], strict=False))]
        pairs = [p for p in pairs if p[0] is not None]
        if not pairs:
            break
        _, i = min(pairs)
        symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
    assert len(symbols) > 1
    assert tokenizer.encode(" zyzzyvas") == [vocab[s] for s in symbols]


def test_smollm2_ids_equal_llama_cpps_algorithm(smollm2):
    tokenizer, data = smollm2
    reference = LlamaCppBPE(
        data["tokens"], data["merges"], data["token_type"], gguf_tokenizer.PRE_TOKENIZERS["smollm"].splits
    )
    chat = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    for text in TEXTS + [chat, "a<|endoftext|>b<|im_end|><|im_end|>"]:
        assert tokenizer.encode(text) == reference.encode(text), repr(text)


def test_smollm2_round_trips_text(smollm2):
    tokenizer, _ = smollm2
    for text in TEXTS:
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == text
        # Streamed token by token, a character split over tokens comes out whole.
        detokenizer = IncrementalDetokenizer(tokenizer)
        assert "".join(detokenizer.add(i) for i in ids) + detokenizer.flush() == text


# -- small vocabularies in GGUF files ----------------------------------------------------------

CORPUS = [
    "The year 2024 had 366 days and 12345 seconds; pi is 3.14159.",
    "I've been told he's here, we'll see. They'RE sure!",
    "def f(x):\n    return x**2\n\n",
    "hello world, Hello World! naïve café 我想",
    "    indented\n\ttabbed  spaced   out",
]
# A token no merge makes: llama-bpe (ignore_merges) takes a piece that is exactly it whole.
UNMERGED = "zqzqzq"


@pytest.fixture(scope="module")
def vocabulary():
    """tokens, merges, token types of a byte-level BPE trained on CORPUS, with control tokens
    first, a user-defined one (non-ASCII), UNMERGED, and an end-of-turn marker typed NORMAL (which
    llama.cpp treats as control by its text)."""
    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    trained.train_from_iterator(CORPUS * 20, trainer)
    vocab = trained.get_vocab()
    by_id = sorted(vocab, key=vocab.get)
    import json

    merges = [" ".join(m) if isinstance(m, list) else m for m in json.loads(trained.to_str())["model"]["merges"]]
    tokens = ["<s>", "</s>", "<|eot_id|>", "<ünï>"] + by_id + [UNMERGED]
    types = [T.CONTROL, T.CONTROL, T.NORMAL, T.USER_DEFINED] + [T.NORMAL] * len(by_id) + [T.NORMAL]
    return tokens, merges, [int(t) for t in types]


def write_vocabulary(path, tokens, merges, types, pre, **keys):
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model(keys.pop("model", "gpt2"))
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(keys.pop("bos", 0))
    writer.add_eos_token_id(keys.pop("eos", 1))
    if "add_bos" in keys:
        writer.add_add_bos_token(keys.pop("add_bos"))
    if "template" in keys:
        writer.add_chat_template(keys.pop("template"))
    assert not keys
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def read(path, vocab_size):
    return gguf_tokenizer.read_tokenizer(gguf_file._Metadata(gguf.GGUFReader(path), path), path, vocab_size)


PRE_NAMES = ["default", "gpt-2", "smollm", "llama-bpe", "qwen2"]


@pytest.mark.parametrize("pre", PRE_NAMES)
def test_ids_equal_llama_cpps_algorithm_under_each_pre_tokenizer(tmp_path, vocabulary, pre):
    tokens, merges, types = vocabulary
    tokenizer = read(write_vocabulary(tmp_path / "v.gguf", tokens, merges, types, pre), len(tokens))
    spec = gguf_tokenizer.PRE_TOKENIZERS[pre]
    # llama.cpp adds BOS for llama-bpe unless tokenizer.ggml.add_bos_token says otherwise.
    reference = LlamaCppBPE(
        tokens, merges, types, spec.splits, spec.ignore_merges, bos_id=0, add_bos=pre == "llama-bpe"
    )
    for text in TEXTS + CORPUS + [UNMERGED, f" {UNMERGED}", "<s>hi</s><|eot_id|><ünï>!"]:
        assert tokenizer.encode(text) == reference.encode(text), (pre, text)


def test_the_pre_tokenizers_split_as_llama_cpp_names_them(tmp_path, vocabulary):
    """Where llama.cpp's pre-tokenizers differ, on this vocabulary: digits, ignore_merges, BOS."""
    tokens, merges, types = vocabulary
    vocab = {token: i for i, token in enumerate(tokens)}
    read_as = {
        pre: read(write_vocabulary(tmp_path / f"{pre}.gguf", tokens, merges, types, pre), len(tokens))
        for pre in PRE_NAMES
    }

    def pieces(pre, text):
        return [tokens[i] for i in read_as[pre].encode(text, add_special_tokens=False)]

    # GPT-2 keeps a run of digits (with its space) as one piece; SmolLM2 and Qwen2 split every
    # digit off first; Llama 3 takes digits three at a time and never with a space.
    assert pieces("gpt-2", "12345") == ["12", "345"] and pieces("gpt-2", " 2024") == ["Ġ2024"]
    for pre in ("smollm", "qwen2"):
        assert pieces(pre, "12345") == list("12345") and pieces(pre, " 2024") == ["Ġ", "2", "0", "2", "4"]
    assert pieces("llama-bpe", "12345") == ["12", "3", "4", "5"] and pieces("llama-bpe", " 2024") == ["Ġ", "202", "4"]
    assert read_as["llama-bpe"].encode(UNMERGED, add_special_tokens=False) == [vocab[UNMERGED]]
    assert len(read_as["qwen2"].encode(UNMERGED)) > 1
    assert read_as["llama-bpe"].encode("hi")[0] == 0 and read_as["llama-bpe"].add_bos
    assert read_as["qwen2"].encode("hi")[0] != 0 and not read_as["qwen2"].add_bos
    # The key wins over the pre-tokenizer's default.
    no_bos = read(
        write_vocabulary(tmp_path / "nb.gguf", tokens, merges, types, "llama-bpe", add_bos=False), len(tokens)
    )
    assert no_bos.encode("hi") == read_as["llama-bpe"].encode("hi", add_special_tokens=False)


def test_special_tokens_end_of_generation_and_user_defined_text(tmp_path, vocabulary):
    tokens, merges, types = vocabulary
    template = "{% for m in messages %}{{ m['content'] }}<|eot_id|>{% endfor %}"
    tokenizer = read(
        write_vocabulary(tmp_path / "v.gguf", tokens, merges, types, "gpt-2", template=template), len(tokens)
    )
    assert tokenizer.chat_template == template
    # EOS (1) and <|eot_id|> (typed NORMAL, recognised by its text as llama.cpp does).
    assert tokenizer.end_of_generation == {1, 2}
    ids = tokenizer.encode("hi<|eot_id|><ünï></s>")
    assert ids[-3:] == [2, 3, 1]
    # Control tokens are left out of the text; the user-defined one decodes to itself, not to the
    # bytes the byte-level alphabet maps its characters to.
    assert tokenizer.decode(ids) == "hi<ünï>"


def test_a_file_without_a_vocabulary_has_no_tokenizer(tmp_path):
    writer = gguf.GGUFWriter(str(tmp_path / "none.gguf"), arch="llama")
    writer.add_tokenizer_model("none")
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file, writer.close):
        step()
    assert read(str(tmp_path / "none.gguf"), 10) is None


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(pre="tekken"), "tokenizer.ggml.pre 'tekken' is not supported"),
        (dict(model="rwkv"), "tokenizer.ggml.model 'rwkv' is not supported"),
        (dict(model="llama"), "tokenizer.ggml.scores"),
        (dict(merges=["h zq"]), "tokenizer.ggml.merges entry 0 'h zq' needs 'zq'"),
        (dict(merges=["hello"]), "entry 0 'hello' is not two tokens"),
        (dict(vocab_size=5), "the tokenizer has"),
        (dict(bos=10**6), "tokenizer.ggml.bos_token_id 1000000 is outside the vocabulary"),
        (dict(tokens="duplicate"), "tokenizer.ggml.tokens repeats a token"),
    ],
)
def test_bad_tokenizer_data_is_refused_by_name(tmp_path, vocabulary, change, message):
    tokens, merges, types = vocabulary
    tokens = list(tokens)
    if change.pop("tokens", None):
        tokens[5] = tokens[6]
    merges = change.pop("merges", merges)
    vocab_size = change.pop("vocab_size", len(tokens))
    pre = change.pop("pre", "gpt-2")
    path = write_vocabulary(tmp_path / "bad.gguf", tokens, merges, types, pre, **change)
    with pytest.raises(ModelFileError, match=message.replace("(", r"\(").replace("'", "'")):
        read(path, vocab_size)


# -- SentencePiece (tokenizer.ggml.model "llama") ------------------------------------------------


@pytest.fixture(scope="module")
def spm_vocabulary():
    """tokens, scores, token types as llama.cpp's converter writes a SentencePiece vocabulary:
    <unk>, <s>, </s>, the 256 <0xXX> byte tokens, then pieces (with U+2581 for a space) scored by
    rank, trained on CORPUS; a user-defined token last."""
    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False)
    trained.train_from_iterator(CORPUS * 20, trainer)
    vocab = trained.get_vocab()
    pieces = sorted(vocab, key=vocab.get)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces + ["<tool>"]
    scores = [0.0] * 259 + [-float(rank) for rank in range(len(pieces))] + [0.0]
    types = [T.UNKNOWN, T.CONTROL, T.CONTROL] + [T.BYTE] * 256 + [T.NORMAL] * len(pieces) + [T.USER_DEFINED]
    return tokens, scores, [int(t) for t in types]


def write_spm(path, tokens, scores, types, **keys):
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    if "add_space_prefix" in keys:
        writer.add_add_space_prefix(keys.pop("add_space_prefix"))
    if "add_bos" in keys:
        writer.add_add_bos_token(keys.pop("add_bos"))
    assert not keys
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file, writer.close):
        step()
    return str(path)


SPM_TEXTS = TEXTS + CORPUS + ["<s>hi</s> there<tool> x", "<tool>", "hello<s>world", "ünïcødé ☃ 🚀"]


@pytest.mark.parametrize("prefix", [True, False])
def test_sentencepiece_ids_equal_llama_cpps_algorithm(tmp_path, spm_vocabulary, prefix):
    tokens, scores, types = spm_vocabulary
    tokenizer = read(write_spm(tmp_path / "spm.gguf", tokens, scores, types, add_space_prefix=prefix), len(tokens))
    reference = LlamaCppSPM(tokens, scores, types, bos_id=1, add_space_prefix=prefix)
    for text in SPM_TEXTS:
        assert tokenizer.encode(text) == reference.encode(text), text
        assert tokenizer.encode(text, add_special_tokens=False) == reference.encode(text, add_special=False), text
    assert tokenizer.add_bos and tokenizer.bos_token_id == 1 and tokenizer.end_of_generation == {2}


def test_sentencepiece_merges_bytes_and_decoding_by_hand(tmp_path, spm_vocabulary):
    tokens, scores, types = spm_vocabulary
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = read(write_spm(tmp_path / "spm.gguf", tokens, scores, types), len(tokens))
    # A space in front, every space a U+2581; a word of the corpus is one piece.
    word = next(t for t in tokens[259:] if t.startswith("\u2581") and len(t) > 4 and t[1:].isalpha())
    assert tokenizer.encode(word[1:], add_special_tokens=False) == [vocab[word]]
    # A character no piece holds falls back to its UTF-8 bytes.
    assert tokenizer.encode("☃", add_special_tokens=False) == [vocab["\u2581"]] + [
        vocab[f"<0x{b:02X}>"] for b in "☃".encode()
    ]
    # Decoding: spaces back, bytes fused into their character, the prefix's space dropped, <s> left out.
    for text in ["hello world", "ünïcødé ☃ 🚀", "  two  spaces", "x\ny"]:
        assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.decode(tokenizer.encode("a<tool>b")) == "a<tool> b"  # as llama.cpp: b had its own prefix


def test_a_sentencepiece_file_without_bos_by_default_or_scores(tmp_path, spm_vocabulary):
    tokens, scores, types = spm_vocabulary
    no_bos = read(write_spm(tmp_path / "nb.gguf", tokens, scores, types, add_bos=False), len(tokens))
    assert no_bos.encode("hi")[0] != 1
    with pytest.raises(ModelFileError, match="tokenizer.ggml.scores must be"):
        read(write_spm(tmp_path / "short.gguf", tokens, scores[:-1], types), len(tokens))
