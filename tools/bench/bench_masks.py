"""Attention-mask benchmark: forward over T tokens under causal, sliding-window and strided masks,
and whether attention time follows the count of non-empty tiles; decode at two positions.

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/bench/bench_masks.py

Prints markdown tables, preceded by the command that produced them. Attention time is estimated
as forward time minus the forward time of the same model with a window of 1 (which visits only
the T/32 diagonal tiles, so its attention costs next to nothing): what is left is the attention
that the mask makes the program do. The ratio test is the issue's: time(mask) / time(causal)
<= 1.25 x (non-empty tiles(mask) / non-empty tiles(causal)). Every time is the median of
--repeats runs after a warm-up call, the models of one T taking turns.

That estimate is a difference of two forward times. At GPT-2 small's width the 12 layers' matmuls
and the 50257-wide LM head are three quarters of the forward, so the difference of two numbers
~10% apart is mostly noise. `--isolated` adds a second table that measures the same attention
more directly: each width's attention shape (its heads, head size and T; the attention op and
its lowering are the same) in a model of one layer with a 256-token vocabulary. Attention per
layer does not depend on the number of layers or the vocabulary, so its ratios are the same
quantity as the table above's; attention's share of the forward is about the same (no LM head),
but a forward is ~20x shorter at GPT-2 small's width, so many more repeats fit in the same time.
It reports the minimum over the repeats next to the median: on a shared machine other work only
ever adds time, so the minimum is the closest to the program's own cost (both are printed, and
the ratio test is applied to each).
"""

import argparse
import statistics
import sys
import time

import numpy as np
from machine import describe_cpu

import gpt
from gpt import masks

WIDTHS = {
    "mid": dict(n_layer=4, n_head=8, n_embd=256, vocab_size=1000),
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257),
}


# --isolated: one layer and a small vocabulary around the same attention.
ISOLATED = dict(n_layer=1, vocab_size=256)


def make_config(width, tokens, mask, isolated=False):
    """A rotary-position model of `width` over `tokens` positions with `mask` ("causal",
    "window:W", "strided:S"); `isolated`: one layer and a 256-token vocabulary (see --isolated)."""
    kind, _, parameter = mask.partition(":")
    shape = dict(WIDTHS[width], **(ISOLATED if isolated else {}), block_size=tokens, pos_embedding="rope")
    if kind == "causal":
        return gpt.GPTConfig(**shape)
    if kind == "window":
        return gpt.GPTConfig(**shape, attention_window=int(parameter))
    if kind == "strided":
        return gpt.GPTConfig(**shape, attention_mask=masks.Strided(int(parameter)))
    raise ValueError(f"unknown mask {mask!r}: causal, window:W or strided:S")


def dense_mask(tokens, mask):
    kind, _, parameter = mask.partition(":")
    if kind == "causal":
        return masks.Causal().dense(tokens)
    if kind == "window":
        return masks.SlidingWindow(int(parameter)).dense(tokens)
    return masks.Strided(int(parameter)).dense(tokens)


def tile_count(tokens, mask, block=32):
    """(full, partial) tiles of block x block, as --transformer-classify-attention-tiles counts them
    (the compiled IR records the same; printing a [4096, 4096] mask constant to read it back is
    not worth it)."""
    visible = dense_mask(tokens, mask).reshape(tokens // block, block, tokens // block, block).sum(axis=(1, 3))
    return int((visible == block * block).sum()), int(((visible > 0) & (visible < block * block)).sum())


def interleaved_forward_times(models, ids, repeats):
    """Each model's forward times over `repeats` rounds, the models taking turns (one call each
    per round, after a warm-up call that compiles): a slow patch of a shared machine then lands
    on all of them."""
    for model in models:
        model.forward(ids)
    times = [[] for _ in models]
    for _ in range(repeats):
        for model, own in zip(models, times, strict=True):
            start = time.perf_counter()
            model.forward(ids)
            own.append(time.perf_counter() - start)
    return times


def forward_table(widths, lengths, mask_names, threads, repeats):
    """The forward of the whole model (WIDTHS), medians."""
    print(
        "| model | T | mask | full + partial tiles | forward (ms) | window-1 floor (ms) | attention (ms) "
        "| time / causal | tiles / causal | ratio test (<= 1.25x tiles) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for width in widths:
        for tokens in lengths:
            options = gpt.CompileOptions(threads=threads, disk_cache=False)
            ids = np.random.default_rng(0).integers(0, WIDTHS[width]["vocab_size"], size=tokens)
            models = [
                gpt.GPT.random(make_config(width, tokens, name), options=options) for name in ["window:1", *mask_names]
            ]
            floor, *forwards = map(statistics.median, interleaved_forward_times(models, ids, repeats))
            causal = None
            for name, forward in zip(mask_names, forwards, strict=True):
                full, partial = tile_count(tokens, name)
                attention = forward - floor
                if causal is None:
                    causal = (attention, full + partial)
                tile_ratio = (full + partial) / causal[1]
                if causal[0] < 0.1 * floor or attention < 0:
                    # Attention is lost in the run-to-run noise of the rest of the forward pass.
                    time_ratio, verdict = "-", "n/a (attention within the noise)"
                else:
                    time_ratio = f"{attention / causal[0]:.2f}"
                    verdict = "pass" if attention / causal[0] <= 1.25 * tile_ratio else "FAIL"
                print(
                    f"| {width} | {tokens} | {name} | {full} + {partial} | {forward * 1e3:.0f} | {floor * 1e3:.0f} "
                    f"| {attention * 1e3:.0f} | {time_ratio} | {tile_ratio:.2f} | {verdict} |",
                    flush=True,
                )


def ratio_cells(attention, causal, tile_ratio):
    """time / causal and the ratio test's verdict, or "-" where the estimate is meaningless."""
    if causal <= 0 or attention < 0:
        return "-", "n/a"
    verdict = "pass" if attention / causal <= 1.25 * tile_ratio else "FAIL"
    return f"{attention / causal:.2f}", verdict


def isolated_table(widths, lengths, mask_names, threads, repeats):
    """Each width's attention in a one-layer, 256-token-vocabulary model (--isolated): forward
    minus the window-1 floor, from the minimum and from the median of the interleaved repeats."""
    print(
        "| attention of | T | mask | full + partial tiles | tiles / causal | floor min / median (ms) "
        "| attention, min (ms) | time / causal, min | ratio test, min | attention, median (ms) "
        "| time / causal, median | ratio test, median |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for width in widths:
        for tokens in lengths:
            options = gpt.CompileOptions(threads=threads, disk_cache=False)
            ids = np.random.default_rng(0).integers(0, ISOLATED["vocab_size"], size=tokens)
            models = [
                gpt.GPT.random(make_config(width, tokens, name, isolated=True), options=options)
                for name in ["window:1", *mask_names]
            ]
            floor, *forwards = interleaved_forward_times(models, ids, repeats)
            causal = None
            for name, own in zip(mask_names, forwards, strict=True):
                full, partial = tile_count(tokens, name)
                by_min = min(own) - min(floor)
                by_median = statistics.median(own) - statistics.median(floor)
                if causal is None:
                    causal = (by_min, by_median, full + partial)
                tile_ratio = (full + partial) / causal[2]
                min_ratio, min_verdict = ratio_cells(by_min, causal[0], tile_ratio)
                median_ratio, median_verdict = ratio_cells(by_median, causal[1], tile_ratio)
                print(
                    f"| {width} (1 layer) | {tokens} | {name} | {full} + {partial} | {tile_ratio:.2f} "
                    f"| {min(floor) * 1e3:.0f} / {statistics.median(floor) * 1e3:.0f} | {by_min * 1e3:.1f} "
                    f"| {min_ratio} | {min_verdict} | {by_median * 1e3:.1f} | {median_ratio} | {median_verdict} |",
                    flush=True,
                )


def decode_table(width, mask_names, positions, threads, steps):
    """Decode ms per token at each position under each mask (window:256 by default: the rolling
    cache). Each (mask, position) cache is prefilled once, then they take turns (`steps` decode
    steps each, three rounds, after a warm-up step), so that a slow patch of the machine does not
    land on one of them alone."""
    block_size = max(positions) + 4 * steps + 2
    options = gpt.CompileOptions(threads=threads, disk_cache=False)
    caches = {}
    for name in mask_names:
        model = gpt.GPT.random(make_config(width, block_size, name), options=options)
        for position in positions:
            cache = model.new_cache()
            model.prefill(np.random.default_rng(0).integers(0, model.config.vocab_size, size=position), cache)
            model.decode(1, cache)  # warm-up (compiles the step on the first position)
            caches[name, position] = (model, cache)
    times = {key: [] for key in caches}
    for _ in range(3):
        for key, (model, cache) in caches.items():
            for _ in range(steps):
                start = time.perf_counter()
                model.decode(1, cache)
                times[key].append(time.perf_counter() - start)
    print(f"| model | mask | position | decode (ms/token, median of {3 * steps}) | / first position |")
    print("|---|---|---|---|---|")
    for name in mask_names:
        first = statistics.median(times[name, positions[0]])
        for position in positions:
            median = statistics.median(times[name, position])
            print(f"| {width} | {name} | {position} | {median * 1e3:.3f} | {median / first:.2f} |", flush=True)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="mid")
    parser.add_argument("--lengths", default="1024,2048,4096")
    parser.add_argument("--masks", default="causal,window:256,strided:128", help="the first is the reference")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--decode-width", default="mid", help="'' skips the decode table")
    parser.add_argument(
        "--isolated", action="store_true", help="also the attention of each width in a 1-layer model (see above)"
    )
    parser.add_argument("--whole", default="yes", choices=["yes", "no"], help="no: skip the whole-model table")
    parser.add_argument("--decode-positions", default="256,4000")
    parser.add_argument("--decode-masks", default="window:256", help="e.g. causal,window:256,strided:128")
    parser.add_argument("--decode-steps", type=int, default=20)
    args = parser.parse_args(argv)

    print("command: PYTHONPATH=bazel-bin/python python3 tools/bench/bench_masks.py " + " ".join(argv))
    print("cpu: " + describe_cpu())
    print()
    widths, lengths = args.widths.split(","), [int(t) for t in args.lengths.split(",")]
    if args.whole == "yes":
        forward_table(widths, lengths, args.masks.split(","), args.threads, args.repeats)
    if args.isolated:
        print()
        isolated_table(widths, lengths, args.masks.split(","), args.threads, args.repeats)
    if args.decode_width:
        print()
        positions = [int(p) for p in args.decode_positions.split(",")]
        decode_table(args.decode_width, args.decode_masks.split(","), positions, args.threads, args.decode_steps)


if __name__ == "__main__":
    main(sys.argv[1:])
