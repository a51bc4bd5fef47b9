"""Token log-probabilities: computed from logits (the engine) and written in OpenAI's shapes (the server).

A token's logprob is the log-softmax, at its position, of the logits divided by the request's
temperature (temperature 0, greedy, and 1 leave them as they are): OpenAI's definition, the
distribution the token was drawn from before top-k and top-p cut it (tokens they exclude keep a
finite logprob). Computed in float64 from the model's float32 logits, as the sampler computes
its probabilities.
"""

import dataclasses
import json
import re

import numpy as np

from gpt.detokenizer import IncrementalDetokenizer

# Most likely alternatives a token's entry lists at most: chat's `top_logprobs` bound (OpenAI's);
# completions' `logprobs` takes at most MAX_COMPLETION_LOGPROBS.
MAX_TOP_LOGPROBS = 20
MAX_COMPLETION_LOGPROBS = 5
# Prompt positions whose log-softmax is computed at once when scoring a prompt (echo): bounds the
# float64 temporaries to this many rows of the vocabulary (256 x 49152 x 8 bytes: 100 MB).
PROMPT_ROWS_AT_ONCE = 256


@dataclasses.dataclass(frozen=True)
class TokenLogprob:
    """A token's logprob and the `top` most likely tokens at its position, most likely first, as
    (token id, logprob) pairs (ties in token id order)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


def log_softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    """log softmax(logits / temperature) over the last axis, float64 (temperature 0: of the logits)."""
    scaled = np.asarray(logits, dtype=np.float64)
    if temperature > 0 and temperature != 1:
        scaled = scaled / temperature
    shifted = scaled - scaled.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _top(logprobs: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values of each row of `logprobs` [rows, vocab], largest first."""
    k = min(k, logprobs.shape[-1])
    if k == 0:
        return np.zeros((logprobs.shape[0], 0), np.int64)
    part = np.argpartition(-logprobs, k - 1, axis=-1)[:, :k]
    values = np.take_along_axis(logprobs, part, axis=-1)
    # Largest first; equal values by token id (lexsort's last key is the primary one).
    order = np.lexsort((part, -values), axis=-1)
    return np.take_along_axis(part, order, axis=-1)


def token_logprob(logits: np.ndarray, temperature: float, token: int, k: int) -> TokenLogprob:
    """The entry of `token` drawn from `logits` [vocab] with `k` alternatives."""
    row = log_softmax(logits, temperature)
    top = _top(row[None, :], k)[0]
    return TokenLogprob(int(token), float(row[token]), tuple((int(t), float(row[t])) for t in top))


def prompt_logprobs(logits: np.ndarray, prompt, temperature: float, k: int) -> list[TokenLogprob | None]:
    """The entries of a prompt's tokens from the logits of every position [len(prompt), vocab]
    (position i's logits predict token i + 1); the first token, predicted by nothing, has None."""
    prompt = np.asarray(prompt, dtype=np.int64)
    entries: list[TokenLogprob | None] = [None]
    for first in range(0, len(prompt) - 1, PROMPT_ROWS_AT_ONCE):
        last = min(first + PROMPT_ROWS_AT_ONCE, len(prompt) - 1)
        rows = log_softmax(logits[first:last], temperature)
        chosen = prompt[first + 1 : last + 1]
        values = rows[np.arange(len(chosen)), chosen]
        top = _top(rows, k)
        top_values = np.take_along_axis(rows, top, axis=-1)
        for token, value, ids, lps in zip(
            chosen.tolist(), values.tolist(), top.tolist(), top_values.tolist(), strict=True
        ):
            entries.append(TokenLogprob(token, value, tuple(zip(ids, lps, strict=True))))
    return entries


# -- OpenAI's shapes --------------------------------------------------------------------------------


class TokenStrings:
    """The text and the bytes of single tokens of a tokenizer, for logprobs entries (cached).

    A token's bytes are its own: a byte-level BPE token's through GPT-2's byte alphabet, a byte
    fallback token's `<0xAB>`, a byte vocabulary's byte; other tokens are their decoded text in
    UTF-8. A token whose bytes are not UTF-8 on their own (part of a character) is written as OpenAI
    writes one, "bytes:\\xe6\\x97"."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._cache: dict[int, tuple[str, list[int]]] = {}
        self._backend = getattr(tokenizer, "backend", None)
        self._byte_level = self._backend is not None and _decodes_byte_level(self._backend)
        self._from_alphabet = {c: b for b, c in _byte_level_alphabet().items()} if self._byte_level else {}
        self._bytes_vocabulary = self._backend is None and getattr(tokenizer, "vocab_size", None) == 256

    @property
    def tokenizer(self):
        return self._tokenizer

    def text(self, token: int) -> str:
        return self._entry(token)[0]

    def bytes(self, token: int) -> list[int]:
        return self._entry(token)[1]

    def _entry(self, token: int) -> tuple[str, list[int]]:
        entry = self._cache.get(token)
        if entry is None:
            raw = self._token_bytes(token)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = "bytes:" + "".join(f"\\x{b:02x}" for b in raw)
            entry = self._cache[token] = (text, list(raw))
        return entry

    def _token_bytes(self, token: int) -> bytes:
        if self._tokenizer is None:
            return b""
        if self._bytes_vocabulary:
            return bytes([token])
        if self._backend is not None:
            piece = self._backend.id_to_token(token)
            if piece is not None:
                if match := re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", piece):
                    return bytes([int(match.group(1), 16)])
                if self._byte_level and all(c in self._from_alphabet for c in piece):
                    return bytes(self._from_alphabet[c] for c in piece)
        return self._tokenizer.decode([token]).encode("utf-8")


def _decodes_byte_level(backend) -> bool:
    try:
        decoder = json.loads(backend.decoder.__getstate__()) if backend.decoder is not None else None
    except Exception:  # noqa: BLE001 -- a decoder this does not understand: decode tokens as text
        return False
    steps = decoder.get("decoders", [decoder]) if decoder else []
    return any(step.get("type") == "ByteLevel" for step in steps)


def _byte_level_alphabet() -> dict[int, str]:
    """GPT-2's byte-level alphabet: the character that stands for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(others)}


def text_offsets(tokenizer, tokens) -> list[int]:
    """Where each token's text starts in the text of `tokens` (a character still open when a token
    comes starts where the text handed out so far ends), as completions' `text_offset` counts."""
    if tokenizer is None:
        return [0] * len(tokens)
    detokenizer, offsets, length = IncrementalDetokenizer(tokenizer), [], 0
    for token in tokens:
        offsets.append(length)
        length += len(detokenizer.add(token))
    return offsets


def chat_content(entries: list[TokenLogprob], strings: TokenStrings) -> list[dict]:
    """Chat's `logprobs.content`: one {token, logprob, bytes, top_logprobs} per token."""

    def item(token: int, logprob: float) -> dict:
        return {"token": strings.text(token), "logprob": logprob, "bytes": strings.bytes(token)}

    return [item(e.token, e.logprob) | {"top_logprobs": [item(t, lp) for t, lp in e.top]} for e in entries]


def completion_logprobs(
    tokens: list[int], entries: list[TokenLogprob | None], offsets: list[int], strings: TokenStrings
) -> dict:
    """Completions' `logprobs` of `tokens`: {tokens, token_logprobs, top_logprobs, text_offset}.
    Each top_logprobs dict holds the most likely tokens and the chosen one (so up to `logprobs` + 1,
    as OpenAI's does); a token without an entry (a prompt's first, with echo) has None for both."""
    values, tops = [], []
    for token, entry in zip(tokens, entries, strict=True):
        values.append(entry.logprob if entry is not None else None)
        if entry is None:
            tops.append(None)
            continue
        top = {strings.text(t): lp for t, lp in entry.top}
        top.setdefault(strings.text(token), entry.logprob)
        tops.append(top)
    return {
        "tokens": [strings.text(t) for t in tokens],
        "token_logprobs": values,
        "top_logprobs": tops,
        "text_offset": list(offsets),
    }
