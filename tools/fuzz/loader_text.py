"""The loader fuzzer's texts for tokenizers (tools/fuzz/fuzz_loaders.py): random Unicode without lone
surrogates, long runs, control characters and the chat specials, mutated in place; and the
"tokenizer" kind's mutations of its vocabulary (a GGUF file's tokenizer data, a tokenizer.json's
added tokens, merges and pre-tokenizer)."""

import json
import random

from loader_formats import STRING, Input
from loader_mutate_gguf import find_kv, mutate_tokenizer

# At most this many characters in a text: a run of 20,000 is long enough to find a slow path.
MAX_TEXT = 1 << 15
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|eot_id|>", "<s>", "</s>", "<unk>", "<tool>", "<|ü|>")
SPECIALS += ("<|im_", "end|>", "<|endoftext|", "<<|im_end|>>")
PIECES = (
    " ", "  ", "\t", "\n", "\r\n", "\n\n\n", "\u00a0", "\u3000", "\u2028", "\ufeff", "\u200b", "\u200d",
    "it's", "I'LL", "we've", "'s", "123", "1234567", "٣٤", "３", "½", "Hello", "héllo", "ﬁ", "é", "e\u0301",
    "日本語", "한국어", "Ελληνικά", "русский", "עברית", "العربية", "हिन्दी", "ไทย", "👩‍💻", "🇫🇷", "👍🏽",
    "\U0001f600", "\U0010ffff", "\ufffd", "\uffff", "\ue000", "Ġ", "▁", "Ċ", "ĉ", "<0x41>", "\x00", "\x1b[0m",
    "\x7f", "\x85", "\x0b\x0c", "...", "!!!", "--", "$$", "~^|<=>", "\\", '"', "'", "`",
)  # fmt: skip


def random_character(rng: random.Random) -> str:
    """Any code point but a surrogate, most often from the planes text uses."""
    while True:
        code = rng.choice((rng.randrange(0x80), rng.randrange(0x800), rng.randrange(0x10000), rng.randrange(0x110000)))
        if not 0xD800 <= code <= 0xDFFF:
            return chr(code)


def random_piece(rng: random.Random) -> str:
    choice = rng.randrange(6)
    if choice == 0:
        return rng.choice(SPECIALS)
    if choice == 1:
        return rng.choice(PIECES) * rng.choice((1, 1, 2, 3, 100, 1000, 20000))
    if choice == 2:
        return random_character(rng) * rng.choice((1, 2, 1000, 20000))
    if choice == 3:
        return "".join(random_character(rng) for _ in range(rng.randint(1, 16)))
    return rng.choice(PIECES)


def mutate_text(rng: random.Random, text: str) -> str:
    """A piece inserted, a run deleted, duplicated or replaced by random characters; the text cut."""
    position = rng.randrange(len(text) + 1)
    end = min(len(text), position + rng.choice((1, 2, 8, 64, 1000)))
    operation = rng.randrange(5)
    if operation <= 1:
        text = text[:position] + random_piece(rng) + text[position:]
    elif operation == 2:
        text = text[:position] + text[end:]
    elif operation == 3:
        text = text[:end] + text[position:end] + text[end:]
    else:
        text = text[:position] + "".join(random_character(rng) for _ in range(end - position)) + text[end:]
    return text[:MAX_TEXT]


def mutate_tokenizer_input(rng: random.Random, item: Input) -> str:
    """The text (70%), or the vocabulary: a GGUF file's tokenizer data and pre-tokenizer, a
    tokenizer.json's added tokens and merges."""
    doc = item.doc
    if rng.random() < 0.7:
        doc.text = mutate_text(rng, doc.text)
        return "text"
    if doc.vocab is not None:
        if rng.random() < 0.3:
            kv = find_kv(doc.vocab, b"tokenizer.ggml.pre")
            if kv is not None:
                kv[1], kv[2] = STRING, rng.choice((b"llama-bpe", b"qwen2", b"smollm", b"gpt-2", b"default", b"x"))
            return "pre-tokenizer"
        return mutate_tokenizer(rng, doc.vocab)
    return _mutate_tokenizer_json(rng, doc)


def _mutate_tokenizer_json(rng: random.Random, doc) -> str:
    try:
        value = json.loads(doc.tokenizer_json)
    except (ValueError, RecursionError):
        return "tokenizer.json unchanged"
    if not isinstance(value, dict) or not isinstance(value.get("model"), dict):
        return "tokenizer.json unchanged"
    operation = rng.randrange(3)
    if operation == 0:
        added = value.setdefault("added_tokens", [])
        if isinstance(added, list):
            content = rng.choice((random_piece(rng)[:20], rng.choice(SPECIALS), random_character(rng) * 2))
            entry = {"id": len(value["model"].get("vocab", {})) + len(added), "content": content, "single_word": False}
            entry |= {"lstrip": False, "rstrip": False, "normalized": False, "special": rng.random() < 0.5}
            added.append(entry)
    elif operation == 1 and isinstance(value["model"].get("merges"), list):
        vocab = list(value["model"].get("vocab", {}))
        if vocab:
            first, second = rng.choice(vocab), rng.choice(vocab)
            merge = (
                [first, second]
                if value["model"]["merges"][:1] and isinstance(value["model"]["merges"][0], list)
                else None
            )
            value["model"]["merges"].append(merge or f"{first} {second}")
            value["model"]["vocab"].setdefault(first + second, len(vocab))
    else:
        pre = value.get("pre_tokenizer")
        if isinstance(pre, dict):
            pre[rng.choice(("trim_offsets", "use_regex"))] = rng.random() < 0.5
    doc.tokenizer_json = json.dumps(value).encode()
    return "tokenizer.json"
