"""Writes the compiler fuzzer's seed corpus: every .mlir under tests/ and tools/demo/, one seed per
`// -----` case, without its comment lines (RUN/CHECK lines are dead weight for mutation), plus the
regression corpus. Usage: python3 tools/fuzz/make_seed_corpus.py OUT_DIR
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = ["tests", "tools/demo"]
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


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    out = pathlib.Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    for name, data in seeds():
        if len(data) <= MAX_BYTES:
            (out / name).write_bytes(data)
            count += 1
    print(f"make_seed_corpus: {count} seeds in {out}")


if __name__ == "__main__":
    main(sys.argv)
