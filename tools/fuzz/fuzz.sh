#!/usr/bin/env bash
# Builds the compiler fuzzer (clang-19, libFuzzer + ASan + UBSan) and runs it for a bounded time:
#   bash tools/fuzz/fuzz.sh [SECONDS]   (default 180)
# Seeds come from the .mlir files under tests/ and tools/dev/demo/ (tools/fuzz/make_seed_corpus.py):
# GPT_FUZZ_SEEDS of them (default 40), round-robin over the files, smallest first, so that a bounded
# run mutates for most of its time instead of replaying hundreds of whole models (0: every case); the
# corpus the fuzzer grows is kept in $GPT_FUZZ_DIR/corpus between runs. Crashes, timeouts (those
# whose input is slow again on replay) and out-of-memory inputs land in $GPT_FUZZ_DIR/crashes, and
# the script exits non-zero if there are any.
# Each fixed crash goes, minimized (-minimize_crash=1), into tests/fuzz/regressions/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

seconds="${1:-180}"
work="${GPT_FUZZ_DIR:-${TMPDIR:-/tmp}/gpt-fuzz}"
# The sanitized build's output base (tools/dev/bazel_sanitized.sh), shared with the ASan tests.
bash tools/dev/bazel_sanitized.sh build --config=fuzz //tools/fuzz:gpt_opt_fuzzer
fuzzer="$(bash tools/dev/bazel_sanitized.sh info --config=fuzz bazel-bin)/tools/fuzz/gpt_opt_fuzzer"
# The second Bazel server would hold its memory while the fuzzer runs (and after, in CI).
bash tools/dev/bazel_sanitized.sh shutdown

mkdir -p "$work/corpus" "$work/crashes"
stamp="$work/.run-started"
touch "$stamp"
rm -rf "$work/seeds"
seed_limit="${GPT_FUZZ_SEEDS:-40}"
if [[ "$seed_limit" == 0 ]]; then
  python3 tools/fuzz/make_seed_corpus.py "$work/seeds"
else
  python3 tools/fuzz/make_seed_corpus.py "$work/seeds" --limit "$seed_limit"
fi

# A crash stops the run (one input per finding) unless GPT_FUZZ_KEEP_GOING=1, which fuzzes in a
# child process and goes on after each finding. -timeout makes a hang a finding, -rss_limit_mb an
# out-of-memory. Leaks of the uninstrumented MLIR libraries are not findings.
keep_going=()
# GPT_FUZZ_SEED fixes libFuzzer's random seed (CI), so that a run can be repeated.
if [[ -n "${GPT_FUZZ_SEED:-}" ]]; then keep_going+=(-seed="$GPT_FUZZ_SEED"); fi
if [[ "${GPT_FUZZ_KEEP_GOING:-0}" == 1 ]]; then
  keep_going+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
fi
log="$work/fuzz.log"
# The progress lines ("#1234 NEW ...", "NEW_FUNC[...]") go to the log only; the fuzzer's status is the pipe's first.
set +e
ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}" UBSAN_OPTIONS="print_stacktrace=1:${UBSAN_OPTIONS:-}" "$fuzzer" "${keep_going[@]}" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
  -dict=tools/fuzz/transformer.dict -artifact_prefix="$work/crashes/" -print_final_stats=1 \
  "$work/corpus" "$work/seeds" 2>&1 | tee "$log" | grep -vE '^(#[0-9]+|[[:space:]]+NEW_FUNC)'
status="${PIPESTATUS[0]}"
set -e

# A timeout is a finding when its input is slow again on its own: a 2-core machine busy with
# something else can stretch one slow, finite input past -timeout under ASan (seen once in CI,
# 11 s, not reproduced in three runs of the same seed). An input that finishes on replay is
# kept aside in $work/slow and named, not counted; a hang times out again.
mkdir -p "$work/slow"
timeouts=$(find "$work/crashes" -type f -name 'timeout-*' -newer "$stamp")
for input in $timeouts; do
  if ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}" "$fuzzer" -timeout=10 -rss_limit_mb=4096 -runs=1 "$input" >"$work/replay.log" 2>&1; then
    mv "$input" "$work/slow/"
    echo "fuzz: $(basename "$input") took over 10 s once but finished on replay: kept in $work/slow, not a finding"
    status=0
  fi
done

# libFuzzer's final statistics: whether the run mutated (new units) or only replayed its seeds.
stat() { grep -oE "^stat::$1: *[0-9]+" "$log" | tail -1 | grep -oE '[0-9]+$' || echo "?"; }
found=$(find "$work/crashes" -type f -newer "$stamp" | wc -l)
echo "fuzz: ${seconds}s, $(stat number_of_executed_units) executions ($(stat average_exec_per_sec) exec/s), $(stat new_units_added) new units, corpus $(find "$work/corpus" -type f | wc -l) inputs in $work/corpus, ${found} new finding(s) in $work/crashes"
if (( status != 0 || found > 0 )); then
  echo "fuzz: FAILED: reproduce with $fuzzer FILE; minimize with $fuzzer -minimize_crash=1 -runs=10000 FILE" >&2
  exit 1
fi
