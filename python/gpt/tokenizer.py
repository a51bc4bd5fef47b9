"""Tokenizers: bytes for vocab-256 models, HF tokenizer.json (the `tokenizers` package) otherwise."""

import os

from gpt import model_files
from gpt.errors import ModelFileError


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255 (the embedded model's vocabulary)."""

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        # A sampled byte sequence need not be valid UTF-8; never fail on it.
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


class HFTokenizer:
    """A HF `tokenizers` tokenizer: a tokenizer.json as shipped with HF checkpoints (a path), or
    a `tokenizers.Tokenizer` (GPT.from_gguf builds one from a GGUF file's vocabulary).

    A tokenizer.json is a file from a stranger, read as gpt.model_files reads one: a regular file
    inside its directory (a link out of it, a FIFO or a device is refused), at most
    model_files.MAX_CONFIG_BYTES, UTF-8. gpt.ModelFileError names the file otherwise, and for a
    file that `tokenizers` cannot read; FileNotFoundError when there is none."""

    def __init__(self, source):
        from tokenizers import Tokenizer

        if isinstance(source, Tokenizer):
            self._tokenizer = source
        else:
            path = os.fspath(source)
            text = model_files.read_text(os.path.dirname(path) or ".", os.path.basename(path))
            try:
                self._tokenizer = Tokenizer.from_str(text)
            except (KeyboardInterrupt, SystemExit, GeneratorExit):
                raise
            # tokenizers raises a bare Exception for a malformed file, and a Rust panic as pyo3's
            # PanicException, a BaseException.
            except BaseException as e:  # noqa: B036
                raise ModelFileError(f"{path} is not a readable tokenizer.json: {e}") from None
        self.vocab_size = self._tokenizer.get_vocab_size()

    @property
    def backend(self):
        """The underlying tokenizers.Tokenizer."""
        return self._tokenizer

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text).ids

    def decode(self, ids) -> str:
        return self._tokenizer.decode([int(i) for i in ids])


def tokenizer_for(model_dir: str | None, vocab_size: int):
    """The directory's tokenizer.json when there is one (HFTokenizer refuses one that is not a
    regular file inside it), else bytes for a vocab-256 model."""
    if model_dir is not None and os.path.isdir(model_dir) and model_files.present(model_dir, "tokenizer.json"):
        return HFTokenizer(os.path.join(model_dir, "tokenizer.json"))
    if vocab_size == 256:
        return ByteTokenizer()
    raise ValueError(
        f"no tokenizer: {model_dir or 'the model'} has no tokenizer.json (or GGUF vocabulary) and a vocabulary "
        f"of {vocab_size} is not bytes"
    )
