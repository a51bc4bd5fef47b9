// The on-disk compile cache: each entry carries its key and a checksum of its object code, is
// written atomically with owner-only permissions, and is read only from a regular file in a
// directory that no other user can write (loading an object runs its code).
#ifndef GPT_CC_RUNTIME_OBJECTCACHE_H
#define GPT_CC_RUNTIME_OBJECTCACHE_H

#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace gpt {

class ObjectCache {
public:
  /// `directory` is created (owner-only) on the first write.
  explicit ObjectCache(std::string directory) : directory(std::move(directory)) {}

  /// Throws std::runtime_error naming the directory when it exists and users other than its
  /// owner may write into it: code placed there would be loaded and run.
  void checkDirectory() const;

  /// The object stored under `key` (a 32-byte digest of the program, which the entry records and
  /// names the file by), or nullopt when there is no entry
  /// or it fails a check: not a regular file (a FIFO, a symlink), too short or too large, another
  /// key's entry, or object bytes whose checksum does not match.
  std::optional<std::string> read(llvm::StringRef key) const;

  /// Stores `object` under `key`: written to a private temporary file, flushed to disk, then
  /// renamed over the entry. Best effort: returns false (and leaves no temporary) when any step
  /// fails, a full disk included.
  bool write(llvm::StringRef key, llvm::StringRef object) const;

  /// Where the entry of `key` lives.
  std::string pathFor(llvm::StringRef key) const;

private:
  std::string directory;
};

/// Writes `bytes` to `path` (created with `mode`), checking every step; throws
/// std::runtime_error naming the path and the system's reason on failure (a full disk, a missing
/// directory, /dev/full).
void writeFileChecked(const std::string &path, llvm::StringRef bytes, unsigned mode = 0644);

} // namespace gpt

#endif // GPT_CC_RUNTIME_OBJECTCACHE_H
