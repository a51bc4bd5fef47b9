"""The small GPT-2 that the GGUF tests write and read, and what llama.cpp's files hold of it: the
tensor types its converter gives, its layout (matmul weights transposed) and the values a file of
each format holds."""

import gguf
import numpy as np

import gpt

CFG = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=96, block_size=32)
IDS = [3, 17, 95, 0, 42, 42, 7, 60, 1, 88, 23]
T = gguf.GGMLQuantizationType
QTYPES = {
    "f32": T.F32,
    "f16": T.F16,
    "bf16": T.BF16,
    "q8_0": T.Q8_0,
    "q4_0": T.Q4_0,
    "q4_1": T.Q4_1,
    "q5_0": T.Q5_0,
    "q5_1": T.Q5_1,
}
# HF GPT-2's Conv1D matmul weights, which llama.cpp stores transposed (torch Linear layout).
MATMUL_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def assert_weights_equal(actual, expected):
    assert actual.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


def gguf_layout(name, array):
    """An HF GPT-2 array in the layout llama.cpp stores it (numpy order, ne reversed)."""
    return np.ascontiguousarray(array.T) if name.endswith(MATMUL_SUFFIXES) else array


def expected_kind(name, array, fmt):
    """The tensor type llama.cpp's converter / llama-quantize --pure give each tensor."""
    return T.F32 if array.ndim == 1 or name == "transformer.wpe.weight" else QTYPES[fmt]


def dequantized_as_written(weights, fmt):
    """What a file of this format holds, by gguf's own quantize/dequantize, in HF layout."""
    out = {}
    for name, array in weights.items():
        kind = expected_kind(name, array, fmt)
        stored = gguf.quants.dequantize(gguf.quants.quantize(gguf_layout(name, array), kind), kind)
        out[name] = gguf_layout(name, stored.astype(np.float32))  # the transpose is its own inverse
    return out
