// What identifies this build of the compiler: part of every on-disk cache key, so that a program
// compiled by one build is never loaded by another (whose passes, kernels or calling convention
// may differ), while the same build finds its programs without running its pipeline again.
#ifndef GPT_CC_RUNTIME_COMPILERIDENTITY_H
#define GPT_CC_RUNTIME_COMPILERIDENTITY_H

#include <string>

namespace gpt {

/// "build-id:<hex> compiler-build-id:<hex>": the GNU build ids of the binary this code is linked
/// into (the runtime, which calls programs) and of the compiler library (which makes them; read
/// from its file, not loaded). The linker hashes a whole binary into its id, so any change of
/// code gives another. A runtime linked without one is named "file:<path>:<bytes>:<modification
/// time>"; empty when neither can be found (then nothing is cached on disk). Computed once per
/// process.
const std::string &compilerIdentity();

} // namespace gpt

#endif // GPT_CC_RUNTIME_COMPILERIDENTITY_H
