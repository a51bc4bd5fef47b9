// A memref descriptor of any rank, laid out as MLIR's StridedMemRefType<float, rank>:
// {allocated pointer, aligned pointer, offset, sizes[rank], strides[rank]}.
#ifndef GPT_CC_RUNTIME_MEMREFDESCRIPTOR_H
#define GPT_CC_RUNTIME_MEMREFDESCRIPTOR_H

#include <cstdint>
#include <vector>

namespace gpt {

class MemRefDescriptor {
public:
  /// Describes a dense row-major buffer owned by someone else (zero-copy view of a numpy array).
  static MemRefDescriptor view(const void *data, const std::vector<int64_t> &shape) {
    MemRefDescriptor d(shape.size());
    d.words[0] = d.words[1] = reinterpret_cast<int64_t>(data);
    int64_t stride = 1;
    for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
      d.words[3 + i] = shape[i];
      d.words[3 + shape.size() + i] = stride;
      stride *= shape[i];
    }
    return d;
  }

  void *pointer() { return words.data(); }

private:
  explicit MemRefDescriptor(int64_t rank) : words(3 + 2 * rank, 0) {}
  std::vector<int64_t> words;
};

} // namespace gpt

#endif // GPT_CC_RUNTIME_MEMREFDESCRIPTOR_H
