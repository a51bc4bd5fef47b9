// libFuzzer entry point of the compiler fuzzer: MLIR text in, every named pipeline run on it.
// Built with clang by tools/fuzz/fuzz.sh (bazel --config=fuzz); the body is CompilerFuzzTarget.cpp.
#include "tools/fuzz/CompilerFuzzTarget.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gpt::fuzz::runCompilerOnInput(data, size);
  return 0;
}
