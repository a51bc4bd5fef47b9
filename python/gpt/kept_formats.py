"""Which format the compiled model keeps a GGUF file's quantized tensors in, given to it as the
file's blocks and converted there, a block at a time as it repacks them, with no copy (float32 or
kept format) of the tensor (cc/kernels/BlockTranscoding.h): how a Q4_K_M file (Q4_K, Q6_K and Q5_0 tensors) runs in
its own precision, each matmul weight in the nearest format the compiler stores (gpt.config.WEIGHT_FORMATS).

A q4_K tensor is kept as q4_k, its own numbers (each super-block's fp16 d and dmin, each sub-block's
6-bit scale and min, the codes), 4.625 bits per weight; asked for a 4-bit format with a min per
block of 32, each sub-block becomes such a block with its scale and min (d times a 6-bit scale)
rounded once to fp16. A q5_K tensor is kept as q5_k, q4_k's numbers with 5-bit codes, 5.625 bits per
weight. A q6_K tensor is kept as q6_k, its own numbers (each super-block's fp16 d, each run of 16
weights' int8 scale, the 6-bit codes), 6.5625 bits per weight, the file's.
q5_0 and q5_1 tensors are kept as q5_0 and q5_1, the file's numbers (each block's fp16 scale, and
min, and the 5-bit codes in q5_k's lane words), 5.5 and 6 bits per weight; a fused weight with q5_0
and q5_1 parts is kept as q5_1 (a q5_0 block is a q5_1 block with a min of -16 d). Asked for q8_0, q5_0
becomes a q8_0 block exactly; q5_1, q5_K and q6_K hold a min or sub-block scales that q8_0 cannot:
each block is widened and quantized to q8_0, half a step of 1/127 of a block's largest weight at
most, finer than the file's own 5 or 6 bits. A format is kept only in one at least as precise, never
in fewer bits (llama.cpp computes each tensor in its own type)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from gpt import _gpt


class FormatRow(NamedTuple):
    """One row of the compiler's weight-format table (cc/kernels/WeightFormats.h)."""

    name: str
    block_values: int  # weights per block (1 for f32 and bf16)
    block_bytes: int  # bytes of one block, as llama.cpp lays it out
    rows_per_word: int  # rows of K one 32-bit lane word holds (0 where codes span words: q6_k, q5_k)
    has_mins: bool  # a min beside each block's scale
    head_format: str  # the format a model in this one stores its [V, D] tables and LM head in
    converts_from: tuple[str, ...]  # GGUF block types set_weights repacks into it, its own first
    precision: int  # higher is more precise
    scale_rows: int  # 16-bit scale values the model stores per block and column (q4_k: 10 per 256 weights)
    code_bits: int  # bits of one weight's code in the lanes (32 / rows_per_word; q6_k: 6, q5_k: 5)

    @property
    def stored_bytes_per_weight(self) -> float:
        """Bytes the compiled model holds per weight in this format: its lane words and its scales
        (q4_k: 4.625 bits, the file's 4.5 with each sub-block's 6-bit scale and min in a byte; q6_k:
        6.5625, the file's)."""
        return self.code_bits / 8 + 2 * self.scale_rows / self.block_values


# Every format the compiler stores matmul weights in, in its table's order.
FORMAT_ROWS = tuple(FormatRow(*row) for row in _gpt.weight_formats())
_ROWS = {row.name: row for row in FORMAT_ROWS}

# The formats the compiler stores block-quantized (codes and per-block scales), in table order,
# and the same from the least precise to the most.
KEPT_QUANTIZED = tuple(row.name for row in FORMAT_ROWS if row.block_values > 1)
_PRECISION = tuple(sorted(KEPT_QUANTIZED, key=lambda name: _ROWS[name].precision))

# Bytes of one block of 32 weights in each kept format (llama.cpp's layouts).
BLOCK_BYTES = {name: _ROWS[name].block_bytes for name in KEPT_QUANTIZED}

# The GGUF types (gguf.GGMLQuantizationType's names) whose blocks convert to each kept format with
# no float32 copy of the tensor.
_CONVERTIBLE = {name: frozenset(t.upper() for t in _ROWS[name].converts_from) for name in KEPT_QUANTIZED}

# A GGUF tensor type -> the kept format nearest above it in precision: the least precise one its
# blocks convert to (its own, q4_k included; q8_0 for the 5- and 6-bit types). Float types are not
# here: they are widened, and quantized by the compiled model into its format.
NEAREST_KEPT = {
    type_name: min((name for name in KEPT_QUANTIZED if type_name in _CONVERTIBLE[name]), key=_PRECISION.index)
    for type_name in sorted(set().union(*_CONVERTIBLE.values()))
}

# Blocks the compiled model converts into a kept format itself, block by block as it repacks them,
# with no copy of the tensor in that format (CompiledModel.set_weights): a type given by its own
# name -> the format, when that is the only one it is kept in. Any other pair is given as
# "FORMAT:TYPE,TYPE,...", one type per part of the weight.
REPACKED_AS = {t.lower(): name for t, name in NEAREST_KEPT.items() if t.lower() not in KEPT_QUANTIZED}
# Bytes and weights of one block of each GGUF type set_weights takes (the block-type table).
_BLOCK = {name: (nbytes, values) for name, values, nbytes, _fields in _gpt.gguf_block_types()}


def head_format(weights: str) -> str:
    """The format a model whose matmul weights are in `weights` stores its [V, D] tables and LM head
    in: the table's (q8_0 for the 4-bit formats)."""
    return _ROWS[weights].head_format


def convertible(type_name: str, target: str) -> bool:
    """Whether blocks of GGUF type `type_name` convert to kept format `target` without widening."""
    return type_name in _CONVERTIBLE.get(target, ())


def given_format(type_names: Iterable[str], requested: str | None) -> str | None:
    """group_format, as set_weights is given the parts' own blocks: the format when every part is
    in it, the type when every part has the same one that REPACKED_AS keeps in that format ("q6_k"),
    else "FORMAT:TYPE,..." naming each part's type. The compiled model converts them as it repacks."""
    types = [t.lower() for t in type_names]
    fmt = group_format([t.upper() for t in types], requested)
    if fmt is None or all(t == fmt for t in types):
        return fmt
    if len(set(types)) == 1 and REPACKED_AS.get(types[0]) == fmt:
        return types[0]
    return f"{fmt}:{','.join(types)}"


def stored_format(given: str) -> str:
    """The kept format blocks given in `given` (given_format's answer) are stored in."""
    return given.split(":")[0] if ":" in given else REPACKED_AS.get(given, given)


def part_types(given: str, parts: int) -> list[str]:
    """The GGUF type of each of a weight's `parts` given in `given`."""
    return given.split(":")[1].split(",") if ":" in given else [given] * parts


def group_format(type_names: Iterable[str], requested: str | None) -> str | None:
    """The kept format of a compiler weight made of tensors of these GGUF types (q, k and v are one
    fused weight, stored in one format), or None when its parts are widened to float32 and
    converted by the compiled model. `requested` is CompileOptions.weights: "auto" keeps the parts
    in the most precise of their nearest formats (a q4_K q and k with a q6_K v: q8_0), or the least
    precise one above it that every part converts to, a kept
    format keeps them in it when every part converts, anything else keeps nothing."""
    types = list(type_names)
    if requested == "auto":
        nearest = [NEAREST_KEPT.get(t) for t in types]
        if not types or None in nearest:
            return None
        floor = _PRECISION.index(max(nearest, key=_PRECISION.index))
        return next((f for f in _PRECISION[floor:] if all(convertible(t, f) for t in types)), None)
    if requested in KEPT_QUANTIZED and types and all(convertible(t, requested) for t in types):
        return requested
    return None


def elements(blocks: np.ndarray | list[np.ndarray], fmt: str) -> int:
    """The weights these rows of blocks hold (one array, or a fused weight's parts; `fmt` as
    given_format answers)."""
    parts = blocks if isinstance(blocks, list) else [blocks]
    total = 0
    for part, type_name in zip(parts, part_types(fmt, len(parts)), strict=True):
        block_bytes, block_values = _BLOCK.get(type_name, (1, 1))
        total += int(part.nbytes) // block_bytes * block_values
    return total
