// Handing freed heap memory back to the operating system after the load-time and compile-time
// peaks, so that a loaded model's resident size is what it keeps, not what it once used.
#ifndef GPT_CC_RUNTIME_RELEASEMEMORY_H
#define GPT_CC_RUNTIME_RELEASEMEMORY_H

namespace gpt {

/// Frees the temporaries programs keep for their next call (their workspace), then returns the free
/// pages of the C heap to the system (glibc's malloc_trim; nothing elsewhere).
/// glibc keeps freed memory for reuse: binding weights frees their float32 and code temporaries,
/// and compiling frees MLIR's and LLVM's modules, tens of MB each time, that would otherwise stay
/// resident for the life of the process (docs/PERFORMANCE.md, SmolLM2's memory after load).
void releaseFreedMemory();

} // namespace gpt

#endif // GPT_CC_RUNTIME_RELEASEMEMORY_H
