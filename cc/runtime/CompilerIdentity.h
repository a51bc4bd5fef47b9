// What identifies this build of the compiler: part of every on-disk cache key, so that a program
// compiled by one build is never loaded by another (whose passes, kernels or calling convention
// may differ), while the same build finds its programs without running its pipeline again.
#ifndef GPT_CC_RUNTIME_COMPILERIDENTITY_H
#define GPT_CC_RUNTIME_COMPILERIDENTITY_H

#include <string>

namespace gpt {

/// "build-id:<hex>", the GNU build id of the binary this code is linked into (the linker hashes
/// the whole binary into it, so any change of code gives another); for a binary linked without
/// one, "file:<path>:<bytes>:<modification time>"; empty when neither can be found (then nothing
/// is cached on disk). Computed once per process.
const std::string &compilerIdentity();

} // namespace gpt

#endif // GPT_CC_RUNTIME_COMPILERIDENTITY_H
