"""A request run alone: the reference the engine's tests compare each request against."""

import numpy as np


def alone(model, prompt, max_tokens):
    """Greedy tokens and the logits each was chosen from, one sequence on the model's own KV cache
    (prefill, then decode; a rolling cache for a windowed model)."""
    cache = model.new_cache()
    logits = [model.prefill(prompt, cache)]
    tokens = [int(np.argmax(logits[0]))]
    while len(tokens) < max_tokens:
        logits.append(model.decode(tokens[-1], cache))
        tokens.append(int(np.argmax(logits[-1])))
    return tokens, logits
