// The on-disk compile cache (see ObjectCache.h).
#include "cc/runtime/ObjectCache.h"

#include "cc/runtime/Files.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/SHA256.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace gpt {
namespace {

// An entry: the program's shared object, so that the dynamic loader maps it from the entry's own
// file, then a trailer it ignores: the key (a SHA-256 digest of the program), the shared object's
// SHA-256, its size (8 bytes, little endian) and kMagic. Bump the magic when the layout changes.
constexpr llvm::StringLiteral kMagic = "GPTJIT2\n";
constexpr size_t kDigestBytes = 32;
constexpr size_t kTrailerBytes = 2 * kDigestBytes + 8 + kMagic.size();
// Far above any program's object code (a few MB); bounds what a damaged entry makes us read.
constexpr int64_t kMaxEntryBytes = int64_t(256) << 20;
constexpr llvm::StringLiteral kEntrySuffix = ".gptjit";
// A temporary is `<entry>.tmp.<pid>.<n>`; one this old belongs to a writer that died.
constexpr llvm::StringLiteral kTemporaryMarker = ".gptjit.tmp.";
constexpr time_t kStaleTemporarySeconds = 3600;

std::string sha256(llvm::StringRef bytes) {
  std::array<uint8_t, 32> digest = llvm::SHA256::hash(llvm::arrayRefFromStringRef(bytes));
  return std::string(digest.begin(), digest.end());
}

std::string littleEndian(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

uint64_t fromLittleEndian(llvm::StringRef bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[i]);
  return value;
}

} // namespace

std::string ObjectCache::pathFor(llvm::StringRef key) const {
  return directory + "/" + llvm::toHex(key, /*LowerCase=*/true) + ".gptjit";
}

void ObjectCache::checkDirectory() const {
  struct stat status;
  if (::stat(directory.c_str(), &status) != 0) return; // created owner-only on the first write
  if (status.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(status.st_mode & 07777));
    throw std::runtime_error("the compile cache directory " + directory + " is writable by other users (mode " + mode +
                             "), and loading code from it would run what they put there: make it private "
                             "(chmod go-w), or choose another cache_dir, or set disk_cache=False");
  }
}

std::optional<std::string> ObjectCache::read(llvm::StringRef key, int *openFile) const {
  const std::string path = pathFor(key);
  struct stat status;
  // lstat, O_NOFOLLOW and O_NONBLOCK: a symlink, a FIFO or a device at the path is never opened.
  if (::lstat(path.c_str(), &status) != 0 || !S_ISREG(status.st_mode)) return std::nullopt;
  if (status.st_size <= static_cast<off_t>(kTrailerBytes) || status.st_size > kMaxEntryBytes) return std::nullopt;
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string entry(static_cast<size_t>(status.st_size), '\0');
  size_t filled = 0;
  while (filled < entry.size()) {
    ssize_t got = ::read(fd, entry.data() + filled, entry.size() - filled);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    filled += static_cast<size_t>(got);
  }
  llvm::StringRef bytes(entry);
  llvm::StringRef trailer = bytes.take_back(kTrailerBytes);
  llvm::StringRef program = bytes.drop_back(kTrailerBytes);
  bool valid = filled == entry.size() && trailer.ends_with(kMagic) && trailer.substr(0, kDigestBytes) == key &&
               fromLittleEndian(trailer.substr(2 * kDigestBytes, 8)) == program.size() &&
               trailer.substr(kDigestBytes, kDigestBytes) == sha256(program);
  if (!valid || !openFile) ::close(fd);
  if (!valid) return std::nullopt;
  if (openFile) *openFile = fd;
  // A load is a use: eviction goes by modification time, least recent first.
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
  entry.resize(program.size());
  return entry;
}

bool ObjectCache::write(llvm::StringRef key, llvm::StringRef object) const {
  if (llvm::sys::fs::create_directories(directory, /*IgnoreExisting=*/true, llvm::sys::fs::perms::owner_all))
    return false;
  static std::atomic<uint64_t> counter{0};
  const std::string path = pathFor(key);
  const std::string temporary =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  if (key.size() != kDigestBytes) return false;
  std::string trailer = key.str() + sha256(object) + littleEndian(object.size()) + kMagic.str();
  bool ok = writeAll(fd, object) && writeAll(fd, trailer) && ::fsync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  // rename is atomic: a reader sees the old entry, or none, or the whole new one.
  ok = ok && ::rename(temporary.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(temporary.c_str());
  if (ok) evict(path);
  return ok;
}

namespace {

/// Calls `visit(name, status)` for every directory entry that is a regular file (never following
/// a symlink); nothing when the directory cannot be read.
template <typename Visit> void forEachFile(const std::string &directory, Visit visit) {
  DIR *dir = ::opendir(directory.c_str());
  if (!dir) return;
  while (struct dirent *item = ::readdir(dir)) {
    std::string path = directory + "/" + item->d_name;
    struct stat status;
    if (::lstat(path.c_str(), &status) == 0 && S_ISREG(status.st_mode)) visit(llvm::StringRef(item->d_name), status);
  }
  ::closedir(dir);
}

double modificationSeconds(const struct stat &status) {
  return static_cast<double>(status.st_mtim.tv_sec) + 1e-9 * static_cast<double>(status.st_mtim.tv_nsec);
}

} // namespace

std::vector<ObjectCache::Entry> ObjectCache::entries() const {
  std::vector<Entry> found;
  forEachFile(directory, [&](llvm::StringRef name, const struct stat &status) {
    if (name.ends_with(kEntrySuffix))
      found.push_back(
          {directory + "/" + name.str(), static_cast<uint64_t>(status.st_size), modificationSeconds(status)});
  });
  std::sort(found.begin(), found.end(), [](const Entry &a, const Entry &b) {
    return a.lastUsed != b.lastUsed ? a.lastUsed > b.lastUsed : a.path < b.path;
  });
  return found;
}

int64_t ObjectCache::clear() const {
  int64_t removed = 0;
  forEachFile(directory, [&](llvm::StringRef name, const struct stat &) {
    if (name.ends_with(kEntrySuffix) || name.contains(kTemporaryMarker))
      removed += ::unlink((directory + "/" + name.str()).c_str()) == 0;
  });
  return removed;
}

void ObjectCache::evict(const std::string &keep) const {
  const time_t now = ::time(nullptr);
  forEachFile(directory, [&](llvm::StringRef name, const struct stat &status) {
    if (name.contains(kTemporaryMarker) && now - status.st_mtim.tv_sec > kStaleTemporarySeconds)
      ::unlink((directory + "/" + name.str()).c_str());
  });
  uint64_t total = 0;
  std::vector<Entry> all = entries();
  for (const Entry &entry : all) total += entry.bytes;
  // Oldest first; another process may be evicting too, so a file already gone is no error.
  for (auto it = all.rbegin(); it != all.rend() && total > maxBytes; ++it) {
    if (it->path == keep) continue;
    ::unlink(it->path.c_str());
    total -= it->bytes;
  }
}

} // namespace gpt
