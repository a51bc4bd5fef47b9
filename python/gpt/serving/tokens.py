"""A prompt's text into token ids for the server: the tokenizer's encoding that lets other threads
run (text_encoder), how much text a token can stand for (token_reach: a prompt too long for the
context is refused before it is tokenized), and a list of ids as an array a slice at a time."""

import contextlib
import dataclasses
import json
from collections.abc import Callable

import numpy as np


def token_array(ids: list[int]) -> np.ndarray:
    """`np.asarray(ids)` a slice at a time: over a 2 MiB body's million ids one call holds the GIL
    for about 60 ms, and the event loop's thread would wait that long (the engine's check of a
    token array is vectorized)."""
    step = 1 << 16
    if not len(ids):
        return np.zeros(0, np.int64)
    return np.concatenate([np.asarray(ids[i : i + step], dtype=np.int64) for i in range(0, len(ids), step)])


def text_encoder(tokenizer) -> Callable[[str], list[int]]:
    """`tokenizer.encode`, or a function that gives the same ids through its `tokenizers` backend's
    `encode_batch_fast` when the backend agrees with `encode` on probe texts (special tokens, BOS,
    spaces, non-ASCII; a wrapper that adds tokens of its own keeps its `encode`). The fast batch
    call keeps no offsets and lets other threads run while it encodes: during a 1.9 MB SmolLM2
    prompt /health answered within 21-60 ms, where through `encode` it waited 5.9 s (in a plain
    thread, `encode` and `encode_batch` leave the GIL to others at most every 200 ms or so, the
    fast call every 35 ms; freeing `encode`'s result alone holds it 80 ms), and over 1.9 MB of
    text it peaks at 249 MB more where `encode` peaks at 349 MB more."""
    backend = getattr(tokenizer, "backend", None)
    batch = getattr(backend, "encode_batch_fast", None)
    if batch is None:
        return tokenizer.encode

    def encode(text: str) -> list[int]:
        return batch([text])[0].ids

    try:
        agrees = all(encode(text) == list(tokenizer.encode(text)) for text in _probe_texts(tokenizer, backend))
    except Exception:  # noqa: BLE001 -- any failure to compare means: keep tokenizer.encode
        agrees = False
    return encode if agrees else tokenizer.encode


def _probe_texts(tokenizer, backend) -> list[str]:
    """Texts on which `text_encoder` compares the backend with `tokenizer.encode`."""
    texts = ["", "Hello, world!", "  two spaces,\ta tab\r\n", "naïve café, 日本語 😀", "3.14159 * 2**10 = x"]
    specials = [getattr(tokenizer, name, "") for name in ("bos_token", "eos_token")]
    with contextlib.suppress(Exception):
        added = backend.get_added_tokens_decoder()
        specials += [added[i].content for i in sorted(added)[:64]]
    texts += [f"{special}user\nHi!{special}" for special in dict.fromkeys(specials) if special]
    return texts


# Normalizers that never make text shorter, and pre-tokenizers that keep every character (Split's
# "Removed", Whitespace and BERT's pre-tokenizer drop some): through these, a token's own length
# bounds the characters of text it stands for.
_LENGTHENING_NORMALIZERS = {"Sequence", "Prepend", "Replace", "Lowercase", "NFD"}
_KEEPING_PRE_TOKENIZERS = {"Sequence", "ByteLevel", "Split", "Digits", "Metaspace", "Punctuation", "UnicodeScripts"}
# Bytes that UTF-8 text never holds: a vocabulary needs no token for them.
_NOT_IN_UTF8 = frozenset({0xC0, 0xC1, *range(0xF5, 0x100)})


@dataclasses.dataclass(frozen=True)
class TokenReach:
    """What a tokenizer's token can stand for: at most `chars` characters of text, not counting the
    `dropped` characters, which make no token at all (control bytes missing from a byte-level
    vocabulary: SmolLM2's has no token for "\x04", so a million of them are no token)."""

    chars: int
    dropped: str = ""

    def counted(self, text: str) -> int:
        """The characters of `text` that some token must stand for."""
        return len(text) - sum(text.count(c) for c in self.dropped)


def token_reach(tokenizer) -> TokenReach | None:
    """How much text one token of `tokenizer` can stand for, where its kind proves a bound: bytes
    (one character), or a `tokenizers` BPE whose every character is some token (its byte-level
    alphabet, or byte fallback; byte-level bytes without a token are `dropped` when they are whole
    characters) through normalizers and pre-tokenizers that drop nothing (the longest token's
    length). None where a character could vanish unaccounted or merge into one unknown token
    (fuse_unk), so that no length of text is provably too many tokens."""
    from gpt.tokenizer import ByteTokenizer

    if isinstance(tokenizer, ByteTokenizer):
        return TokenReach(1)  # a character is at least one byte
    backend = getattr(tokenizer, "backend", None)
    model = getattr(backend, "model", None)
    if type(model).__name__ != "BPE":
        return None
    try:
        normalizer = json.loads(backend.normalizer.__getstate__()) if backend.normalizer is not None else None
        pre_tokenizer = json.loads(backend.pre_tokenizer.__getstate__()) if backend.pre_tokenizer is not None else None
        vocab = backend.get_vocab(with_added_tokens=True)
    except Exception:  # noqa: BLE001 -- a backend this does not understand proves nothing
        return None
    normalizers, pre_tokenizers = _steps(normalizer, "normalizers"), _steps(pre_tokenizer, "pretokenizers")
    if not vocab or not _keeps_every_character(normalizers, pre_tokenizers):
        return None
    longest = max(len(token) for token in vocab)
    if any(step["type"] == "ByteLevel" for step in pre_tokenizers):
        missing = {b for b, c in _byte_level_alphabet().items() if c not in vocab} - _NOT_IN_UTF8
        # A character with one byte left makes a token of it; one with none left is dropped whole,
        # which only an ASCII character can be while every continuation byte has its token.
        if not missing & set(range(0x80, 0xC0)):
            return TokenReach(longest, "".join(chr(b) for b in sorted(missing) if b < 0x80))
    if model.byte_fallback and all(f"<0x{b:02X}>" in vocab for b in set(range(256)) - _NOT_IN_UTF8):
        return TokenReach(longest)
    if model.unk_token in vocab and not model.fuse_unk:
        return TokenReach(longest)
    return None


def _keeps_every_character(normalizers: list[dict], pre_tokenizers: list[dict]) -> bool:
    """Whether these steps (_steps) leave every character of a text for some token."""
    if not all(step.get("type") in _LENGTHENING_NORMALIZERS for step in normalizers):
        return False
    for step in normalizers:  # a Replace that shortens text, or matches a regex, may shorten it
        pattern = step.get("pattern", {})
        if step["type"] == "Replace" and not len(pattern.get("String") or "") <= len(step.get("content", "")):
            return False
    for step in pre_tokenizers:
        if step.get("type") not in _KEEPING_PRE_TOKENIZERS or step.get("behavior") == "Removed":
            return False
    return True


def _byte_level_alphabet() -> dict[int, str]:
    """GPT-2's byte-level alphabet: the character that stands for each byte (printable Latin-1
    bytes for themselves, the others for U+0100 on, in order)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(others)}


def _steps(spec: dict | None, key: str) -> list[dict]:
    """A tokenizers normalizer's or pre-tokenizer's JSON as its list of steps, Sequences flattened."""
    if spec is None:
        return []
    if spec.get("type") == "Sequence":
        return [step for inner in spec.get(key, []) for step in _steps(inner, key)]
    return [spec]
