"""Where a decode step's weight bytes go: each weight of a GGUF model as the compiled model stores it
(its format and bytes), against the file's tensors of the same weight.

    PYTHONPATH=bazel-bin/python python3 tools/bench/decode_bytes.py /tmp/smollm2-1.7b.q4_k_m.gguf

A decode step reads every stored weight once (compare_llamacpp.py's "weight bytes per token", less
a token table it only gathers a row of), so bytes stored beyond the file's are time beyond
llama.cpp's at the weight-streaming floor. A fused weight (q and k, with v unless its block type
sets it apart, GPTConfig.separate_v_proj; gate and up) is stored in one format, the most precise its
parts' kept formats need (gpt.kept_formats): a row per weight kind and stored format says how many
layers store it so. Loads the model (weights="auto"), compiles nothing.
"""

import argparse
import collections

from gguf import GGUFReader

import gpt
from gpt import _gpt, architectures


def file_tensors(config: gpt.GPTConfig) -> dict[str, list[str]]:
    """Each weight the compiled model takes -> the file's tensors it is made of (the architecture's
    parameter table, gpt.architectures)."""
    return {
        name: [architectures.layer_name(p.gguf, i) for p, i in parts]
        for name, parts in architectures.compiler_groups(config).items()
    }


def stored_format(bits_per_weight: float) -> str:
    """The weight format whose stored bits per weight (codes and scale rows, WeightFormats.h) are
    nearest these (a padded table's bits are a little above its format's)."""
    bits = {
        name: 32.0 if name == "f32" else code_bits + 16 * scale_rows / block_values
        for name, block_values, *_, scale_rows, code_bits in _gpt.weight_formats()
    }
    return min(bits, key=lambda name: abs(bits[name] - bits_per_weight))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="a GGUF file of a Llama-family model")
    args = parser.parse_args()
    model = gpt.GPT.from_gguf(args.path, gpt.CompileOptions(weights="auto"), context=512)
    compiled = model._compiled
    shapes = dict(compiled.supplied_parameters())
    stored: dict[str, int] = collections.Counter()
    for name, _, size in compiled.stored_arguments():
        stored[name.removesuffix(".scales")] += size
    reader = GGUFReader(args.path)
    tensors = {t.name: (t.tensor_type.name, int(t.n_bytes)) for t in reader.tensors}
    made_of = file_tensors(model.config)

    rows: dict[tuple[str, str], list] = {}
    for name, size in stored.items():
        if "embed_tokens" in name:  # a lookup table: a row a token, not streamed
            continue
        kind = name.split(".", 3)[3] if name.startswith("model.layers.") else name
        rows_, cols = shapes.get(name, (model.config.n_embd, model.config.vocab_size))  # the head: [D, V]
        fmt = stored_format(8 * size / (int(rows_) * int(cols)))
        if name in made_of:
            parts = [tensors[tensor] for tensor in made_of[name]]
        else:  # the LM head: the file's output matrix, or its token table when tied
            parts = [tensors.get("output.weight", tensors["token_embd.weight"])]
        row = rows.setdefault((kind, fmt), [0, 0, 0, collections.Counter()])
        row[0] += 1
        row[1] += size
        row[2] += sum(n for _, n in parts)
        row[3]["+".join(sorted({t for t, _ in parts}))] += 1

    print(f"command: PYTHONPATH=bazel-bin/python python3 tools/bench/decode_bytes.py {args.path}\n")
    print("| weight | stored as | layers | gpt MB | file's tensors | file MB | gpt / file |")
    print("|---|---|---|---|---|---|---|")
    total_gpt = total_file = 0
    for (kind, fmt), (count, ours, theirs, types) in sorted(rows.items()):
        shown = ", ".join(f"{t} ({n})" for t, n in types.items())
        print(f"| {kind} | {fmt} | {count} | {ours / 1e6:.1f} | {shown} | {theirs / 1e6:.1f} | {ours / theirs:.2f}x |")
        total_gpt, total_file = total_gpt + ours, total_file + theirs
    print(f"| all | | | {total_gpt / 1e6:.1f} | | {total_file / 1e6:.1f} | {total_gpt / total_file:.2f}x |")


if __name__ == "__main__":
    main()
