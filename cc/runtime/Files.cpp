// Whole-file reads and writes (see Files.h).
#include "cc/runtime/Files.h"

#include <cerrno>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdexcept>
#include <unistd.h>

namespace gpt {

bool writeAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return true;
}

std::string readFile(const std::string &path) {
  std::string bytes;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return bytes;
  char buffer[1 << 16];
  for (;;) {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    bytes.append(buffer, static_cast<size_t>(got));
  }
  ::close(fd);
  return bytes;
}

void writeFileChecked(const std::string &path, std::string_view bytes, unsigned mode) {
  auto fail = [&](const char *what) {
    throw std::runtime_error("cannot " + std::string(what) + " " + path + ": " + std::strerror(errno));
  };
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) fail("create");
  if (!writeAll(fd, bytes)) {
    int error = errno;
    ::close(fd);
    errno = error;
    fail("write");
  }
  if (::close(fd) != 0) fail("write");
}

std::string fileBesideBinaryOf(const void *address, const std::string &name) {
  Dl_info where;
  std::string directory = ".";
  if (::dladdr(address, &where) && where.dli_fname) {
    const std::string binary = where.dli_fname;
    if (size_t slash = binary.rfind('/'); slash != std::string::npos) directory = binary.substr(0, slash);
  }
  return directory + "/" + name;
}

} // namespace gpt
