"""Fails when a function of the C++ or Python sources is over the size and complexity limits, or a
source file over its length limit (tools/lint.sh runs it).

The limits are issue 41's: no function over 100 lines (lizard's length: its first line to its last,
comments, blank lines and nested functions included) or over cyclomatic complexity 30 (lizard's count,
which adds one per `&&`/`||`/`and`/`or` and so is stricter than ruff's C901 over the same Python).
Lizard measures both languages alike without a compile database (clang-tidy's readability-function-size
would need one of the MLIR headers, which Bazel does not give cheaply, and takes minutes on 2 cores).

No source file (C++ or Python, tests and tools included; ODS .td files are not matched) is over 600
lines: a file that long holds more than one job and is split by them. This has no allowlist.

Functions still over the limits are listed in tools/dev/lint_allowlist.txt, one `path:function` a line; a
listed function that is no longer over fails too, so that the list only shrinks.
"""

import argparse
import subprocess
import sys
from pathlib import Path

import lizard

MAX_LENGTH = 100
MAX_COMPLEXITY = 30
MAX_FILE_LINES = 600
ROOT = Path(__file__).resolve().parents[2]
ALLOWLIST_NAME = "tools/dev/lint_allowlist.txt"
ALLOWLIST = ROOT / ALLOWLIST_NAME
PATTERNS = ("*.cpp", "*.cc", "*.h", "*.py")
# Generated or vendored sources, which nobody edits by hand.
SKIPPED_DIRECTORIES = ("python/gpt/data/",)
# The pybind11 binding tables (python/gpt/_gpt/*.cc's init* functions) are one `.def(...)` after
# another: long by nature and simplest read as one list, so they are measured by nobody.
BINDING_TABLES = "python/gpt/_gpt/"


def is_binding_table(path, function):
    return path.startswith(BINDING_TABLES) and function.rsplit("::", 1)[-1].startswith("init")


def source_files():
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *PATTERNS],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return [path for path in listed if not path.startswith(SKIPPED_DIRECTORIES) and (ROOT / path).is_file()]


def over_the_limits(paths):
    """{"path:function": "why"} for each function over a limit, binding tables left out."""
    found = {}
    for path in paths:
        for function in lizard.analyze_file(str(ROOT / path)).function_list:
            if is_binding_table(path, function.name):
                continue
            reasons = []
            if function.length > MAX_LENGTH:
                reasons.append(f"{function.length} lines > {MAX_LENGTH}")
            if function.cyclomatic_complexity > MAX_COMPLEXITY:
                reasons.append(f"complexity {function.cyclomatic_complexity} > {MAX_COMPLEXITY}")
            if reasons:
                found[f"{path}:{function.name}"] = f"line {function.start_line}: {', '.join(reasons)}"
    return found


def files_over_the_limit(paths):
    """{path: lines} for each file longer than MAX_FILE_LINES."""
    lengths = {path: len((ROOT / path).read_text(errors="replace").splitlines()) for path in paths}
    return {path: lines for path, lines in lengths.items() if lines > MAX_FILE_LINES}


def read_allowlist():
    entries = set()
    for line in ALLOWLIST.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            entries.add(line)
    return entries


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print every function over the limits, allowed or not")
    args = parser.parse_args(argv)
    paths = source_files()
    found = over_the_limits(paths)
    long_files = files_over_the_limit(paths)
    if args.list:
        for key, why in sorted(found.items()):
            print(f"{key}  ({why})")
        return 0
    allowed = read_allowlist()
    new = sorted(set(found) - allowed)
    stale = sorted(allowed - set(found))
    for key in new:
        path, function = key.split(":", 1)
        print(
            f"{path}: {function} ({found[key]}) is over the function limits; split it into named steps "
            f"(tools/dev/function_limits.py says how it measures)"
        )
    for key in stale:
        print(f"{ALLOWLIST_NAME}: {key} is no longer over the limits (or is gone); remove its line")
    for path, lines in sorted(long_files.items()):
        print(f"{path}: {lines} lines > {MAX_FILE_LINES}; split it by the jobs it holds")
    limits = f"{MAX_LENGTH} lines or complexity {MAX_COMPLEXITY}"
    print(
        f"function limits: {len(found)} functions over {limits}, {len(allowed)} allowed; "
        f"{len(long_files)} files over {MAX_FILE_LINES} lines"
    )
    return 1 if new or stale or long_files else 0


if __name__ == "__main__":
    sys.exit(main())
