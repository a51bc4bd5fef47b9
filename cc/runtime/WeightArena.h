// One block of memory for a model's laid-out weights (packed panels, lane words, scales, the LM
// head), offered whole to transparent huge pages.
//
// Why one block: a decode step streams every weight once, hundreds of megabytes, and in 4 KiB
// pages that is a TLB miss every 64 cache lines. When each weight had its own allocation, only
// its whole 2 MiB ranges could be huge pages, and the tails past them (about a ninth of GPT-2's
// matrices: 9 MiB in 8 + 1) stayed in small pages. A C model of GPT-2 small's decode matvecs ran
// 6% slower with those tails in small pages (docs/PERFORMANCE.md, "The weights in one block").
// Packed back to back, only the block's last partly used 2 MiB range is not filled with weights.
#ifndef GPT_CC_RUNTIME_WEIGHTARENA_H
#define GPT_CC_RUNTIME_WEIGHTARENA_H

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace gpt {

class WeightArena {
public:
  /// Every allocation starts on a cache line: one zmm load, and no line shared by two weights.
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHugePage = size_t(2) << 20;

  /// Room for `expectedBytes` of allocations (the sum of what will be asked, each rounded up to
  /// kAlignment). More may be asked: the arena then maps another block for what does not fit.
  explicit WeightArena(size_t expectedBytes);
  ~WeightArena();
  WeightArena(const WeightArena &) = delete;
  WeightArena &operator=(const WeightArena &) = delete;

  /// The bytes allocate(`bytes`) takes from a block: rounded up to kAlignment (and, under
  /// AddressSanitizer, with a red zone). The sum of these is the `expectedBytes` that fits.
  static size_t footprint(size_t bytes);

  /// `bytes` uninitialized bytes aligned to kAlignment, valid until the arena is destroyed.
  /// Throws std::bad_alloc when the memory cannot be mapped.
  void *allocate(size_t bytes);
  template <typename T> T *allocateArray(int64_t count) {
    return static_cast<T *>(allocate(static_cast<size_t>(count) * sizeof(T)));
  }

  /// The mapped blocks as (start, bytes mapped): blocks of 2 MiB and more start on a 2 MiB
  /// boundary and are advised to huge pages whole, unless GPT_HUGE_PAGES=0.
  std::vector<std::pair<const void *, size_t>> blocks() const;
  /// The bytes handed out, alignment padding included.
  size_t usedBytes() const;

private:
  struct Block {
    char *start;
    size_t mapped, used;
  };
  void mapBlock(size_t bytes);
  std::vector<Block> blocks_;
};

} // namespace gpt

#endif // GPT_CC_RUNTIME_WEIGHTARENA_H
