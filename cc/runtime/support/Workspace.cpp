// The heap of compiled programs: MLIR's memref-to-LLVM lowering calls these three functions
// (FinalizeMemRefToLLVMConversionPassOptions::useGenericFunctions, cc/codegen/cpu/Pipelines.cpp)
// where it would call malloc and free. A prefill allocates the same large temporaries on every
// call (a layer's activations, the FFN's hidden rows: 32 MiB and more at 512 tokens of a 1.7B
// model), which glibc hands out as freshly mapped pages and unmaps when they are freed, so every
// call faulted them in again: 12-20% of a 512-token prefill's CPU time at 1.7B. Freed blocks of at
// least kKeepFrom bytes are kept, by size and alignment, for the next allocation of the same size,
// up to kKeepAtMost bytes in all (the temporaries of one call stay resident between calls, as a
// compute buffer does in other engines); smaller ones go back to malloc, which reuses them itself.
// gpt_workspace_release() frees what is kept (cc/runtime/ReleaseMemory.cpp calls it).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

namespace {

constexpr size_t kKeepFrom = size_t(1) << 20;
constexpr size_t kKeepAtMost = size_t(1) << 30;
/// Every block is aligned to a cache line at least, and its header sits in the alignment's bytes
/// before the pointer handed out.
constexpr size_t kMinAlignment = 64;

/// What _mlir_memref_to_llvm_free needs to know of a block: it is given only the pointer.
struct Header {
  void *base;       ///< what aligned_alloc returned
  size_t bytes;     ///< the size of the allocation at base
  size_t alignment; ///< its alignment: the pointer handed out is base + alignment
};
static_assert(sizeof(Header) <= kMinAlignment, "the header must fit in the smallest alignment");

using BlockKey = std::pair<size_t, size_t>; // bytes, alignment

struct KeptBlocks {
  std::mutex mutex;
  std::multimap<BlockKey, void *> blocks; // the pointers once handed out, their headers intact
  size_t bytes = 0;
};

KeptBlocks &kept() {
  // Never destroyed: a program may free a block from a thread that outlives static destruction.
  static KeptBlocks *blocks = new KeptBlocks();
  return *blocks;
}

void *allocate(size_t size, size_t alignment) {
  if (alignment < kMinAlignment || (alignment & (alignment - 1)) != 0) alignment = kMinAlignment;
  if (size > SIZE_MAX - 2 * alignment) return nullptr;
  // The header's bytes, then the request, rounded up to the alignment as aligned_alloc requires.
  const size_t bytes = (alignment + size + alignment - 1) / alignment * alignment;
  if (bytes >= kKeepFrom) {
    KeptBlocks &blocks = kept();
    std::lock_guard<std::mutex> lock(blocks.mutex);
    auto found = blocks.blocks.find({bytes, alignment});
    if (found != blocks.blocks.end()) {
      void *pointer = found->second;
      blocks.blocks.erase(found);
      blocks.bytes -= bytes;
      return pointer;
    }
  }
  void *base = std::aligned_alloc(alignment, bytes);
  if (!base) return nullptr;
  char *pointer = static_cast<char *>(base) + alignment;
  reinterpret_cast<Header *>(pointer)[-1] = Header{base, bytes, alignment};
  return pointer;
}

} // namespace

extern "C" __attribute__((visibility("default"))) void *_mlir_memref_to_llvm_alloc(size_t size) {
  return allocate(size, kMinAlignment);
}

extern "C" __attribute__((visibility("default"))) void *_mlir_memref_to_llvm_aligned_alloc(size_t alignment,
                                                                                           size_t size) {
  return allocate(size, alignment);
}

extern "C" __attribute__((visibility("default"))) void _mlir_memref_to_llvm_free(void *pointer) {
  if (!pointer) return;
  const Header header = reinterpret_cast<Header *>(pointer)[-1];
  if (header.bytes >= kKeepFrom) {
    KeptBlocks &blocks = kept();
    std::lock_guard<std::mutex> lock(blocks.mutex);
    if (blocks.bytes + header.bytes <= kKeepAtMost) {
      blocks.blocks.emplace(BlockKey{header.bytes, header.alignment}, pointer);
      blocks.bytes += header.bytes;
      return;
    }
  }
  std::free(header.base);
}

/// Frees every kept block; returns how many bytes went back to malloc.
extern "C" __attribute__((visibility("default"))) size_t gpt_workspace_release() {
  KeptBlocks &blocks = kept();
  std::lock_guard<std::mutex> lock(blocks.mutex);
  const size_t released = blocks.bytes;
  for (auto &[key, pointer] : blocks.blocks) std::free(reinterpret_cast<Header *>(pointer)[-1].base);
  blocks.blocks.clear();
  blocks.bytes = 0;
  return released;
}

/// How many bytes are kept for reuse now.
extern "C" __attribute__((visibility("default"))) size_t gpt_workspace_kept_bytes() {
  KeptBlocks &blocks = kept();
  std::lock_guard<std::mutex> lock(blocks.mutex);
  return blocks.bytes;
}
