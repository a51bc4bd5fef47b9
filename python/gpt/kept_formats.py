"""Which format the compiled model keeps a GGUF file's quantized tensors in, and the conversion of
their blocks into it without a float32 copy: how a Q4_K_M file (Q4_K, Q6_K and Q5_0 tensors) runs in
its own precision, each matmul weight in the nearest format the compiler stores (q4_0, q4_1, q8_0).

A q4_K sub-block of 32 weights is a q4_1 block with its scale and min written as products (d times
a 6-bit scale): kept as q4_1 with those products rounded once to fp16, the file's codes unchanged.
q5_0 is a q8_0 block with 5-bit codes: kept exactly. q5_1, q5_K and q6_K hold a min or sub-block
scales that q8_0 cannot: each row is widened and quantized to q8_0, half a step of 1/127 of a block's
largest weight at most, finer than the file's own 5 or 6 bits. A format is kept only in one at
least as precise, never in fewer bits (llama.cpp computes each tensor in its own type)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpt import _gpt

# The formats the compiler stores block-quantized, from the least precise to the most.
KEPT_QUANTIZED = ("q8_0", "q4_0", "q4_1")
_PRECISION = ("q4_0", "q4_1", "q8_0")

# Bytes of one block of 32 weights in each kept format (llama.cpp's layouts).
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20}

# Blocks the compiled model repacks into a kept format itself, sub-block by sub-block, with no copy
# of the tensor in that format (CompiledModel.set_weights' "q4_k"): their type -> the format.
REPACKED_AS = {"q4_k": "q4_1"}
# Bytes and weights of one such block.
_REPACKED_BLOCK = {"q4_k": (144, 256)}

# A GGUF tensor type (gguf.GGMLQuantizationType's name) -> the kept format nearest above it in
# precision: its own, q4_1 for q4_K, q8_0 for the 5- and 6-bit types. Float types are not here:
# they are widened, and quantized by the compiled model into its format.
NEAREST_KEPT = {
    "Q8_0": "q8_0",
    "Q4_0": "q4_0",
    "Q4_1": "q4_1",
    "Q4_K": "q4_1",
    "Q5_0": "q8_0",
    "Q5_1": "q8_0",
    "Q5_K": "q8_0",
    "Q6_K": "q8_0",
}

# The types whose blocks convert to each kept format with no float32 copy of the tensor.
_CONVERTIBLE = {
    "q8_0": frozenset(NEAREST_KEPT),
    "q4_1": frozenset({"Q4_0", "Q4_1", "Q4_K"}),
    "q4_0": frozenset({"Q4_0"}),
}


def convertible(type_name: str, target: str) -> bool:
    """Whether blocks of GGUF type `type_name` convert to kept format `target` without widening."""
    return type_name in _CONVERTIBLE.get(target, ())


def given_format(type_names: Iterable[str], requested: str | None) -> str | None:
    """group_format, or "q4_k" when the weight is kept in q4_1 and every part is q4_K: its blocks are
    then given to the compiled model as the file stores them, and repacked there."""
    types = list(type_names)
    fmt = group_format(types, requested)
    return "q4_k" if fmt == "q4_1" and types and all(t == "Q4_K" for t in types) else fmt


def stored_format(given: str) -> str:
    """The kept format blocks given in `given` (a kept format, or a REPACKED_AS type) are stored in."""
    return REPACKED_AS.get(given, given)


def group_format(type_names: Iterable[str], requested: str | None) -> str | None:
    """The kept format of a compiler weight made of tensors of these GGUF types (q, k and v are one
    fused weight, stored in one format), or None when its parts are widened to float32 and
    converted by the compiled model. `requested` is CompileOptions.weights: "auto" keeps the parts
    in the most precise of their nearest formats (a q4_K q and k with a q6_K v: q8_0), a kept
    format keeps them in it when every part converts, anything else keeps nothing."""
    types = list(type_names)
    if requested == "auto":
        nearest = [NEAREST_KEPT.get(t) for t in types]
        if not types or None in nearest:
            return None
        return max(nearest, key=_PRECISION.index)
    if requested in KEPT_QUANTIZED and types and all(convertible(t, requested) for t in types):
        return requested
    return None


def convert_blocks(blocks: np.ndarray, type_name: str, target: str) -> np.ndarray:
    """Rows of GGUF blocks of `type_name` (uint8 [rows, row bytes]) as rows of `target` blocks:
    the same array when the type is the format, else a new one (see the module docstring).
    Raises ValueError for a pair convertible() refuses, or a scale beyond fp16 or not finite."""
    source = type_name.lower()
    if source == target:
        return blocks
    if not convertible(type_name, target):
        raise ValueError(f"{type_name} blocks are not kept in {target}")
    if target == "q8_0":
        return _gpt.requantize_to_q8_0(source, np.ascontiguousarray(blocks))
    if source == "q4_k":
        return _gpt.transcode_q4_k_to_q4_1(np.ascontiguousarray(blocks))
    return _q4_0_as_q4_1(blocks)


def _q4_0_as_q4_1(blocks: np.ndarray) -> np.ndarray:
    """q4_0 rows as q4_1, exactly: d * (q - 8) is d * q + m with m = -8 d (a power of two times an
    fp16, so exact in fp16), the codes unchanged."""
    rows = blocks.reshape(blocks.shape[0], -1, BLOCK_BYTES["q4_0"])
    out = np.empty((rows.shape[0], rows.shape[1], BLOCK_BYTES["q4_1"]), dtype=np.uint8)
    scale = rows[..., :2].copy().view("<f2")
    out[..., :2] = rows[..., :2]
    out[..., 2:4] = (scale * np.float16(-8)).view(np.uint8)
    out[..., 4:] = rows[..., 2:]
    return out.reshape(blocks.shape[0], -1)


def elements(blocks: np.ndarray | list[np.ndarray], fmt: str) -> int:
    """The weights these rows of `fmt` blocks hold (one array, or a fused weight's parts; `fmt` a
    kept format or a REPACKED_AS type)."""
    parts = blocks if isinstance(blocks, list) else [blocks]
    block_bytes, block_values = _REPACKED_BLOCK.get(fmt, (BLOCK_BYTES.get(fmt, 1), 32))
    return sum(int(part.nbytes) for part in parts) // block_bytes * block_values
