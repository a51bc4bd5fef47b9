"""llama.cpp's SentencePiece tokenizer (src/llama-vocab.cpp: llm_tokenizer_spm_session and the
SPM case of tokenize_impl), written out plainly in Python, apart from gpt.gguf_tokenizer (which
builds a tokenizers BPE instead), to check its ids."""

import heapq


class LlamaCppSPM:
    """`tokens`, `scores` and `types` as a GGUF file holds them (tokenizer.ggml.*)."""

    CONTROL, USER_DEFINED, UNKNOWN = 3, 4, 2

    def __init__(self, tokens, scores, types, bos_id, add_bos=True, add_space_prefix=True):
        self.tokens, self.scores = tokens, scores
        self.ids = {token: i for i, token in enumerate(tokens)}
        self.bos_id, self.add_bos, self.add_space_prefix = bos_id, add_bos, add_space_prefix
        # parse_special: control, user-defined and unknown tokens, longest first.
        specials = [i for i, t in enumerate(types) if t in (self.CONTROL, self.USER_DEFINED, self.UNKNOWN)]
        self.specials = sorted(specials, key=lambda i: -len(tokens[i]))

    def encode(self, text, add_special=True):
        output = [self.bos_id] if add_special and self.add_bos else []
        previous_special = True  # a space prefix in front of the first piece of text
        for piece, token in self._fragments(text):
            if token is not None:
                output.append(token)
                previous_special = True
                continue
            if self.add_space_prefix and previous_special:
                piece = " " + piece
            output.extend(self._session(piece.replace(" ", "\u2581")))
            previous_special = False
        return output

    def _fragments(self, text):
        """(text, None) and ("", special id) pieces, special tokens matched first, longest first."""
        fragments = [(text, None)] if text else []
        for special in self.specials:
            marker, split = self.tokens[special], []
            for piece, token in fragments:
                if token is not None or marker not in piece:
                    split.append((piece, token))
                    continue
                parts = piece.split(marker)
                for k, part in enumerate(parts):
                    if part:
                        split.append((part, None))
                    if k + 1 < len(parts):
                        split.append(("", special))
            fragments = split
        return fragments

    def _session(self, text):
        symbols = [[ch, k - 1, k + 1] for k, ch in enumerate(text)]  # text, prev, next
        if symbols:
            symbols[-1][2] = -1
        queue = []

        def try_add_bigram(left, right):
            if left == -1 or right == -1:
                return
            merged = symbols[left][0] + symbols[right][0]
            token = self.ids.get(merged)
            if token is None:
                return
            # Highest score first; on a tie the leftmost (llm_bigram_spm's comparator).
            heapq.heappush(queue, (-self.scores[token], left, right, len(merged)))

        for k in range(1, len(symbols)):
            try_add_bigram(k - 1, k)
        while queue:
            _, left, right, size = heapq.heappop(queue)
            a, b = symbols[left], symbols[right]
            if not a[0] or not b[0] or len(a[0]) + len(b[0]) != size:
                continue  # one side was merged away since the bigram was queued
            a[0] += b[0]
            b[0] = ""
            a[2] = b[2]
            if b[2] != -1:
                symbols[b[2]][1] = left
            try_add_bigram(a[1], left)
            try_add_bigram(left, a[2])
        output = []
        k = 0 if symbols else -1
        while k != -1:
            piece = symbols[k][0]
            if piece in self.ids:
                output.append(self.ids[piece])
            else:  # byte fallback: <0xXX> per UTF-8 byte
                output.extend(self.ids[f"<0x{byte:02X}>"] for byte in piece.encode("utf-8"))
            k = symbols[k][2]
        return output
