"""llama.cpp's byte-level BPE tokenization written out plainly, the reference the tokenizer tests
compare gpt.gguf_tokenizer with (which builds its tokenizer from HF `tokenizers` parts instead).

It follows src/llama-vocab.cpp step by step: special tokens (types CONTROL, USER_DEFINED, UNKNOWN,
and the end-of-generation tokens llama.cpp recognises by their text) split the text first,
longest first (tokenizer_st_partition with parse_special); each remaining fragment is split by
the pre-tokenizer's regexes in order, every regex cutting each piece into its matches and the
text between them (unicode_regex_split); each piece is mapped to GPT-2's byte-to-unicode
alphabet and merged pair by pair, lowest merge rank first and leftmost among equal ranks
(llm_tokenizer_bpe_session::tokenize); a symbol left that is no token becomes one token per
byte. The regexes run on the `regex` module, not on tokenizers' Oniguruma."""

import regex

# Tokens llama.cpp makes control tokens by their text (llama_vocab::impl::load, special_eog_ids),
# whatever type the file gives them.
END_OF_GENERATION_TEXTS = (
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


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> character table: printable bytes stand for themselves, the rest are moved
    to 256 and up."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


class LlamaCppBPE:
    """Tokenizes as llama.cpp's llm_tokenizer_bpe does, for a vocabulary given as GGUF holds it."""

    def __init__(self, tokens, merges, token_types, splits, ignore_merges=False, bos_id=None, add_bos=False):
        self.vocab = {token: i for i, token in enumerate(tokens)}
        self.ranks = {}
        for rank, merge in enumerate(merges):
            cut = merge.find(" ", 1)
            self.ranks[(merge[:cut], merge[cut + 1 :])] = rank
        special = [
            token
            for token, t in zip(tokens, token_types, strict=True)
            if t in (2, 3, 4) or token in END_OF_GENERATION_TEXTS
        ]
        self.special = sorted(special, key=len, reverse=True)
        self.splits = [regex.compile(pattern) for pattern in splits]
        self.ignore_merges = ignore_merges
        self.prefix = [bos_id] if add_bos else []
        self.byte_chars = bytes_to_unicode()

    def encode(self, text: str) -> list[int]:
        fragments = [(text, False)]
        for special in self.special:
            parts = []
            for fragment, is_token in fragments:
                if is_token:
                    parts.append((fragment, True))
                    continue
                start = 0
                while (found := fragment.find(special, start)) >= 0:
                    if found > start:
                        parts.append((fragment[start:found], False))
                    parts.append((special, True))
                    start = found + len(special)
                if start < len(fragment):
                    parts.append((fragment[start:], False))
            fragments = parts
        ids = list(self.prefix)
        for fragment, is_token in fragments:
            if is_token:
                ids.append(self.vocab[fragment])
            else:
                for piece in self.pieces(fragment):
                    ids += self.merge(piece)
        return ids

    def pieces(self, text: str) -> list[str]:
        """unicode_regex_split: every regex splits every piece into matches and the text between."""
        pieces = [text]
        for pattern in self.splits:
            out = []
            for piece in pieces:
                position = 0
                for match in pattern.finditer(piece):
                    if match.start() > position:
                        out.append(piece[position : match.start()])
                    if match.end() > match.start():
                        out.append(match.group())
                    position = match.end()
                if position < len(piece):
                    out.append(piece[position:])
            pieces = out
        return pieces

    def merge(self, piece: str) -> list[int]:
        word = "".join(self.byte_chars[b] for b in piece.encode("utf-8"))
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        symbols = list(word)
        while len(symbols) > 1:
            ranked = [(self.ranks.get((a, b)), i) for i, (a, b) in enumerate(zip(symbols, symbols[1:], strict=False))]
            ranked = [(rank, i) for rank, i in ranked if rank is not None]
            if not ranked:
                break
            _, i = min(ranked)
            symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
        ids = []
        for symbol in symbols:
            if symbol in self.vocab:
                ids.append(self.vocab[symbol])
            else:
                ids += [self.vocab[c] for c in symbol if c in self.vocab]
        return ids
