// The on-disk compile cache: each entry is a program's shared object followed by its key and a
// checksum, so that the dynamic loader maps the entry itself. Entries are written atomically with
// owner-only permissions, and read only from a regular file in a directory that no other user can
// write (loading a program runs its code). The cache is bounded: after each write the least
// recently used entries are removed until it fits its size cap.
#ifndef GPT_CC_RUNTIME_OBJECTCACHE_H
#define GPT_CC_RUNTIME_OBJECTCACHE_H

#include "cc/runtime/CompileOptions.h"

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpt {

class ObjectCache {
public:
  /// One stored program, as entries() lists it.
  struct Entry {
    std::string path;
    uint64_t bytes = 0;
    /// When the entry was last written or loaded (its modification time), in seconds since the
    /// epoch: eviction removes the smallest first.
    double lastUsed = 0;
  };

  /// `directory` is created (owner-only) on the first write. After each write, entries are evicted
  /// least recently used first until their total size is at most `maxBytes`.
  explicit ObjectCache(std::string directory, uint64_t maxBytes = kDefaultCacheMaxBytes)
      : directory(std::move(directory)), maxBytes(maxBytes) {}

  /// Throws std::runtime_error naming the directory when it exists and users other than its
  /// owner may write into it: code placed there would be loaded and run.
  void checkDirectory() const;

  /// The program stored under `key` (a 32-byte digest of the program, which the entry records and
  /// names the file by), or nullopt when there is no entry or it fails a check: not a regular
  /// file (a FIFO, a symlink), too short or too large, another key's entry, or bytes whose
  /// checksum does not match. With `openFile`, a found entry's file is left open there, read
  /// only, for the caller to load from and close: the very file that was checked.
  std::optional<std::string> read(llvm::StringRef key, int *openFile = nullptr) const;

  /// Stores `object` under `key`: written to a private temporary file, flushed to disk, then
  /// renamed over the entry; then evicts to the size cap (never the entry just written).
  /// Best effort: returns false (and leaves no temporary) when any step fails, a full disk
  /// included.
  bool write(llvm::StringRef key, llvm::StringRef object) const;

  /// Where the entry of `key` lives.
  std::string pathFor(llvm::StringRef key) const;

  /// The entries in the directory, most recently used first (none when it does not exist).
  std::vector<Entry> entries() const;

  /// Removes every entry, and temporaries that writers left behind; returns how many files went.
  int64_t clear() const;

  /// Removes the least recently used entries until the rest fit in `maxBytes`, keeping `keep`
  /// (a path) whatever its size, and temporaries older than an hour (a writer that died).
  void evict(const std::string &keep = "") const;

private:
  std::string directory;
  uint64_t maxBytes;
};

} // namespace gpt

#endif // GPT_CC_RUNTIME_OBJECTCACHE_H
