#!/usr/bin/env bash
# Installs the pinned toolchain, lints the sources (tools/lint.sh) and runs every test
# (`bazel test //tests/...`); then, unless --quick, the sanitizer subset under ASan + UBSan, a
# bounded fuzzing run of the compiler (tools/fuzz/fuzz.sh) and one of the model-file loaders
# (tools/fuzz/fuzz_loaders.py). Ends with one "N passed, N failed" line (each stage after
# the tests counts as one). Other arguments go to the first bazel test.
#
#   bash tools/test.sh            everything, what CI (.ci/run) runs
#   bash tools/test.sh --quick    lint and bazel test //tests/... only
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=0
arguments=()
for argument in "$@"; do
  if [[ "$argument" == --quick ]]; then quick=1; else arguments+=("$argument"); fi
done

# The tests that also run under ASan + UBSan: every C++ layer (the FileCheck tests drive gpt-opt;
# the fuzzer's regression corpus drives the replay; the Python tests the runtime, the kernels and
# the binding), chosen to fit CI's time. The numerics tests over large shapes, and the tests
# that spend their time in subprocesses, pass under `bazel test --config=asan //tests/...` too
# but take about 25 minutes there.
SANITIZED_TESTS=(
  //tests/dialect/...
  //tests/conversion/...
  //tests/codegen/...
  //tests/fuzz/...
  //tests/python/hostile:test_bad_input
  //tests/python/compiler:test_compiler
  //tests/python/package:test_model_api
  //tests/python/formats:test_packing
  //tests/python/formats:test_quantization
  //tests/python/hostile:test_resource_limits
  //tests/python/engine:test_sampling
  //tests/python/package:test_threads
)
# Seconds of fuzzing in CI (tools/fuzz/fuzz.sh alone defaults to 180).
FUZZ_SECONDS="${GPT_CI_FUZZ_SECONDS:-45}"

bash tools/setup.sh || exit 1
# Lint's stubtest checks python/gpt/_gpt.pyi against the built extension: build it first (a build
# error shows again, with the tests, below).
bazel build //python:gpt >/dev/null 2>&1
bash tools/lint.sh
lint_status=$?
log="$(mktemp)"

# Runs `bazel test` with the given arguments, counting its targets into passed/failed.
passed=0
failed=0
status=0
run_tests() {
  "${bazel[@]}" test "$@" 2>&1 | tee "$log"
  local result="${PIPESTATUS[0]}"
  local ok bad
  ok="$(grep -cE '^//tests/.* PASSED' "$log")"
  bad="$(grep -cE '^//tests/.* (FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")"
  if [[ "$result" != 0 && "$bad" == 0 ]]; then bad=1; fi # a build error fails before any test
  passed=$((passed + ok))
  failed=$((failed + bad))
  if [[ "$result" != 0 ]]; then status=1; fi
}

bazel=(bazel)
run_tests //tests/... "${arguments[@]}"
if [[ "$quick" == 0 ]]; then
  echo "test: the sanitizer subset under ASan + UBSan (clang; tools/dev/bazel_sanitized.sh test --config=asan)"
  bazel=(bash tools/dev/bazel_sanitized.sh)
  run_tests --config=asan "${SANITIZED_TESTS[@]}"
  echo "test: fuzzing the compiler for ${FUZZ_SECONDS} s (tools/fuzz/fuzz.sh, a fresh corpus, seed 1)"
  fuzz_dir="$(mktemp -d)"
  if GPT_FUZZ_DIR="$fuzz_dir" GPT_FUZZ_SEED=1 bash tools/fuzz/fuzz.sh "$FUZZ_SECONDS"; then
    passed=$((passed + 1))
  else
    echo "fuzz: FAILED (its inputs are kept in $fuzz_dir/crashes for tools/fuzz/fuzz.sh's reproduce line)"
    keep_fuzz_dir=1
    failed=$((failed + 1))
    status=1
  fi
  # The loaders of files from strangers (GGUF, HF directories, chat templates, GPU artifacts):
  # structure-aware mutations of small valid inputs, each loaded in a worker under time and
  # address-space limits; GPT_CI_LOADER_FUZZ_SECONDS.
  loader_fuzz_seconds="${GPT_CI_LOADER_FUZZ_SECONDS:-20}"
  echo "test: fuzzing the model-file loaders for ${loader_fuzz_seconds} s (tools/fuzz/fuzz_loaders.py, seed 1)"
  loader_fuzz_dir="$(mktemp -d)"
  if bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/fuzz/fuzz_loaders.py \
    --seconds "$loader_fuzz_seconds" --seed 1 --out "$loader_fuzz_dir"; then
    passed=$((passed + 1))
    rm -rf "$loader_fuzz_dir"
  else
    echo "loader fuzz: FAILED (findings in $loader_fuzz_dir/findings)"
    failed=$((failed + 1))
    status=1
  fi
fi
rm -f "$log"
if [[ -n "${fuzz_dir:-}" && -z "${keep_fuzz_dir:-}" ]]; then rm -rf "$fuzz_dir"; fi
if [[ "$lint_status" != 0 ]]; then
  echo "lint: FAILED (bash tools/lint.sh lists the findings; --fix rewrites what ruff and clang-format can)"
  failed=$((failed + 1))
  status=1
fi
echo "${passed} passed, ${failed} failed"
exit "$status"
