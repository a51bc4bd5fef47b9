#!/usr/bin/env bash
# Runs bazel in the output base of the sanitized (clang, ASan + UBSan + fuzzer coverage) build:
#   bash tools/dev/bazel_sanitized.sh test --config=asan //tests/dialect/...
# A base of its own: --config=asan switches the C++ toolchain to clang, which in the everyday
# output base would replace the gcc toolchain and force it to reconfigure. tools/test.sh (the
# sanitizer subset) and tools/fuzz/fuzz.sh (the fuzzer) share it, so the instrumented objects are built
# once for both.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
output_base="${GPT_SANITIZED_OUTPUT_BASE:-${HOME}/.cache/gpt-sanitized-bazel/$(pwd | md5sum | cut -c1-12)}"
exec bazel --output_base="$output_base" "$@"
