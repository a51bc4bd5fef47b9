"""The tokenizer a GGUF file carries (tokenizer.ggml.*), for byte-level BPE vocabularies
(tokenizer.ggml.model "gpt2": GPT-2, Llama 3, SmolLM2, Qwen2) and SentencePiece ones (model
"llama": Llama 2, TinyLlama, Mistral; _spm_model and _spm_text_rules), built with HF `tokenizers`
so that its ids are llama.cpp's (src/llama-vocab.cpp, which this module follows rule by rule;
for byte-level BPE:

- Pre-tokenizer. llama.cpp picks its split regexes by tokenizer.ggml.pre and applies them in
  order, each one splitting every piece the previous ones left into its matches and the text
  between them; the pieces are then mapped to GPT-2's byte-level alphabet. Here: one
  tokenizers Split(regex, "isolated") per llama.cpp regex, then ByteLevel without its own regex
  (PRE_TOKENIZERS lists the names read, with llama.cpp's regexes as it writes them).
- Model. BPE over tokenizer.ggml.tokens and tokenizer.ggml.merges (a merge's rank is its index);
  Llama 3's pre-tokenizer also takes a piece that is a whole token as it is (`ignore_merges`).
- Special tokens. Tokens of type CONTROL, USER_DEFINED or UNKNOWN (tokenizer.ggml.token_type)
  are matched whole in the text before anything else, as llama.cpp does with parse_special;
  control and unknown ones are left out of decoded text, user-defined ones decode to their own
  text. llama.cpp's end-of-generation set (EOS, EOT, EOM and the tokens it recognises by their
  text, such as <|im_end|> and <|eot_id|>) is `end_of_generation`.
- BOS/EOS. tokenizer.ggml.add_bos_token (default: true for Llama 3's pre-tokenizer, as llama.cpp
  has it) adds BOS in front of `encode(text)`, as llama.cpp's tokenize(add_special=true) does;
  `encode(text, add_special_tokens=False)` adds nothing (a rendered chat template holds its own).
  SentencePiece vocabularies add BOS by default, as llama.cpp does.)

What llama.cpp does and this does not: its clean-up of spaces around punctuation when it
detokenizes a whole sequence for some pre-tokenizers (not SmolLM2's, Llama 3's or Qwen2's); its
per-model token attributes (lstrip/rstrip for Phi-3 and some BERTs). Qwen2's tokenizer.json
normalizes text to NFC, which llama.cpp does not: ids follow llama.cpp."""

import dataclasses

from gpt.errors import ModelFileError
from gpt.tokenizer import HFTokenizer

# GPT-2's split (llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT2 and the second regex of several others).
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
# Llama 3's, as llama.cpp adapts it (the case-insensitive contractions spelt out).
_LLAMA3_SPLIT = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2's: Llama 3's with single digits.
_QWEN2_SPLIT = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclasses.dataclass(frozen=True)
class PreTokenizer:
    """One of llama.cpp's pre-tokenizer types: `family` is its LLAMA_VOCAB_PRE_TYPE_ name,
    `splits` its regexes in order, `ignore_merges` and `add_bos` its defaults for those flags."""

    family: str
    splits: tuple[str, ...]
    ignore_merges: bool = False
    add_bos: bool = False


_DEFAULT = PreTokenizer("DEFAULT", (r"[\p{P}\$\+<=>\^~\|]+", _GPT2_SPLIT, r"\p{N}+", r"[0-9][0-9][0-9]"))
_GPT2 = PreTokenizer("GPT2", (_GPT2_SPLIT,))
_SMOLLM = PreTokenizer("SMOLLM", (r"\p{N}", _GPT2_SPLIT))
_LLAMA3 = PreTokenizer("LLAMA3", (_LLAMA3_SPLIT,), ignore_merges=True, add_bos=True)
_QWEN2 = PreTokenizer("QWEN2", (_QWEN2_SPLIT,))
# tokenizer.ggml.pre -> pre-tokenizer, for the names llama.cpp gives the families read here. A file
# without the key gets llama.cpp's default (older GPT-2 conversions).
PRE_TOKENIZERS = {
    None: _DEFAULT,
    "default": _DEFAULT,
    "gpt-2": _GPT2,
    "smollm": _SMOLLM,
    "llama3": _LLAMA3,
    "llama-v3": _LLAMA3,
    "llama-bpe": _LLAMA3,
    "qwen2": _QWEN2,
    "deepseek-r1-qwen": _QWEN2,
}

# llama.cpp's token types (gguf.TokenType): NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6.
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED = 1, 2, 3, 4, 5
# SentencePiece's space, U+2581 (llama_escape_whitespace).
_SPM_SPACE = "\u2581"
# Tokens llama.cpp ends generation at by their text (llama_vocab::impl::load, special_eog_ids),
# besides the EOS, EOT and EOM ids the metadata names.
_END_OF_GENERATION_TEXTS = frozenset(
    (
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "<|end_of_text|>",
        "<end_of_utterance>",
    )
)


class GGUFTokenizer(HFTokenizer):
    """A GGUF file's byte-level BPE tokenizer (an HFTokenizer), with what llama.cpp reads beside
    the vocabulary: `bos_token_id`, `eos_token_id` (None when the file names none), `add_bos`,
    `end_of_generation` (frozenset of ids), `chat_template` (tokenizer.chat_template or None), and
    `bos_token` / `eos_token` (their text, "" when absent), as a chat template expects them."""

    def __init__(
        self,
        tokenizer,
        *,
        bos_token_id: int | None,
        eos_token_id: int | None,
        add_bos: bool,
        end_of_generation: frozenset[int],
        chat_template: str | None,
        raw_pieces: dict[int, str],
    ):
        super().__init__(tokenizer)
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.add_bos = add_bos
        self.end_of_generation = end_of_generation
        self.chat_template = chat_template
        self.bos_token = tokenizer.id_to_token(bos_token_id) if bos_token_id is not None else ""
        self.eos_token = tokenizer.id_to_token(eos_token_id) if eos_token_id is not None else ""
        # User-defined tokens whose text the byte-level decoder would change (non-ASCII ones): id -> text.
        self._raw_pieces = raw_pieces

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`, special tokens in it matched whole; with `add_special_tokens`, BOS
        first when the file says to add it (llama.cpp's tokenize(text, add_special, parse_special=true))."""
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids) -> str:
        """The text of `ids`, control tokens left out (llama.cpp's detokenize without `special`)."""
        ids = [int(i) for i in ids]
        if not self._raw_pieces or not any(i in self._raw_pieces for i in ids):
            return self._tokenizer.decode(ids)
        text, run = [], []
        for i in ids:
            if i in self._raw_pieces:
                text.append(self._tokenizer.decode(run))
                text.append(self._raw_pieces[i])
                run = []
            else:
                run.append(i)
        text.append(self._tokenizer.decode(run))
        return "".join(text)


def read_tokenizer(meta, path: str, vocab_size: int) -> GGUFTokenizer | None:
    """The tokenizer of a GGUF file whose metadata `meta` (gguf_file._Metadata) holds a vocabulary:
    byte-level BPE (tokenizer.ggml.model "gpt2") or SentencePiece's (model "llama": Llama 2,
    TinyLlama, Mistral; see _spm_model); None when it holds none ("none", "no_vocab" or no
    tokenizer.ggml.model). Raises ModelFileError naming the key for another tokenizer model, a
    pre-tokenizer not in PRE_TOKENIZERS, and tokenizer data that does not make a tokenizer of
    `vocab_size` tokens."""
    model = meta.get("tokenizer.ggml.model", str, required=False)
    if model in (None, "none", "no_vocab"):
        return None
    if model not in ("gpt2", "llama"):
        raise ModelFileError(
            f"{path}: tokenizer.ggml.model {model!r} is not supported (byte-level BPE 'gpt2' and "
            "SentencePiece 'llama' are read)"
        )
    spm = model == "llama"
    pre = None
    if not spm:
        pre_name = meta.get("tokenizer.ggml.pre", str, required=False)
        if pre_name not in PRE_TOKENIZERS:
            known = ", ".join(repr(name) for name in PRE_TOKENIZERS if name is not None)
            raise ModelFileError(f"{path}: tokenizer.ggml.pre {pre_name!r} is not supported (known: {known})")
        pre = PRE_TOKENIZERS[pre_name]
    tokens, merges, types, vocab = read_vocabulary(meta, path, vocab_size, merges_required=not spm)

    special = {}
    for key in ("bos", "eos", "eot", "eom", "unknown"):
        value = meta.get(f"tokenizer.ggml.{key}_token_id", int, required=False)
        if value is not None and not 0 <= value < vocab_size:
            raise ModelFileError(
                f"{path}: tokenizer.ggml.{key}_token_id {value} is outside the vocabulary of {vocab_size}"
            )
        special[key] = value
    add_bos = meta.get("tokenizer.ggml.add_bos_token", bool, required=False)
    # llama.cpp's defaults: BOS for SentencePiece and Llama 3's pre-tokenizer.
    add_bos = (spm or pre.add_bos) if add_bos is None else add_bos
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", bool, required=False))
    for flag, key in ((add_bos, "bos"), (add_eos, "eos")):
        if flag and special[key] is None:
            raise ModelFileError(
                f"{path}: tokenizer.ggml.add_{key}_token is set but tokenizer.ggml.{key}_token_id is missing"
            )
    end_ids = {special[key] for key in ("eos", "eot", "eom") if special[key] is not None}
    end_ids.update(vocab[text] for text in _END_OF_GENERATION_TEXTS if text in vocab)
    template = meta.get("tokenizer.chat_template", str, required=False)

    from tokenizers import AddedToken, Tokenizer, processors

    types = types or [1] * len(tokens)
    # llama.cpp treats an end-of-generation token as a control token whatever its type says.
    control = [i for i, t in enumerate(types) if t in (_CONTROL, _UNKNOWN) or i in end_ids]
    user = [i for i, t in enumerate(types) if t == _USER_DEFINED and i not in end_ids]
    kind = "SentencePiece" if spm else "BPE"
    try:
        if spm:
            tokenizer = Tokenizer(_spm_model(meta, path, tokens, types, vocab, special["unknown"]))
            _spm_text_rules(tokenizer, meta)
        else:
            tokenizer = Tokenizer(_bpe_model(tokens, merges, vocab, pre, path))
            _bpe_text_rules(tokenizer, pre)
        # normalized=False: matched against the text as it is, before any normalizer.
        tokenizer.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in control])
        tokenizer.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i in user])
        single, added = "$A", []
        if add_bos:
            single = f"{tokens[special['bos']]} {single}"
            added.append((tokens[special["bos"]], special["bos"]))
        if add_eos:
            single = f"{single} {tokens[special['eos']]}"
            added.append((tokens[special["eos"]], special["eos"]))
        if added:
            tokenizer.post_processor = processors.TemplateProcessing(
                single=single, special_tokens=list(dict.fromkeys(added))
            )
        # The byte-level decoder maps a non-ASCII character of a user-defined token to a byte.
        raw_pieces = {} if spm else {i: tokens[i] for i in user if tokenizer.decode([i]) != tokens[i]}
    except ModelFileError:
        raise
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as e:  # noqa: B036 -- tokenizers' Rust panics are pyo3 PanicException, a BaseException
        raise ModelFileError(
            f"{path}: tokenizer.ggml.tokens, tokenizer.ggml.{'scores' if spm else 'merges'} and "
            f"tokenizer.ggml.token_type do not make a {kind} tokenizer: {type(e).__name__}: {e}"
        ) from None
    return GGUFTokenizer(
        tokenizer,
        bos_token_id=special["bos"],
        eos_token_id=special["eos"],
        add_bos=add_bos,
        end_of_generation=frozenset(end_ids),
        chat_template=template,
        raw_pieces=raw_pieces,
    )


def _bpe_model(tokens, merges, vocab, pre: PreTokenizer, path: str):
    from tokenizers import models

    return models.BPE(vocab=vocab, merges=_merge_pairs(merges, vocab, path), ignore_merges=pre.ignore_merges)


def _bpe_text_rules(tokenizer, pre: PreTokenizer) -> None:
    """llama.cpp's pre-tokenizer regexes, then GPT-2's byte-level alphabet both ways."""
    from tokenizers import Regex, decoders, pre_tokenizers

    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(split), behavior="isolated") for split in pre.splits]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()


def _spm_model(meta, path: str, tokens, types, vocab, unknown):
    """SentencePiece as llama.cpp runs it (llm_tokenizer_spm), as a tokenizers BPE: llama.cpp
    starts from the text's UTF-8 characters and repeatedly merges the adjacent pair whose
    concatenation is the token of highest tokenizer.ggml.scores score (leftmost first on a tie);
    a character that is no token becomes its bytes' <0xXX> tokens. BPE with every split (a, b) of
    every normal token ranked by that token's score, highest first, merges the same pairs in the
    same order, and its byte fallback is the same. (Where two different pairs make tokens of equal
    score, llama.cpp takes the leftmost pair and BPE the pair ranked first; real vocabularies give
    each token its own score.)"""
    from tokenizers import models

    scores = meta.get("tokenizer.ggml.scores", list)
    if len(scores) != len(tokens) or not all(isinstance(v, float) for v in scores):
        raise ModelFileError(
            f"{path}: tokenizer.ggml.scores must be {len(tokens)} floats, one per token (SentencePiece's piece scores)"
        )
    mergeable = [i for i, t in enumerate(types) if t in (_NORMAL, _USER_DEFINED, _UNUSED)]
    candidates = []
    for i in mergeable:
        token = tokens[i]
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                candidates.append((-scores[i], i, vocab[left], left, right))
    candidates.sort()
    merges = [(left, right) for _, _, _, left, right in candidates]
    return models.BPE(
        vocab=vocab,
        merges=merges,
        unk_token=tokens[unknown] if unknown is not None else None,
        byte_fallback=True,
        fuse_unk=True,
    )


def _spm_text_rules(tokenizer, meta) -> None:
    """llama.cpp's SentencePiece text handling: with tokenizer.ggml.add_space_prefix (default true)
    a space in front of each piece of text (the text's start, and after each special token), every
    space as U+2581; decoding maps U+2581 back to a space, <0xXX> tokens to their bytes, and drops
    the one leading space the prefix added."""
    from tokenizers import decoders, normalizers

    prefix = meta.get("tokenizer.ggml.add_space_prefix", bool, required=False)
    prefix = True if prefix is None else prefix
    steps = [normalizers.Prepend(_SPM_SPACE)] if prefix else []
    tokenizer.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", _SPM_SPACE)])
    decode = [decoders.Replace(_SPM_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        decode.append(decoders.Strip(" ", 1, 0))
    tokenizer.decoder = decoders.Sequence(decode)


def read_vocabulary(meta, path: str, vocab_size: int, merges_required: bool = True):
    """tokenizer.ggml.tokens, .merges and .token_type (None when absent) of a GGUF file, each
    checked for its element type, and the token -> id map; raises ModelFileError naming the key
    for wrong types, a token count unlike `vocab_size`, a token_type array of another length or
    a repeated token. (The GPT-2 reader in gguf_file.py shares it.)"""
    tokens = meta.get("tokenizer.ggml.tokens", list)
    merges = meta.get("tokenizer.ggml.merges", list, required=merges_required) or []
    types = meta.get("tokenizer.ggml.token_type", list, required=False)
    for key, values, kind in (
        ("tokenizer.ggml.tokens", tokens, str),
        ("tokenizer.ggml.merges", merges, str),
        ("tokenizer.ggml.token_type", types or [], int),
    ):
        wrong = next((v for v in values if not isinstance(v, kind) or isinstance(v, bool)), None)
        if wrong is not None:
            raise ModelFileError(f"{path}: {key} holds {wrong!r}, expected an array of {kind.__name__}")
    if len(tokens) != vocab_size:
        raise ModelFileError(f"{path}: the tokenizer has {len(tokens)} tokens, the model a vocabulary of {vocab_size}")
    if types is not None and len(types) != len(tokens):
        raise ModelFileError(f"{path}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ModelFileError(f"{path}: tokenizer.ggml.tokens repeats a token")
    return tokens, merges, types, vocab


def _merge_pairs(merges: list[str], vocab: dict[str, int], path: str) -> list[tuple[str, str]]:
    """tokenizer.ggml.merges as (left, right) pairs. llama.cpp splits each entry at its first space
    after the first character; what tokenizers' BPE requires (and otherwise reports by a Rust
    panic, not an error) is checked here: left, right and left + right are tokens."""
    pairs = []
    for i, merge in enumerate(merges):
        cut = merge.find(" ", 1)
        if cut < 0:
            raise ModelFileError(f"{path}: tokenizer.ggml.merges entry {i} {merge!r} is not two tokens")
        left, right = merge[:cut], merge[cut + 1 :]
        for token in (left, right, left + right):
            if token not in vocab:
                raise ModelFileError(
                    f"{path}: tokenizer.ggml.merges entry {i} {merge!r} needs {token!r}, which is not in "
                    "tokenizer.ggml.tokens"
                )
        pairs.append((left, right))
    return pairs
