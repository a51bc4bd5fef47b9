#!/usr/bin/env python3
"""A structure-aware fuzzer for the loaders of files from strangers: GGUF files (GPT-2's, every
tensor type the project reads, kept quantized or dequantized, with their tokenizer data; Llama's
with a SentencePiece or a byte-level BPE vocabulary, Qwen2's with q/k/v biases, Phi-3's with fused
qkv and gate/up) through gpt.gguf_file.load_gguf; K-quant models built by GPT.from_gguf (the C++
repacking of their blocks) and run one decode step; HF directories (config.json,
model.safetensors or shards listed by model.safetensors.index.json, tokenizer.json,
tokenizer_config.json, chat_template.jinja, generation_config.json, any of them a symbolic link or
a FIFO) through gpt.weights.load_pretrained or gpt.hf_checkpoint.load_pretrained and
gpt.chat.chat_spec; chat templates through gpt.chat.ChatTemplate; GPU artifacts (manifest.json,
the PTX module, the weights) through gpt_runtime.load; tokenizers (a GGUF vocabulary or a
tokenizer.json) encoding and decoding arbitrary text.

    PYTHONPATH=bazel-bin/python python3 tools/fuzz/fuzz_loaders.py --seconds 60 --seed 1 --out DIR
    PYTHONPATH=bazel-bin/python python3 tools/fuzz/fuzz_loaders.py --seconds 600 --kinds model,tokenizer
    PYTHONPATH=bazel-bin/python python3 tools/fuzz/fuzz_loaders.py --replay tests/fuzz/loader_regressions

An input is of one kind (tools/fuzz/loader_formats.py's KINDS): "gguf", "hf", "template" and
"artifact" by default, each input milliseconds; "model" (seconds for each new shape it compiles)
and "tokenizer" with --kinds (`--kinds all`: every kind). Seeds (tools/fuzz/loader_seeds.py) are
small valid inputs: a nano GPT-2 as GGUF in each type gpt.gguf_file.save_gguf writes, with a
byte-level BPE tokenizer, and as HF directories in F32, F16 and
BF16 with a ChatML template; nano Llama GGUF files with a SentencePiece vocabulary and Llama 2's
template and with a byte-level BPE vocabulary, a Qwen2 (an untied Q8_0 head, Q4_0 MLP) and a Phi-3;
a nano Llama HF directory (rope_scaling, chat_template.jinja) and Qwen2 ones (tied in
model.safetensors, untied in two shards); ChatML, Llama 2's and Llama 3's templates; the toy GPU
artifact of tests/python/toy_artifact.py (when the checkout has it); K-quant models of two layers
(Llama in Q4_K_M's mix of Q4_K and Q6_K, Qwen2 in Q5_K, a Phi-3 of width 128 in a mix of the
32-weight block types and Q6_K); a text with byte-level BPE vocabularies of each pre-tokenizer, a SentencePiece one and
a tokenizer.json. The regression corpus joins them. Each input is a seed, or an earlier input that
ran new code, of a kind chosen at random (each kind gets its share of the inputs, and none more
than 1.5 times its share of the time), parsed into its structure and given one to four mutations
that know the format (tools/fuzz/loader_mutate_*.py, loader_templates.py, loader_text.py): GGUF
counts, lengths, value types, dimensions, tensor types and offsets, metadata values, tensor bytes
and fp16 block scales, tokens, merges, token types, SentencePiece scores, long tokens; K-quant
blocks' d, dmin and sub-block scales, a matrix given another block type or a row length 256 does
not divide, the weights option; config.json values (rope_scaling of every JSON type) and syntax,
tokenizer_config.json's template and tokens, deep nesting, bytes that are not UTF-8; safetensors
header entries and length, the shard index's entries; links out of the directory and to devices
(/dev/zero, /dev/urandom), FIFOs; templates from a grammar of jinja2 constructs (loops, ranges
nested, nested ifs, arithmetic with ** and *, string multiplication, filters, strftime_now,
raise_exception, attribute access and sandbox escapes, deep nesting, tags left open); manifest
values at any path (sizes, counts, dimensions, names and places), the PTX module's and the
weights' bytes; texts of random Unicode (no lone surrogates), long runs, control characters and
chat specials, a vocabulary's added tokens, merges and pre-tokenizer. A worker process
(tools/fuzz/loader_worker.py) loads it under an address-space limit (RLIMIT_AS) and a time limit,
recording which pairs of consecutive lines of the loaders ran (sys.settrace); an input that runs a
new pair joins the corpus ("new inputs").

Loading stops before compiling, but for "model": the loader, gpt.weights.validate_weights and, for
a model that loads, the GPT constructor (which binds and repacks the weights but compiles nothing),
its tokenizer on a sample text and, when it has a chat template, a first chat turn rendered
(within the prompt bound of its context) and tokenized; gpt_runtime.load up to the driver, which
the worker has none of (NoDeviceError then means every check passed); a "model" input is built,
compiled (cached on disk by shape) and run one prefill and one decode step. An input may load, or
be refused with a documented error: a ValueError (gpt.ModelFileError, ChatTemplateError,
gpt_runtime.ArtifactError), FileNotFoundError, or the MemoryError that names what a configuration
needs. Anything else is a finding: another exception, a time-out (a hang), the worker killed by a
signal (a crash) or a MemoryError from memory over the limit; and a byte-level tokenizer whose
decoding of its encoding of a text is not the text less its special tokens. Findings are minimized
into OUT/findings/ (one file each: NAME.gguf, NAME.model.gguf, NAME.hf.tar.gz, NAME.jinja,
NAME.artifact.tar.gz or NAME.tokenizer.tar.gz, and NAME.txt with the traceback); once fixed, they
belong in tests/fuzz/loader_regressions/, which tests/python/hostile/test_hostile_files.py replays. Exits
1 on any finding."""

import argparse
import copy
import hashlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time

# The fuzzer's modules, beside it (and beside the compiler's fuzzer).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from loader_formats import (  # noqa: E402
    DEFAULT_KINDS,
    KINDS,
    Input,
    read_regression,
    regression_files,
    save_finding,
    write_input,
)
from loader_mutate_files import mutate_artifact, mutate_hf, mutate_raw  # noqa: E402
from loader_mutate_gguf import mutate_gguf, mutate_model  # noqa: E402
from loader_seeds import make_seeds  # noqa: E402
from loader_templates import mutate_template  # noqa: E402
from loader_text import mutate_tokenizer_input  # noqa: E402
from loader_worker import Worker, worker_main  # noqa: E402

STRUCTURAL = {
    "gguf": mutate_gguf,
    "hf": mutate_hf,
    "template": mutate_template,
    "artifact": mutate_artifact,
    "model": mutate_model,
    "tokenizer": mutate_tokenizer_input,
}
# Seconds a "model" input may take (a compile of a new shape takes seconds on a loaded machine).
MODEL_TIMEOUT = 120.0


def mutate(rng: random.Random, parent: Input) -> Input:
    child = copy.deepcopy(parent)
    # A model's blocks reach the repacking only when the file loads: fewer mutations at once.
    for _ in range(rng.choice((1, 1, 2) if child.kind == "model" else (1, 1, 2, 3, 4))):
        if child.doc is not None and rng.random() < 0.8:
            STRUCTURAL[child.kind](rng, child)
        else:
            mutate_raw(rng, child)
    child.origin = parent.origin
    return child


def timeout_of(item: Input, timeout: float) -> float:
    return max(timeout, MODEL_TIMEOUT) if item.kind == "model" else timeout


# -- the campaign -------------------------------------------------------------------------------


def signature(result: dict) -> str:
    """What makes two findings the same: their kind, exception type and where it was raised."""
    return f"{result['kind']}:{result['type']}:{result.get('where', '')}"


def minimize(worker: Worker, item: Input, expected: str, scratch: str, timeout: float, budget: float) -> Input:
    """A smaller input with the same finding, for at most `budget` seconds: tensors, metadata keys
    and byte patches removed in ever smaller runs (delta debugging), a tokenizer's text cut, and
    for a HF directory the safetensors file or config.json emptied where the finding does not
    need it."""

    deadline = time.monotonic() + budget

    def reproduces(candidate: Input) -> bool:
        if time.monotonic() > deadline:
            return False
        path = write_input(candidate, scratch)
        result = worker.run(candidate.kind, path, candidate.keep, timeout_of(candidate, timeout))
        return result["outcome"] == "finding" and signature(result) == expected

    def shrink(best: Input, items) -> Input:
        """Removes runs of the list that `items(input)` returns while the finding stays."""
        chunks = 2
        while items(best) and time.monotonic() < deadline:
            size = -(-len(items(best)) // chunks)
            for start in range(0, len(items(best)), size):
                candidate = copy.deepcopy(best)
                del items(candidate)[start : start + size]
                if reproduces(candidate):
                    best = candidate
                    chunks = max(chunks - 1, 2)
                    break
            else:
                if size == 1:
                    break
                chunks = min(chunks * 2, len(items(best)))
        return best

    best = item
    if best.kind in ("gguf", "model") and best.doc is not None:
        best = shrink(best, lambda candidate: candidate.doc.tensors)
        best = shrink(best, lambda candidate: candidate.doc.kvs)
    if best.kind == "template" and best.doc is not None:
        best = shrink(best, lambda candidate: candidate.doc.pieces)
    if best.kind == "tokenizer" and best.doc is not None:
        best = shrink_text(best, reproduces)
    if best.kind == "hf" and best.doc is not None:
        for empty in ({"header": {}, "data": b"", "header_raw": None}, {"config": {}, "config_raw": None}):
            candidate = copy.deepcopy(best)
            for name, value in empty.items():
                setattr(candidate.doc, name, value)
            if reproduces(candidate):
                best = candidate
    return shrink(best, lambda candidate: candidate.patches)


def shrink_text(best: Input, reproduces) -> Input:
    """A tokenizer input's text with runs of characters removed, halving the run while the
    finding stays."""
    size = max(len(best.doc.text) // 2, 1)
    while size >= 1 and best.doc.text:
        start = 0
        while start < len(best.doc.text):
            candidate = copy.deepcopy(best)
            candidate.doc.text = best.doc.text[:start] + best.doc.text[start + size :]
            if reproduces(candidate):
                best = candidate
            else:
                start += size
        if size == 1:
            break
        size //= 2
    return best


class Campaign:
    """The state of a run: the corpus, the line pairs seen, counts by outcome and kind, findings."""

    def __init__(self, args, seeds: list[Input], scratch: str, out: str):
        self.args, self.scratch, self.out = args, scratch, out
        self.corpus = list(seeds)
        self.edges = set()
        self.outcomes = {"loaded": 0, "refused": 0, "finding": 0}
        self.by_kind = {}  # input kind -> executions
        self.outcomes_by_kind = {}  # input kind -> outcome -> count
        self.seconds_by_kind = {}  # input kind -> seconds in the worker
        self.messages = set()
        self.refusals = {}  # exception type -> count
        self.broken_seeds = []
        self.findings = {}
        self.executions = 0
        self.new_inputs = 0

    def next_parent(self, rng: random.Random, kind: str) -> Input:
        """An input of `kind` from the corpus; for "model", half the time one that loaded (whose
        mutations reach the repacking and the decode step more often than a refused file's)."""
        entries = [entry for entry in self.corpus if entry.kind == kind]
        loaded = [entry for entry in entries if entry.loaded]
        return rng.choice(loaded if kind == "model" and loaded and rng.random() < 0.5 else entries)

    def next_kind(self, rng: random.Random, elapsed: float) -> str:
        """A kind at random among those in the corpus; one that has had more than 1.5 times its
        share of the time sits out (a "model" input takes a thousand times a "template" one)."""
        kinds = sorted({entry.kind for entry in self.corpus})
        fair = 1.5 * elapsed / len(kinds)
        eligible = [kind for kind in kinds if self.seconds_by_kind.get(kind, 0.0) <= fair] or kinds
        return rng.choice(eligible)

    def record(self, item: Input, mutated: bool, result: dict, worker: Worker) -> None:
        self.executions += 1
        item.loaded = result["outcome"] == "loaded"
        self.outcomes[result["outcome"]] += 1
        self.by_kind[item.kind] = self.by_kind.get(item.kind, 0) + 1
        counts = self.outcomes_by_kind.setdefault(item.kind, {})
        counts[result["outcome"]] = counts.get(result["outcome"], 0) + 1
        self.seconds_by_kind[item.kind] = self.seconds_by_kind.get(item.kind, 0.0) + result.get("seconds", 0.0)
        if not mutated and item.origin.startswith("seed") and result["outcome"] != "loaded":
            # A generated seed must load: mutations of a refused file test little.
            print(f"loader fuzz: {item.origin} does not load: {result.get('type')}: {result.get('message')}")
            self.broken_seeds.append(item.origin)
        if result["outcome"] == "refused":
            self.messages.add(_template(result["message"]))
            self.refusals[result["type"]] = self.refusals.get(result["type"], 0) + 1
            if result["type"] != "ModelFileError" and self.args.verbose:
                print(f"loader fuzz: refused with {result['type']}: {result['message'][:300]}")
        fresh = {tuple(edge) for edge in result.get("edges", [])} - self.edges
        if fresh:
            self.edges |= fresh
            if mutated:
                self.corpus.append(item)
                self.new_inputs += 1
        if result["outcome"] == "finding" and signature(result) not in self.findings:
            self.save(item, result, worker)

    def save(self, item: Input, result: dict, worker: Worker) -> None:
        key = signature(result)
        args = self.args
        scratch = os.path.join(self.scratch, "minimize")
        small = minimize(worker, item, key, scratch, args.timeout, args.minimize_seconds)
        stem = os.path.join(self.out, "findings", f"{result['kind']}-{hashlib.sha1(key.encode()).hexdigest()[:10]}")
        saved = save_finding(small, stem)
        with open(stem + ".txt", "w", encoding="utf-8") as f:
            f.write(json.dumps({k: v for k, v in result.items() if k != "edges"}, indent=2))
        self.findings[key] = saved
        print(f"loader fuzz: NEW FINDING {key}: {result.get('message', '')[:300]}\n  saved {saved}")

    def summary(self, elapsed: float) -> dict:
        return {
            "executions": self.executions,
            "seconds": elapsed,
            "executions_per_second": self.executions / elapsed if elapsed else 0.0,
            "new_inputs": self.new_inputs,
            "corpus": len(self.corpus),
            "edges": len(self.edges),
            "outcomes": self.outcomes,
            "executions_by_kind": self.by_kind,
            "outcomes_by_kind": self.outcomes_by_kind,
            "seconds_by_kind": {kind: round(seconds, 3) for kind, seconds in self.seconds_by_kind.items()},
            "distinct_refusals": len(self.messages),
            "refusals_by_type": self.refusals,
            "findings": sorted(self.findings.values()),
            "seeds_that_do_not_load": self.broken_seeds,
        }

    def status(self, started: float) -> str:
        elapsed = max(time.monotonic() - started, 1e-9)
        return (
            f"loader fuzz: {self.executions} inputs in {elapsed:.0f} s ({self.executions / elapsed:.1f} exec/s), "
            f"corpus {len(self.corpus)} (+{self.new_inputs} new inputs), {len(self.edges)} line pairs, "
            f"loaded {self.outcomes['loaded']}, refused {self.outcomes['refused']}, findings {len(self.findings)}"
        )


def run_campaign(args) -> int:
    rng = random.Random(args.seed)
    sys.setrecursionlimit(20000)  # deepcopy and json.dumps of nested inputs, here (not in the worker)
    out = os.path.abspath(args.out)
    os.makedirs(os.path.join(out, "findings"), exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="fuzz-loaders-", dir=out)
    started = time.monotonic()
    seeds = make_seeds(scratch, args.kinds)
    generated = len(seeds)
    seeds += [item for item in map(read_regression, regression_files(args.corpus)) if item.kind in args.kinds]
    campaign = Campaign(args, seeds, scratch, out)
    worker = Worker(os.path.abspath(__file__), args.memory_headroom, os.path.join(scratch, "compile-cache"))
    last_report = time.monotonic()
    kinds = ",".join(args.kinds)
    print(
        f"loader fuzz: {len(seeds)} seeds ({generated} generated, the rest from {args.corpus}), "
        f"kinds {kinds}, seed {args.seed}"
    )
    try:
        # The seeds first, as they are (they must load, or be refused as the corpus expects).
        queue = [(item, False) for item in seeds]
        while time.monotonic() < started + args.seconds:
            if queue:
                item, mutated = queue.pop(0)
            else:
                # A kind first, then a parent of that kind: each surface gets its share.
                kind = campaign.next_kind(rng, time.monotonic() - started)
                parent = campaign.next_parent(rng, kind)
                item, mutated = mutate(rng, parent), True
            path = write_input(item, os.path.join(scratch, "input"))
            result = worker.run(item.kind, path, item.keep, timeout_of(item, args.timeout))
            campaign.record(item, mutated, result, worker)
            if time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                print(campaign.status(started), flush=True)
    finally:
        worker.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(campaign.summary(time.monotonic() - started), f, indent=2)
    print(campaign.status(started))
    refusals = campaign.refusals
    print(
        f"loader fuzz: {len(campaign.messages)} distinct refusals "
        f"({', '.join(f'{name} {count}' for name, count in sorted(refusals.items()))}); "
        f"{len(campaign.findings)} new finding(s)" + (f" in {out}/findings" if campaign.findings else "")
    )
    return 1 if campaign.findings or campaign.broken_seeds else 0


def _template(message: str) -> str:
    """A refusal message with its numbers and quoted names blanked: one entry per kind of refusal."""
    import re

    message = re.sub(r"/[^\s:']+", "FILE", message)
    message = re.sub(r"'[^']*'|\"[^\"]*\"", "'_'", message)
    return re.sub(r"-?\d[\d.e+-]*", "N", message)[:160]


def run_replay(args) -> int:
    """Runs every regression file (or the files named) through the worker; prints one JSON line
    each (file, outcome, exception type, seconds) and exits 1 unless each was refused with one of
    the documented errors (gpt.ModelFileError, ChatTemplateError, gpt_runtime.ArtifactError: a
    ValueError; FileNotFoundError)."""
    paths = []
    for target in args.replay:
        paths += regression_files(target) if os.path.isdir(target) else [target]
    scratch = tempfile.mkdtemp(prefix="fuzz-loaders-replay-")
    worker = Worker(os.path.abspath(__file__), args.memory_headroom, os.path.join(scratch, "compile-cache"))
    status = 0
    try:
        worker.start()  # not timed: each file's seconds are its own
        for path in paths:
            item = read_regression(path)
            started = time.monotonic()
            written = write_input(item, os.path.join(scratch, "input"))
            result = worker.run(item.kind, written, item.keep, timeout_of(item, args.timeout))
            record = {
                "file": path,
                "outcome": result["outcome"],
                "type": result.get("type"),
                "message": result.get("message", "")[:500],
                "seconds": round(time.monotonic() - started, 3),
            }
            print(json.dumps(record), flush=True)
            if result["outcome"] != "refused":
                status = 1
    finally:
        worker.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return status


def kinds_argument(text: str) -> tuple[str, ...]:
    kinds = KINDS if text == "all" else tuple(kind for kind in text.split(",") if kind)
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"--kinds {text!r}: each must be one of {', '.join(KINDS)} (or 'all')")
    return kinds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60, help="time budget of the campaign")
    parser.add_argument("--seed", type=int, default=1, help="random seed (a fixed seed repeats a run)")
    parser.add_argument(
        "--out",
        default=os.path.join(tempfile.gettempdir(), "gpt-loader-fuzz"),
        help="findings and summary.json go here",
    )
    parser.add_argument(
        "--kinds",
        type=kinds_argument,
        default=DEFAULT_KINDS,
        help=f"comma-separated kinds of input, or 'all' ({', '.join(KINDS)}; default {','.join(DEFAULT_KINDS)})",
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds an input may take before it is a hang")
    parser.add_argument(
        "--memory-headroom", type=int, default=1024, help="MiB of address space an input may add (RLIMIT_AS)"
    )
    parser.add_argument("--minimize-seconds", type=float, default=20.0, help="time spent minimizing each new finding")
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    parser.add_argument(
        "--corpus",
        default=os.path.join(here, "tests", "fuzz", "loader_regressions"),
        help="regression corpus (extra seeds)",
    )
    parser.add_argument("--replay", nargs="*", help="replay these regression files or directories instead of fuzzing")
    parser.add_argument("--verbose", action="store_true", help="print refusals that are not gpt.ModelFileError")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)  # the worker's compiled-code cache
    args = parser.parse_args()
    if args.worker:
        worker_main(args.memory_headroom, args.cache_dir)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if args.replay is not None:
        return run_replay(args)
    return run_campaign(args)


if __name__ == "__main__":
    sys.exit(main())
