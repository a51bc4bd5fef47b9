// See WeightArena.h.
#include "cc/runtime/WeightArena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <string_view>

// Under AddressSanitizer the block is poisoned but for what is handed out, and each allocation
// is followed by a poisoned red zone: a layout kernel that writes past its weight is reported
// instead of silently overwriting the next one, as it would be with separate heap allocations.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPT_WEIGHT_ARENA_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define GPT_WEIGHT_ARENA_ASAN 1
#endif
#ifdef GPT_WEIGHT_ARENA_ASAN
#include <sanitizer/asan_interface.h>
#define GPT_POISON(address, bytes) ASAN_POISON_MEMORY_REGION(address, bytes)
#define GPT_UNPOISON(address, bytes) ASAN_UNPOISON_MEMORY_REGION(address, bytes)
#else
#define GPT_POISON(address, bytes) ((void)(address), (void)(bytes))
#define GPT_UNPOISON(address, bytes) ((void)(address), (void)(bytes))
#endif

namespace gpt {

namespace {
#ifdef GPT_WEIGHT_ARENA_ASAN
constexpr size_t kRedZone = WeightArena::kAlignment;
#else
constexpr size_t kRedZone = 0;
#endif

/// False when `GPT_HUGE_PAGES=0`: to measure what huge pages bring, or to keep weights in small pages.
bool hugePagesWanted() {
  const char *setting = std::getenv("GPT_HUGE_PAGES");
  return !(setting && std::string_view(setting) == "0");
}

size_t roundUp(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }
} // namespace

WeightArena::WeightArena(size_t expectedBytes) {
  if (expectedBytes > 0) mapBlock(expectedBytes);
}

WeightArena::~WeightArena() {
  for (const Block &block : blocks_) {
    GPT_UNPOISON(block.start, block.mapped); // a later mapping of these addresses starts clean
    munmap(block.start, block.mapped);
  }
}

void WeightArena::mapBlock(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const bool huge = bytes >= kHugePage && hugePagesWanted();
  const size_t alignment = huge ? kHugePage : page;
  const size_t length = roundUp(bytes, alignment);
  // mmap promises only page alignment: map one alignment more and unmap the ends around the
  // aligned range.
  const size_t slack = alignment > page ? alignment : 0;
  void *mapped = mmap(nullptr, length + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  char *raw = static_cast<char *>(mapped);
  char *start = reinterpret_cast<char *>(roundUp(reinterpret_cast<uintptr_t>(raw), alignment));
  if (start > raw) munmap(raw, start - raw);
  if (char *end = start + length; raw + length + slack > end) munmap(end, raw + length + slack - end);
#ifdef MADV_HUGEPAGE
  // Advice only: where huge pages are off or unavailable, the block keeps small pages. The block's
  // last 2 MiB range is advised too: its unused part costs at most one partly filled huge page,
  // where per-weight tails in small pages cost the whole model's speed.
  if (huge) madvise(start, length, MADV_HUGEPAGE);
#endif
  GPT_POISON(start, length);
  blocks_.push_back(Block{start, length, 0});
}

size_t WeightArena::footprint(size_t bytes) { return roundUp(std::max<size_t>(bytes, 1) + kRedZone, kAlignment); }

void *WeightArena::allocate(size_t bytes) {
  const size_t rounded = footprint(bytes);
  if (blocks_.empty() || blocks_.back().mapped - blocks_.back().used < rounded) mapBlock(rounded);
  Block &block = blocks_.back();
  void *address = block.start + block.used;
  block.used += rounded;
  GPT_UNPOISON(address, bytes);
  return address;
}

std::vector<std::pair<const void *, size_t>> WeightArena::blocks() const {
  std::vector<std::pair<const void *, size_t>> result;
  for (const Block &block : blocks_) result.emplace_back(block.start, block.mapped);
  return result;
}

size_t WeightArena::usedBytes() const {
  size_t used = 0;
  for (const Block &block : blocks_) used += block.used;
  return used;
}

} // namespace gpt
