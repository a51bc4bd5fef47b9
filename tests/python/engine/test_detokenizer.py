"""gpt.detokenizer.IncrementalDetokenizer: its pieces, joined, are the whole list decoded at once,
no piece ends inside a character, and the work per token does not grow with the text."""

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from gpt.detokenizer import IncrementalDetokenizer
from gpt.engine.requests import TextTracker
from gpt.tokenizer import ByteTokenizer, HFTokenizer

# Text with one-, two-, three- and four-byte UTF-8 characters.
CORPUS = "naïve café — 日本語のテキスト, emoji 🙂🚀 and plain ascii words " * 40


def byte_level_bpe(vocab_size: int = 400) -> HFTokenizer:
    """A small byte-level BPE (GPT-2's kind) trained on CORPUS: its tokens split some multi-byte
    characters across tokens and merge others into one."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator([CORPUS], trainer)
    return HFTokenizer(tokenizer)


class CountingTokenizer:
    """Counts the tokens it is asked to decode."""

    def __init__(self, inner):
        self.inner, self.decoded = inner, 0

    def decode(self, ids):
        self.decoded += len(ids)
        return self.inner.decode(ids)


def pieces_of(tokenizer, tokens):
    detokenizer = IncrementalDetokenizer(tokenizer)
    pieces = [detokenizer.add(t) for t in tokens]
    return pieces, detokenizer.flush()


def token_lists(tokenizer, vocab_size, rng):
    """Encoded text (valid UTF-8 throughout) and random ids (invalid byte sequences, characters cut
    short, including at the very end)."""
    text = CORPUS[: int(rng.integers(50, len(CORPUS)))]
    yield tokenizer.encode(text)
    for _ in range(10):
        yield [int(t) for t in rng.integers(0, vocab_size, int(rng.integers(1, 300)))]


@pytest.mark.parametrize("kind", ["bytes", "byte-level BPE"])
def test_pieces_join_to_the_whole_decode_and_never_end_inside_a_character(kind):
    tokenizer = ByteTokenizer() if kind == "bytes" else byte_level_bpe()
    rng = np.random.default_rng(0)
    for tokens in token_lists(tokenizer, tokenizer.vocab_size, rng):
        pieces, rest = pieces_of(tokenizer, tokens)
        assert "".join(pieces) + rest == tokenizer.decode(tokens)
        assert not any(piece.endswith("\ufffd") for piece in pieces)


def test_a_character_split_across_tokens_comes_out_whole_once_its_last_byte_arrives():
    tokens = list("é🙂".encode())  # 2 + 4 bytes, one token each
    pieces, rest = pieces_of(ByteTokenizer(), tokens)
    assert pieces == ["", "é", "", "", "", "🙂"] and rest == ""
    pieces, rest = pieces_of(ByteTokenizer(), tokens[:-1])  # the emoji never finishes
    assert pieces == ["", "é", "", "", ""] and rest == "\ufffd"


def test_work_per_token_does_not_grow_with_the_text():
    # Whole-list decoding would decode n(n+1)/2 tokens for n tokens: 500,500 here.
    counting = CountingTokenizer(byte_level_bpe())
    tokens = [int(t) for t in np.random.default_rng(1).integers(0, 400, 1000)]
    pieces_of(counting, tokens)
    assert counting.decoded < 10 * len(tokens)


def test_text_tracker_cuts_at_a_stop_string_split_across_tokens_and_ignores_what_follows():
    tracker = TextTracker(ByteTokenizer(), ("café",))
    handed_out, stopped = [], False
    for token in "the café is closed".encode():
        piece, stopped = tracker.add(token)
        handed_out.append(piece)
        if stopped:
            break
    assert stopped and tracker.text == "the "
    assert "".join(handed_out) + tracker.flush() == "the "


@pytest.mark.parametrize("stops", [(), ("xyz",)])
def test_text_tracker_flush_gives_the_unfinished_last_character(stops):
    """The text of a request that ends inside a character is its tokens' whole decoding, U+FFFD
    and all (it once lost what the detokenizer's flush handed over past the held-back text)."""
    tracker = TextTracker(ByteTokenizer(), stops)
    tokens = list("ok 🙂".encode())[:-2]
    handed_out = [tracker.add(token)[0] for token in tokens]
    assert "".join(handed_out) + tracker.flush() == ByteTokenizer().decode(tokens) == "ok \ufffd"
