#!/usr/bin/env bash
# Installs the pinned toolchain, lints the sources (tools/lint.sh) and runs every test
# (`bazel test //tests/...`), ending with one "N passed, N failed" line. Extra arguments go to
# bazel test (e.g. --config=asan).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/setup.sh || exit 1
bash tools/lint.sh
lint_status=$?
log="$(mktemp)"
bazel test //tests/... "$@" 2>&1 | tee "$log"
status="${PIPESTATUS[0]}"
passed="$(grep -cE '^//tests/.* PASSED' "$log")"
failed="$(grep -cE '^//tests/.* (FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")"
rm -f "$log"
if [[ "$status" != 0 && "$failed" == 0 ]]; then failed=1; fi  # a build error fails before any test
if [[ "$lint_status" != 0 ]]; then
  echo "lint: FAILED (bash tools/lint.sh lists the findings; bash tools/lint.sh --fix rewrites the files)"
  failed=$((failed + 1))
  [[ "$status" == 0 ]] && status=1
fi
echo "${passed} passed, ${failed} failed"
exit "$status"
