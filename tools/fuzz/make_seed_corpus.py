"""Writes the compiler fuzzer's seed corpus: every .mlir under tests/ and tools/dev/demo/, one seed per
`// -----` case, without its comment lines (RUN/CHECK lines are dead weight for mutation), plus the
regression corpus. Usage: python3 tools/fuzz/make_seed_corpus.py OUT_DIR [--limit N]

With --limit N it keeps N seeds, taken round-robin over the source files, smallest case first: every
pass's test file stays represented while the fuzzer loads a corpus it can get through in seconds
(each input runs seven sanitized pipelines, a few executions per second for a whole model), so that
a bounded run spends its time mutating rather than replaying seeds.
"""

import argparse
import itertools
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = ["tests", "tools/dev/demo"]
REGRESSIONS = "tests/fuzz/regressions"
SPLIT = re.compile(r"^// -----\s*$", re.MULTILINE)
MAX_BYTES = 64 * 1024  # tools/fuzz/CompilerFuzzTarget.h: kMaxInputBytes


def seeds():
    for source in SOURCES:
        for path in sorted((ROOT / source).rglob("*.mlir")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(REGRESSIONS + "/"):
                continue  # taken as they are, below
            for i, case in enumerate(SPLIT.split(path.read_text(encoding="utf-8"))):
                lines = [line for line in case.splitlines() if not line.lstrip().startswith("//")]
                text = "\n".join(lines).strip() + "\n"
                if text.strip():
                    yield f"{rel.replace('/', '_')}.{i}", text.encode()
    for path in sorted((ROOT / REGRESSIONS).glob("*")):
        yield "regression_" + path.name, path.read_bytes()


def limited(all_seeds, limit):
    """`limit` seeds, round-robin over the files they come from, each file's smallest first."""
    by_file: dict[str, list[tuple[str, bytes]]] = {}
    for name, data in all_seeds:
        # The regression corpus counts as one file (tests/fuzz replays all of it under ASan).
        source = "regression" if name.startswith("regression_") else name.rsplit(".", 1)[0]
        by_file.setdefault(source, []).append((name, data))
    queues = [sorted(cases, key=lambda case: len(case[1])) for cases in by_file.values()]
    rounds = itertools.zip_longest(*queues)
    return list(itertools.islice((case for round_ in rounds for case in round_ if case), limit))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--limit", type=int, default=None, help="keep this many seeds (default: all)")
    args = parser.parse_args(argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = [(name, data) for name, data in seeds() if len(data) <= MAX_BYTES]
    if args.limit is not None:
        chosen = limited(chosen, args.limit)
    for name, data in chosen:
        (args.out / name).write_bytes(data)
    print(f"make_seed_corpus: {len(chosen)} seeds in {args.out}")


if __name__ == "__main__":
    main(sys.argv)
