"""gpt.ModelFileError: the one exception for a model file that cannot be read (GGUF, safetensors,
config.json, the tokenizer data a GGUF file carries)."""


class ModelFileError(ValueError):
    """A model file is malformed, or asks for something the loaders refuse. The message is in the
    file's own terms: it names the file, the metadata key, tensor or field, and what was expected.
    A ValueError, so that code catching ValueError for bad input keeps catching it."""
