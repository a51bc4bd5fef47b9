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

import contextlib
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


def carries_vocabulary(meta) -> bool:
    """Whether a GGUF file's metadata `meta` holds a vocabulary: not when tokenizer.ggml.model is
    llama.cpp's "none" or "no_vocab" (benchmark files feed token ids), or missing."""
    return meta.get("tokenizer.ggml.model", str, required=False) not in (None, "none", "no_vocab")


def read_tokenizer(meta, path: str, vocab_size: int) -> GGUFTokenizer | None:
    """The tokenizer of a GGUF file whose metadata `meta` (gguf_file._Metadata) holds a vocabulary:
    byte-level BPE (tokenizer.ggml.model "gpt2") or SentencePiece's (model "llama": Llama 2,
    TinyLlama, Mistral; see _spm_model); None when it holds none ("none", "no_vocab" or no
    tokenizer.ggml.model). Raises ModelFileError naming the key for another tokenizer model, a
    pre-tokenizer not in PRE_TOKENIZERS, and tokenizer data that does not make a tokenizer of
    `vocab_size` tokens."""
    if not carries_vocabulary(meta):
        return None
    model = meta.get("tokenizer.ggml.model", str, required=False)
    if model not in ("gpt2", "llama"):
        raise ModelFileError(
            f"{path}: tokenizer.ggml.model {model!r} is not supported (byte-level BPE 'gpt2' and "
            "SentencePiece 'llama' are read)"
        )
    spm = model == "llama"
    pre = None if spm else _pre_tokenizer(meta, path)
    tokens, merges, types, vocab = read_vocabulary(meta, path, vocab_size, merges_required=not spm)
    special = _special_token_ids(meta, path, vocab_size)
    add_bos, add_eos = _bos_and_eos_flags(meta, path, special, spm, pre)
    end_ids = {special[key] for key in ("eos", "eot", "eom") if special[key] is not None}
    end_ids.update(vocab[text] for text in _END_OF_GENERATION_TEXTS if text in vocab)
    template = meta.get("tokenizer.chat_template", str, required=False)

    from tokenizers import AddedToken, Tokenizer

    types = types or [1] * len(tokens)
    # llama.cpp treats an end-of-generation token as a control token whatever its type says.
    control = [i for i, t in enumerate(types) if t in (_CONTROL, _UNKNOWN) or i in end_ids]
    user = [i for i, t in enumerate(types) if t == _USER_DEFINED and i not in end_ids]
    with building_tokenizer(path, "scores" if spm else "merges", "SentencePiece" if spm else "BPE"):
        if spm:
            tokenizer = Tokenizer(_spm_model(meta, path, tokens, types, vocab, special["unknown"]))
            _spm_text_rules(tokenizer, meta)
        else:
            tokenizer = Tokenizer(_bpe_model(tokens, merges, vocab, pre, path))
            _bpe_text_rules(tokenizer, pre)
        # normalized=False: matched against the text as it is, before any normalizer.
        tokenizer.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in control])
        tokenizer.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i in user])
        _add_bos_and_eos(tokenizer, tokens, special, add_bos, add_eos)
        # The byte-level decoder maps a non-ASCII character of a user-defined token to a byte.
        raw_pieces = {} if spm else {i: tokens[i] for i in user if tokenizer.decode([i]) != tokens[i]}
    return GGUFTokenizer(
        tokenizer,
        bos_token_id=special["bos"],
        eos_token_id=special["eos"],
        add_bos=add_bos,
        end_of_generation=frozenset(end_ids),
        chat_template=template,
        raw_pieces=raw_pieces,
    )


@contextlib.contextmanager
def building_tokenizer(path: str, table: str, kind: str):
    """Around the `tokenizers` calls that build a file's tokenizer: what they raise, a Rust panic
    included, becomes a ModelFileError naming the keys whose data (tokenizer.ggml.`table`: merges
    or scores) did not make a `kind` tokenizer. ModelFileErrors and interrupts pass unchanged."""
    try:
        yield
    except (ModelFileError, KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as e:  # noqa: B036 -- tokenizers' Rust panics are pyo3 PanicException, a BaseException
        raise ModelFileError(
            f"{path}: tokenizer.ggml.tokens, tokenizer.ggml.{table} and tokenizer.ggml.token_type do not make "
            f"a {kind} tokenizer: {type(e).__name__}: {e}"
        ) from None


def _pre_tokenizer(meta, path: str) -> PreTokenizer:
    """The byte-level BPE pre-tokenizer tokenizer.ggml.pre names; ModelFileError for one not in PRE_TOKENIZERS."""
    pre_name = meta.get("tokenizer.ggml.pre", str, required=False)
    if pre_name not in PRE_TOKENIZERS:
        known = ", ".join(repr(name) for name in PRE_TOKENIZERS if name is not None)
        raise ModelFileError(f"{path}: tokenizer.ggml.pre {pre_name!r} is not supported (known: {known})")
    return PRE_TOKENIZERS[pre_name]


def _special_token_ids(meta, path: str, vocab_size: int) -> dict:
    """{"bos", "eos", "eot", "eom", "unknown"}: the token id of each tokenizer.ggml.*_token_id, None when
    absent; ModelFileError for one outside the vocabulary."""
    special = {}
    for key in ("bos", "eos", "eot", "eom", "unknown"):
        value = meta.get(f"tokenizer.ggml.{key}_token_id", int, required=False)
        if value is not None and not 0 <= value < vocab_size:
            raise ModelFileError(
                f"{path}: tokenizer.ggml.{key}_token_id {value} is outside the vocabulary of {vocab_size}"
            )
        special[key] = value
    return special


def _bos_and_eos_flags(meta, path: str, special: dict, spm: bool, pre: PreTokenizer | None) -> tuple[bool, bool]:
    """Whether encoding adds BOS and EOS (tokenizer.ggml.add_bos_token/add_eos_token, else llama.cpp's
    defaults); ModelFileError when one is set without its token id."""
    add_bos = meta.get("tokenizer.ggml.add_bos_token", bool, required=False)
    # llama.cpp's defaults: BOS for SentencePiece and Llama 3's pre-tokenizer.
    add_bos = (spm or pre.add_bos) if add_bos is None else add_bos
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", bool, required=False))
    for flag, key in ((add_bos, "bos"), (add_eos, "eos")):
        if flag and special[key] is None:
            raise ModelFileError(
                f"{path}: tokenizer.ggml.add_{key}_token is set but tokenizer.ggml.{key}_token_id is missing"
            )
    return add_bos, add_eos


def _add_bos_and_eos(tokenizer, tokens, special: dict, add_bos: bool, add_eos: bool):
    """`tokenizer`'s post-processor adds BOS before and EOS after each encoding, as the flags say."""
    from tokenizers import processors

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
    each token its own score.) The splits are found in time linear in the vocabulary's size
    (_spm_merges)."""
    from tokenizers import models

    scores = meta.get("tokenizer.ggml.scores", list)
    if len(scores) != len(tokens) or not all(isinstance(v, float) for v in scores):
        raise ModelFileError(
            f"{path}: tokenizer.ggml.scores must be {len(tokens)} floats, one per token (SentencePiece's piece scores)"
        )
    nan = next((i for i, v in enumerate(scores) if v != v), None)
    if nan is not None:  # NaN orders nothing: llama.cpp's merge queue would compare it arbitrarily
        raise ModelFileError(f"{path}: tokenizer.ggml.scores[{nan}] (token {tokens[nan][:40]!r}) is NaN")
    return models.BPE(
        vocab=vocab,
        merges=_spm_merges(tokens, scores, types, path),
        unk_token=tokens[unknown] if unknown is not None else None,
        byte_fallback=True,
        fuse_unk=True,
    )


# The splits of SentencePiece tokens are found by hashing every prefix and suffix of every token
# (a polynomial hash in uint64 arithmetic, which numpy wraps modulo 2^64: no division anywhere)
# and looking the keys up among the whole tokens' keys: time linear in the vocabulary's
# characters, where slicing each token at each cut is quadratic (10 tokens of 1,000,000
# characters did not convert in 150 s). Every split found is checked against the strings
# themselves, so a collision (which a hostile file can make, modulo 2^64) costs time, bounded
# below, never a wrong merge.
_HASH_BASE = 0x9E3779B97F4A7C15  # odd, so that it has an inverse modulo 2^64
# Tokens are hashed in runs of about this many characters (the numpy temporaries' size).
_HASH_CHUNK = 1 << 20
# What the splits may add, against the vocabulary's characters: the merges' text (each merge is
# passed to tokenizers as its two strings) at most this many times the vocabulary's characters,
# plus some slack. A vocabulary trained by BPE has a few splits per token (1.7 characters of
# merges per vocabulary character for 32,000 pieces trained on Python's sources); a family like
# "a", "aa", "aaa", ... has a split at every cut of every token, merges cubic in its length, and
# is refused.
_MERGE_TEXT_PER_CHARACTER = 16
_MERGE_TEXT_SLACK = 1 << 20


def _spm_merges(tokens, scores, types, path: str) -> list[tuple[str, str]]:
    """Every split (left, right) of every normal, user-defined or unused token where both halves
    are tokens, ranked by the token's score (highest first), then the token's id, then the left
    half's id (what sorting (-score, id, left id) gave). Raises ModelFileError naming
    tokenizer.ggml.tokens when the merges' text would pass the bound above."""
    import numpy as np

    count = len(tokens)
    if count == 0:
        return []
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=count)
    # A token type is any u32/i64 the file holds: compared in Python, not as int64.
    kinds = frozenset((_NORMAL, _USER_DEFINED, _UNUSED))
    mergeable = np.fromiter((t in kinds for t in types), dtype=bool, count=count) & (lengths >= 2)
    longest = int(lengths.max())
    power = np.ones(longest + 1, dtype=np.uint64)
    inverse = np.ones(longest + 1, dtype=np.uint64)
    step, mask = pow(_HASH_BASE, -1, 1 << 64), (1 << 64) - 1
    for k in range(1, longest + 1):
        power[k] = int(power[k - 1]) * _HASH_BASE & mask
        inverse[k] = int(inverse[k - 1]) * step & mask
    ends = np.cumsum(lengths)
    runs = []  # (first token, end token) runs of about _HASH_CHUNK characters
    first = 0
    while first < count:
        last = max(int(np.searchsorted(ends, ends[first] - lengths[first] + _HASH_CHUNK, "right")), first + 1)
        runs.append((first, last))
        first = last

    def sums(first: int, last: int):
        """(the run's prefix sums: entry i hashes its characters before i, each weighted by
        base^(its offset in its token), the tokens' starts in it, each character's token)."""
        run = lengths[first:last]
        codes = np.frombuffer("".join(tokens[first:last]).encode("utf-32-le"), dtype="<u4").astype(np.uint64)
        codes += 1  # so that "\x00" weighs something: "b" and "b\x00" hash apart
        starts = np.concatenate(([0], np.cumsum(run)))
        owner = np.repeat(np.arange(last - first), run)
        offset = np.arange(len(codes)) - starts[owner]
        weighted = np.cumsum(codes * power[offset], dtype=np.uint64)
        return np.concatenate((np.zeros(1, dtype=np.uint64), weighted)), starts, owner

    keys = []
    for first, last in runs:
        total, starts, _ = sums(first, last)
        keys.append(total[starts[1:]] - total[starts[:-1]])
    keys = np.concatenate(keys)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]

    def lookup(wanted):
        """Token ids whose key is `wanted`, -1 where none is."""
        at = np.minimum(np.searchsorted(sorted_keys, wanted), count - 1)
        return np.where(sorted_keys[at] == wanted, order[at], -1)

    found = []
    text = 0
    bound = _MERGE_TEXT_PER_CHARACTER * int(ends[-1]) + _MERGE_TEXT_SLACK
    for first, last in runs:
        total, starts, owner = sums(first, last)
        # The cuts: every character of a mergeable token but its first.
        cut = np.flatnonzero(mergeable[first:last][owner] & (np.arange(len(owner)) > starts[owner]))
        start = starts[owner[cut]]
        left = lookup(total[cut] - total[start])
        hit = left >= 0
        cut, start, left = cut[hit], start[hit], left[hit]
        offset = cut - start
        end = start + lengths[owner[cut] + first]
        right = lookup((total[end] - total[cut]) * inverse[offset])
        token = owner[cut] + first
        same = (right >= 0) & (lengths[left] == offset) & (lengths[np.maximum(right, 0)] == lengths[token] - offset)
        token, left, right = token[same], left[same], right[same]
        text += int(lengths[token].sum())
        if text > bound:
            raise ModelFileError(
                f"{path}: tokenizer.ggml.tokens: the SentencePiece tokens up to token {int(token[-1])} split into "
                f"pairs of tokens whose text passes {bound} characters ({_MERGE_TEXT_PER_CHARACTER} per character "
                f"of the vocabulary and {_MERGE_TEXT_SLACK} more): a vocabulary of nested repeats, not a trained one"
            )
        found.append((token, left, right))
    token, left, right = (np.concatenate(parts) for parts in zip(*found, strict=True))
    rank = np.lexsort((left, token, -np.asarray(scores, dtype=np.float64)[token]))
    merges = []
    for i, a, b in zip(token[rank].tolist(), left[rank].tolist(), right[rank].tolist(), strict=True):
        whole, head, tail = tokens[i], tokens[a], tokens[b]
        if whole.startswith(head) and whole.endswith(tail):  # a hash collision is no merge
            merges.append((head, tail))
    return merges


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


# Bounds on a vocabulary's text, in UTF-8 bytes. The longest tokens of the vocabularies llama.cpp
# reads are well under 1 KiB (runs of spaces, "=" or "-" in code-trained ones: 128 to 256 bytes);
# 4 KiB is generous and still bounds what per-token work costs. The whole vocabulary: Llama 3's
# 128,256 tokens hold under 1 MiB, Gemma 3's 262,144 about 2.5 MiB; 16 MiB is 6 times the largest.
MAX_TOKEN_BYTES = 4096
MAX_VOCABULARY_BYTES = 16 << 20
# Tokens matched whole in the text (control, user-defined, unknown: tokenizers' added tokens) cost
# far more: tokenizers builds an Aho-Corasick automaton over them (AddedVocabulary's split tries),
# which peaks at about 78 bytes of memory per byte of their text and keeps 16 (40 MB of control
# tokens took 3.77 GB with the BPE model and Python's copies). Real vocabularies hold a few KiB
# of them (Llama 3's 256 reserved tokens: 6 KiB; Gemma 3's 6,000 <unusedN> and markup tokens:
# under 100 KiB); 1 MiB bounds the automaton near 80 MB.
MAX_MATCHED_WHOLE_BYTES = 1 << 20


def read_vocabulary(meta, path: str, vocab_size: int, merges_required: bool = True):
    """tokenizer.ggml.tokens, .merges and .token_type (None when absent) of a GGUF file, each
    checked for its element type, and the token -> id map; raises ModelFileError naming the key
    for wrong types, a token count unlike `vocab_size`, a token_type array of another length, a
    repeated token, and, naming the token's index, a token longer than MAX_TOKEN_BYTES or a
    vocabulary past MAX_VOCABULARY_BYTES (or its matched-whole tokens past MAX_MATCHED_WHOLE_BYTES).
    (The GPT-2 reader in gguf_file.py shares it.)"""
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
            shown = repr(wrong) if len(repr(wrong)) <= 200 else f"{repr(wrong)[:200]}..."
            raise ModelFileError(f"{path}: {key} holds {shown}, expected an array of {kind.__name__}")
    if len(tokens) != vocab_size:
        raise ModelFileError(f"{path}: the tokenizer has {len(tokens)} tokens, the model a vocabulary of {vocab_size}")
    if types is not None and len(types) != len(tokens):
        raise ModelFileError(f"{path}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    _check_vocabulary_size(tokens, types, path)
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ModelFileError(f"{path}: tokenizer.ggml.tokens repeats a token")
    return tokens, merges, types, vocab


def _check_vocabulary_size(tokens: list[str], types: list[int] | None, path: str) -> None:
    """The bounds above. A token's UTF-8 bytes are at least its characters and at most four times
    as many, so only tokens and totals near a bound are encoded to count them."""
    lengths = list(map(len, tokens))
    if max(lengths, default=0) * 4 > MAX_TOKEN_BYTES:
        for i, token in enumerate(tokens):
            if lengths[i] * 4 > MAX_TOKEN_BYTES and (size := _utf8_bytes(token)) > MAX_TOKEN_BYTES:
                raise ModelFileError(token_too_long(path, i, size))
    matched_whole = (_CONTROL, _USER_DEFINED, _UNKNOWN)
    for whole_only, bound, chosen in (
        (False, MAX_VOCABULARY_BYTES, range(len(tokens))),
        (True, MAX_MATCHED_WHOLE_BYTES, [i for i, t in enumerate(types or ()) if t in matched_whole]),
    ):
        if sum(lengths[i] for i in chosen) * 4 <= bound:
            continue
        total = 0
        for i in chosen:
            total += _utf8_bytes(tokens[i])
            if total > bound:
                raise ModelFileError(vocabulary_too_large(path, i, whole_only))


def token_too_long(path: str, index: int, size: int) -> str:
    """The message for tokenizer.ggml.tokens[index] of `size` bytes, past MAX_TOKEN_BYTES."""
    return (
        f"{path}: tokenizer.ggml.tokens[{index}] is {size} bytes long, more than the {MAX_TOKEN_BYTES} a token may "
        "be (the longest tokens of real vocabularies are a few hundred bytes)"
    )


def vocabulary_too_large(path: str, index: int, matched_whole: bool = False) -> str:
    """The message for a vocabulary whose tokens pass their bound at tokenizer.ggml.tokens[index]."""
    if matched_whole:
        return (
            f"{path}: tokenizer.ggml.tokens: the control, user-defined and unknown tokens (tokenizer.ggml.token_type "
            f"3, 4 and 2, matched whole in the text) pass {MAX_MATCHED_WHOLE_BYTES} bytes at token {index}; real "
            "vocabularies hold a few KiB of them"
        )
    return (
        f"{path}: tokenizer.ggml.tokens passes {MAX_VOCABULARY_BYTES} bytes at token {index}, more than this loader "
        "reads (the largest real vocabularies hold about 3 MiB)"
    )


def _utf8_bytes(token: str) -> int:
    return len(token.encode("utf-8", "surrogatepass"))


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
