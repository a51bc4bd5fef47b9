// The C functions compiled programs call besides libc, libm and libomp: `memrefCopy`, which MLIR's
// memref-to-LLVM lowering emits for a memref.copy between buffers that are not both contiguous (a
// KV cache's strided view, say). MLIR's own is in libmlir_c_runner_utils.so, which depends on
// libLLVM.so: a program linked against it would map all of LLVM into every process that runs one.
// This library is built as gpt/_gpt_program_support.so, and the runtime loads it into the global
// scope before the first program (cc/runtime/SharedObject.cpp), so programs find the symbol there.
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

/// A ranked memref's descriptor as the LLVM lowering lays it out: two pointers, an offset, then
/// `rank` sizes and `rank` strides (in elements).
struct Descriptor {
  char *allocated;
  char *aligned;
  int64_t offset;
  int64_t shapeAndStrides[]; // sizes[rank], strides[rank]
};

/// An unranked memref as it is passed by value: its rank and a pointer to its ranked descriptor.
struct UnrankedMemRef {
  int64_t rank;
  Descriptor *descriptor;
};

} // namespace

/// Copies every element of `source` into `target`, which have the same shape; elements are
/// `elementSize` bytes. Runs of elements that are contiguous in both (the innermost dimension
/// with stride 1) are copied with one memcpy.
extern "C" __attribute__((visibility("default"))) void memrefCopy(int64_t elementSize, UnrankedMemRef *source,
                                                                  UnrankedMemRef *target) {
  const int64_t rank = source->rank;
  const Descriptor &from = *source->descriptor, &to = *target->descriptor;
  const int64_t *sizes = from.shapeAndStrides, *fromStrides = from.shapeAndStrides + rank;
  const int64_t *toStrides = to.shapeAndStrides + rank;
  char *fromBase = from.aligned + from.offset * elementSize, *toBase = to.aligned + to.offset * elementSize;
  if (rank == 0) {
    std::memcpy(toBase, fromBase, elementSize);
    return;
  }
  for (int64_t d = 0; d < rank; ++d)
    if (sizes[d] == 0) return;
  // The innermost dimension is copied as a run when both sides have unit stride there.
  const int64_t inner = sizes[rank - 1];
  const bool innerRun = fromStrides[rank - 1] == 1 && toStrides[rank - 1] == 1;
  std::vector<int64_t> index(rank, 0); // over the outer dimensions, odometer style
  for (;;) {
    int64_t fromAt = 0, toAt = 0;
    for (int64_t d = 0; d + 1 < rank; ++d) {
      fromAt += index[d] * fromStrides[d];
      toAt += index[d] * toStrides[d];
    }
    if (innerRun) {
      std::memcpy(toBase + toAt * elementSize, fromBase + fromAt * elementSize, inner * elementSize);
    } else {
      for (int64_t i = 0; i < inner; ++i)
        std::memcpy(toBase + (toAt + i * toStrides[rank - 1]) * elementSize,
                    fromBase + (fromAt + i * fromStrides[rank - 1]) * elementSize, elementSize);
    }
    int64_t d = rank - 2;
    for (; d >= 0; --d) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}
