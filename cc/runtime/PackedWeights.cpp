// Writing and reading a model's laid-out weights (see PackedWeights.h).
//
// The file: "GPTPACK1", the header's length and the data's checksum (little-endian uint64s), the
// header (the key, then one "name bytes" line per region), zeros up to the next 4 KiB, then the
// regions, each starting on a 64-byte boundary of the data. The checksum adds up every 64-bit
// word of the data, xor'ed with its index and multiplied by an odd constant: a bijection per word,
// so any one changed word changes the sum; and a sum, so that threads reading parts of the file
// each add their share.
#include "cc/runtime/PackedWeights.h"

#include "cc/kernels/ParallelFor.h"
#include "cc/runtime/Files.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace gpt {
namespace {

constexpr char kMagic[8] = {'G', 'P', 'T', 'P', 'A', 'C', 'K', '1'};
constexpr size_t kPrefixBytes = sizeof(kMagic) + 2 * sizeof(uint64_t);
constexpr size_t kDataAlignment = 4096, kRegionAlignment = 64;
// A read's unit of work: large enough that a thread's share is a few calls, small enough that two
// threads split a 100 MB weight evenly.
constexpr size_t kChunkBytes = size_t(16) << 20;
constexpr uint64_t kMix = 0x9E3779B97F4A7C15ull;
// No region list of a real model comes near this: a header past it is not one of ours.
constexpr uint64_t kMaxHeaderBytes = uint64_t(16) << 20;

size_t alignUp(size_t value, size_t alignment) { return (value + alignment - 1) / alignment * alignment; }

std::string headerText(const std::string &key, const std::vector<PackedRegion> &regions) {
  std::string text = key + "\n";
  for (const PackedRegion &region : regions) text += region.name + " " + std::to_string(region.bytes) + "\n";
  return text;
}

/// The checksum's share of `bytes` at `data`, whose first word is the data's word `firstWord`.
uint64_t checksumOf(const void *data, size_t bytes, uint64_t firstWord) {
  const auto *words = static_cast<const unsigned char *>(data);
  uint64_t sum = 0;
  const size_t whole = bytes / sizeof(uint64_t);
  for (size_t i = 0; i < whole; ++i) {
    uint64_t word;
    std::memcpy(&word, words + i * sizeof(uint64_t), sizeof(word));
    sum += (word ^ (firstWord + i)) * kMix;
  }
  if (size_t tail = bytes % sizeof(uint64_t)) {
    uint64_t word = 0;
    std::memcpy(&word, words + whole * sizeof(uint64_t), tail);
    sum += (word ^ (firstWord + whole)) * kMix;
  }
  return sum;
}

/// Where each region starts in the data, and the data's bytes.
std::vector<size_t> regionOffsets(const std::vector<PackedRegion> &regions, size_t &dataBytes) {
  std::vector<size_t> offsets;
  size_t at = 0;
  for (const PackedRegion &region : regions) {
    offsets.push_back(at);
    at = alignUp(at + region.bytes, kRegionAlignment);
  }
  dataBytes = at;
  return offsets;
}

/// A part of one region: what one read call fills.
struct Chunk {
  size_t region, offset, bytes;
};

std::vector<Chunk> chunksOf(const std::vector<PackedRegion> &regions) {
  std::vector<Chunk> chunks;
  for (size_t r = 0; r < regions.size(); ++r)
    for (size_t offset = 0; offset < regions[r].bytes; offset += kChunkBytes)
      chunks.push_back({r, offset, std::min(kChunkBytes, regions[r].bytes - offset)});
  return chunks;
}

bool preadAll(int fd, void *destination, size_t bytes, off_t at) {
  auto *out = static_cast<char *>(destination);
  while (bytes > 0) {
    ssize_t got = ::pread(fd, out, bytes, at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    at += got;
    bytes -= static_cast<size_t>(got);
  }
  return true;
}

class FileDescriptor {
public:
  explicit FileDescriptor(int fd) : fd(fd) {}
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
  FileDescriptor(const FileDescriptor &) = delete;
  FileDescriptor &operator=(const FileDescriptor &) = delete;
  int get() const { return fd; }
  /// Closes it now, as ::close does (0, or -1 with errno); the destructor then has nothing to do.
  int close() {
    const int result = ::close(fd);
    fd = -1;
    return result;
  }

private:
  int fd;
};

[[noreturn]] void failWrite(const std::string &path, const std::string &temporary, const char *step) {
  std::string reason = std::strerror(errno);
  ::unlink(temporary.c_str());
  throw std::runtime_error("writing the packed weights " + path + ": " + step + " failed: " + reason);
}

} // namespace

void writePackedWeights(const std::string &path, const std::string &key, const std::vector<PackedRegion> &regions) {
  size_t dataBytes = 0;
  const std::vector<size_t> offsets = regionOffsets(regions, dataBytes);
  uint64_t checksum = 0;
  for (size_t r = 0; r < regions.size(); ++r)
    checksum += checksumOf(regions[r].address, regions[r].bytes, offsets[r] / sizeof(uint64_t));
  const std::string header = headerText(key, regions);
  std::string prefix(kMagic, sizeof(kMagic));
  const uint64_t numbers[2] = {header.size(), checksum};
  prefix.append(reinterpret_cast<const char *>(numbers), sizeof(numbers));
  prefix += header;
  prefix.resize(alignUp(prefix.size(), kDataAlignment), '\0');

  // Beside its final name, so that the rename stays in one file system; unique per process.
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  FileDescriptor fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (fd.get() < 0) failWrite(path, temporary, "open");
  if (!writeAll(fd.get(), prefix)) failWrite(path, temporary, "write");
  const std::string padding(kRegionAlignment, '\0');
  size_t at = 0;
  for (size_t r = 0; r < regions.size(); ++r) {
    if (!writeAll(fd.get(), std::string_view(padding.data(), offsets[r] - at))) failWrite(path, temporary, "write");
    if (!writeAll(fd.get(), std::string_view(static_cast<const char *>(regions[r].address), regions[r].bytes)))
      failWrite(path, temporary, "write");
    at = offsets[r] + regions[r].bytes;
  }
  if (!writeAll(fd.get(), std::string_view(padding.data(), dataBytes - at))) failWrite(path, temporary, "write");
  // A full disk may only show at close, when the file system writes back.
  if (fd.close() != 0) failWrite(path, temporary, "close");
  if (::rename(temporary.c_str(), path.c_str()) != 0) failWrite(path, temporary, "rename");
}

bool readPackedWeights(const std::string &path, const std::string &key, const std::vector<PackedRegion> &regions,
                       int64_t threads) {
  // Never through a link: an entry is a regular file the cache wrote.
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) return false;
  struct stat status;
  if (::fstat(fd.get(), &status) != 0 || !S_ISREG(status.st_mode)) return false;
  char prefix[kPrefixBytes];
  if (!preadAll(fd.get(), prefix, sizeof(prefix), 0) || std::memcmp(prefix, kMagic, sizeof(kMagic)) != 0) return false;
  uint64_t numbers[2];
  std::memcpy(numbers, prefix + sizeof(kMagic), sizeof(numbers));
  const std::string expected = headerText(key, regions);
  if (numbers[0] != expected.size() || numbers[0] > kMaxHeaderBytes) return false;
  std::string header(expected.size(), '\0');
  if (!preadAll(fd.get(), header.data(), header.size(), kPrefixBytes) || header != expected) return false;
  size_t dataBytes = 0;
  const std::vector<size_t> offsets = regionOffsets(regions, dataBytes);
  const size_t dataStart = alignUp(kPrefixBytes + header.size(), kDataAlignment);
  if (static_cast<uint64_t>(status.st_size) != dataStart + dataBytes) return false;

  const std::vector<Chunk> chunks = chunksOf(regions);
  std::atomic<uint64_t> checksum{0};
  std::atomic<bool> readable{true};
  kernels::parallelFor(static_cast<int64_t>(chunks.size()), threads, [&](int64_t begin, int64_t end) {
    uint64_t share = 0;
    for (int64_t c = begin; c < end && readable.load(std::memory_order_relaxed); ++c) {
      const Chunk &chunk = chunks[c];
      char *destination = static_cast<char *>(regions[chunk.region].address) + chunk.offset;
      const size_t at = offsets[chunk.region] + chunk.offset;
      if (!preadAll(fd.get(), destination, chunk.bytes, static_cast<off_t>(dataStart + at))) {
        readable = false;
        return;
      }
      // Summed while the chunk is in cache.
      share += checksumOf(destination, chunk.bytes, at / sizeof(uint64_t));
    }
    checksum += share;
  });
  return readable && checksum == numbers[1];
}

} // namespace gpt
