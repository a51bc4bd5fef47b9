#!/usr/bin/env bash
# Lints the sources: ruff over the Python of python/, tools/ and tests/ (rules in ruff.toml) and
# clang-format over the C++ (style in .clang-format), both pinned by tools/setup.sh, and the function
# limits of both languages (no function over 100 lines or complexity 30, no file over 600 lines: tools/dev/function_limits.py, by
# lizard, pinned in requirements.txt, with tools/dev/lint_allowlist.txt). Exits non-zero on any finding;
# `bash tools/lint.sh --fix` rewrites the files instead.
# Lizard rather than clang-tidy's readability-function-size for the C++: clang-tidy needs a compile
# database of the MLIR headers, which Bazel does not give cheaply, and takes minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fix=0
[[ "${1:-}" == "--fix" ]] && fix=1
cpp_files=()
while IFS= read -r f; do cpp_files+=("$f"); done < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.cc' '*.h')

echo "lint: ruff check + format over python/, tools/, tests/ ($(python3 -m ruff --version)); clang-format over ${#cpp_files[@]} C++ files ($(clang-format-19 --version | grep -o 'version [0-9.]*'))"
status=0
# No cache: ruff's is keyed by each file's content, so a check can pass from it after a new module
# appears that changes how another file's imports sort (first-party or not), as CI's fresh clone
# then reports.
export RUFF_NO_CACHE=true
if (( fix )); then
  # Every fixer runs; what ruff cannot fix is listed, and the exit status says so.
  python3 -m ruff check --fix . || status=1
  python3 -m ruff format . || status=1
  clang-format-19 -i "${cpp_files[@]}" || status=1
  exit "$status"
fi
# Every check runs, so that one pass shows every finding.
python3 -m ruff check . || status=1
python3 -m ruff format --check . || status=1
clang-format-19 --dry-run --Werror "${cpp_files[@]}" || status=1
python3 tools/dev/function_limits.py || status=1
# python/gpt/_gpt.pyi against the built extension (mypy's stubtest, pinned in requirements.txt), with
# the justified exceptions in tools/dev/stubtest_allowlist.txt; it needs `bazel build //python:gpt`.
if [[ -f bazel-bin/python/gpt/_gpt.so ]]; then
  (cd bazel-bin/python && python3 -m mypy.stubtest --mypy-config-file "$OLDPWD/tools/dev/stubtest.ini" \
    --allowlist "$OLDPWD/tools/dev/stubtest_allowlist.txt" gpt._gpt) || status=1
else
  echo "lint: stubtest of gpt._gpt skipped: bazel-bin/python/gpt/_gpt.so is not built (bazel build //python:gpt)"
fi
exit "$status"
