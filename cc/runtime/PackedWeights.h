// A model's laid-out weights on disk: the bytes setWeights() made (lane words, fp16 scales, f32
// panels, the LM head), written once after a load and read back by a later load of the same model
// file, so that the second start skips requantizing and repacking.
//
// Why: llama.cpp maps its file and computes on the blocks as stored; this compiler lays weights
// out for its own kernels (lanes of 4 or 8 rows, panels per target), which takes seconds at 1.7B
// and half a minute at 8B. A file of those bytes is read at the speed of the page cache instead.
// The key (written in the header) names what the bytes are a function of: the source file, the
// conversion code and each parameter's format, layout and shape; a file whose header, size or
// checksum does not match is not used.
#ifndef GPT_CC_RUNTIME_PACKEDWEIGHTS_H
#define GPT_CC_RUNTIME_PACKEDWEIGHTS_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

/// One argument's bytes: the source of a write, the destination of a read.
struct PackedRegion {
  std::string name;
  void *address;
  size_t bytes;
};

/// Writes `regions` under a header naming `key` to `path`, through a temporary in the same
/// directory renamed into place, so that a reader never sees a partial file. Throws
/// std::runtime_error naming the path and the system's reason on failure (the temporary is
/// removed).
void writePackedWeights(const std::string &path, const std::string &key, const std::vector<PackedRegion> &regions);

/// Fills `regions` from the file at `path`, split over `threads`: true when it was written for
/// `key` and exactly these regions (names and sizes, in order) and its checksum holds; false,
/// leaving the regions' contents unspecified, when the file is absent, another key's, truncated
/// or corrupt.
bool readPackedWeights(const std::string &path, const std::string &key, const std::vector<PackedRegion> &regions,
                       int64_t threads);

} // namespace gpt

#endif // GPT_CC_RUNTIME_PACKEDWEIGHTS_H
