// The body of the compiler fuzzer, shared by the libFuzzer binary and the regression replay that
// `bazel test //tests/...` runs with the default (gcc) toolchain.
#ifndef GPT_TOOLS_FUZZ_COMPILERFUZZTARGET_H
#define GPT_TOOLS_FUZZ_COMPILERFUZZTARGET_H

#include <cstddef>
#include <cstdint>

namespace gpt::fuzz {

/// Inputs longer than this are ignored, so that every run stays fast.
constexpr size_t kMaxInputBytes = 64 * 1024;

/// Parses `data` as MLIR text with gpt-opt's dialects and, if it parses and verifies, runs every
/// named pipeline on its own clone of the module, with diagnostics captured. Errors are expected
/// results; a crash, an assertion failure, a hang or a sanitizer report is a finding, and so is a
/// verified module whose printed form does not parse back (aborts with a message).
void runCompilerOnInput(const uint8_t *data, size_t size);

} // namespace gpt::fuzz

#endif // GPT_TOOLS_FUZZ_COMPILERFUZZTARGET_H
