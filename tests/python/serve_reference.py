"""`python -m gpt serve`, with the numpy paged step (paged_reference.py) standing in for a model that
has no compiled `step_batch`: python serve_reference.py serve --port P ..."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpt import cli  # noqa: E402
from paged_reference import ReferencePagedModel  # noqa: E402

_load_model = cli._load_model


def _load_paged_model():
    model = _load_model()
    return model if hasattr(model, "step_batch") else ReferencePagedModel(model)


if __name__ == "__main__":
    cli._load_model = _load_paged_model
    cli.run()
