"""Weight conversion between an architecture's HF parameters (gpt/architectures.py's tables) and the compiler's."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpt.architectures import ModelConfig, Parameter, compiler_groups, layer_name


def _groups(config: ModelConfig) -> dict[str, list[tuple[Parameter, int | None, str]]]:
    """Compiler name -> its HF parts (parameter, layer, HF name) in part order."""
    return {name: [(p, i, layer_name(p.hf, i)) for p, i in parts] for name, parts in compiler_groups(config).items()}


def hf_parts(config: ModelConfig) -> dict[str, tuple[list[str], bool]]:
    """Compiler name -> (its HF parameters in concatenation order, whether they are Linear [out, in]
    weights that the compiler takes transposed)."""
    return {name: ([hf for _, _, hf in parts], parts[0][0].linear) for name, parts in _groups(config).items()}


def to_compiler(config: ModelConfig, weights: Mapping[str, np.ndarray], *, consume: bool = False) -> dict[str, object]:
    """HF-named weights (HF layouts) -> the compiler's parameters: Linear weights transposed to
    [in, out], fused parts concatenated along the output dimension. Names that are not parameters
    of `config` pass through unchanged (the caller's validation refuses or ignores them); a
    missing part leaves its compiler parameter missing (likewise). Arrays the compiler takes as
    they are are passed through, not copied. With `consume`, each HF array is dropped from
    `weights` (a dict the caller gives up) once converted, so that a checkpoint is not held twice."""
    out: dict[str, object] = {}
    known = set()
    for name, parts in _groups(config).items():
        names = [hf for _, _, hf in parts]
        known.update(names)
        if not all(hf in weights for hf in names):
            continue
        arrays = [weights[hf] for hf in names]
        if consume:
            for hf in names:
                del weights[hf]  # type: ignore[attr-defined]
        first = parts[0][0]
        if len(parts) == 1 and not first.linear:
            out[name] = arrays[0] if not first.shift else _shifted(names[0], arrays[0], first.shift)
            continue
        if not all(isinstance(a, np.ndarray) for a in arrays):
            raise ValueError(f"parameter(s) {', '.join(names)} must be numpy arrays")
        if first.linear:
            for hf, a in zip(names, arrays, strict=True):
                if a.ndim != 2:
                    raise ValueError(f"parameter {hf} has shape {a.shape}, expected a 2-D [out, in] weight")
            stacked = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0)
            out[name] = np.ascontiguousarray(stacked.T)
        else:
            out[name] = np.concatenate(arrays, axis=0)
    for name, value in weights.items():
        if name not in known:
            out[name] = value
    return out


def _shifted(name: str, value: object, shift: float) -> np.ndarray:
    """HF's `value` plus `shift`, in float32 (Gemma's 1 + w, as HF computes it)."""
    if not isinstance(value, np.ndarray):
        raise ValueError(f"parameter {name} must be a numpy array")
    return value.astype(np.float32) + np.float32(shift)


def to_compiler_quantized(
    config: ModelConfig, blocks: Mapping[str, tuple[str, np.ndarray]], *, concatenate: bool = True
) -> dict[str, tuple[str, np.ndarray | list[np.ndarray]]]:
    """HF-named quantized weights {name: (format, uint8 blocks [out rows, bytes per row])}, as a
    GGUF file stores them (rows of the [out, in] weight, blocks along in = K), -> the compiler's
    names: the rows of fused parts concatenated, which is the fused weight's blocks (a row of
    [out, in] is a column of the compiler's [in, out]). A fused weight is given quantized only
    when all its parts are, in one format; otherwise its parts are left out of the result (the
    caller then gives them in float32).

    With concatenate=False a fused weight's blocks are the list of its parts' arrays, rows in
    order, which CompiledModel.set_weights repacks as they are: no copy of the file's q/k/v and
    gate/up blocks (SmolLM2-1.7B q4_0: 0.9 GB of fresh memory and about 0.5 s less at load)."""
    out: dict[str, tuple[str, np.ndarray | list[np.ndarray]]] = {}
    for name, parts in _groups(config).items():
        names = [hf for _, _, hf in parts]
        given = [blocks.get(hf) for hf in names]
        if any(g is None for g in given) or len({g[0] for g in given}) != 1:
            continue
        fmt = given[0][0]
        arrays = [np.asarray(g[1]) for g in given]
        if len(arrays) == 1:
            out[name] = (fmt, arrays[0])
        elif not concatenate:
            widths = {a.shape[-1] for a in arrays}
            if any(a.ndim != 2 for a in arrays) or len(widths) != 1:
                raise ValueError(
                    f"parameter(s) {', '.join(names)}: quantized parts must be 2-D rows of one width in bytes, "
                    f"got shapes {', '.join(str(a.shape) for a in arrays)}"
                )
            out[name] = (fmt, arrays)
        else:
            out[name] = (fmt, np.concatenate(arrays, axis=0))
    return out


def from_compiler(config: ModelConfig, weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inverse of to_compiler: compiler parameters -> HF names and layouts (fused weights
    split, [in, out] transposed back to [out, in]). Names that are no compiler parameter of
    `config` are left out."""
    out = {}
    for name, parts in _groups(config).items():
        if name not in weights:
            continue
        value = weights[name]
        first = parts[0][0]
        if len(parts) == 1 and not first.linear:
            out[parts[0][2]] = value if not first.shift else np.asarray(value, np.float32) - np.float32(first.shift)
            continue
        offset = 0
        for p, _, hf in parts:
            shape = tuple(p.shape(config))
            size = shape[0]
            piece = value[..., offset : offset + size] if p.linear else value[offset : offset + size]
            out[hf] = np.ascontiguousarray(piece.T) if p.linear else piece
            offset += size
    return out
