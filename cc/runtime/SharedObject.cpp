// See SharedObject.h.
#include "cc/runtime/SharedObject.h"

#include "cc/runtime/Files.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace gpt {
namespace {

/// The names each loaded program is known by, "/proc/self/fd/<fd>", stay valid while it is loaded:
/// the dynamic loader finds a program by name before opening anything, and it also gives a program
/// that is loaded again (the same file, found by its inode) the new name as an alias. So the
/// descriptors of every dlopen of one handle stay open until its last dlclose unloads it; a
/// descriptor closed earlier would let a later file take the number and be mistaken for it.
struct OpenNames {
  int references = 0;
  std::vector<int> descriptors;
};
std::mutex namesMutex;
std::map<void *, OpenNames> openNames;

} // namespace

std::unique_ptr<LoadedProgram> LoadedProgram::fromFile(int fd, std::string *error) {
  // The OpenMP runtime is loaded for good before any program: as a dependency of programs alone it
  // would be unloaded with the last of them, under its worker threads. The program support library
  // (memrefCopy) is loaded into the global scope, where programs find it.
  static const std::string supportPath =
      fileBesideBinaryOf(reinterpret_cast<const void *>(&LoadedProgram::fromFile), "_gpt_program_support.so");
  static void *openmp = ::dlopen(GPT_LIBOMP_PATH, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
  static void *support = openmp ? ::dlopen(supportPath.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE) : nullptr;
  if (!openmp || !support) {
    const char *reason = ::dlerror();
    *error = std::string("cannot load ") + (openmp ? supportPath : GPT_LIBOMP_PATH) + ": " + (reason ? reason : "");
    ::close(fd);
    return nullptr;
  }
  const std::string name = "/proc/self/fd/" + std::to_string(fd);
  std::lock_guard<std::mutex> lock(namesMutex);
  void *handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *reason = ::dlerror();
    *error = reason ? reason : "dlopen failed";
    ::close(fd);
    return nullptr;
  }
  OpenNames &names = openNames[handle];
  ++names.references;
  names.descriptors.push_back(fd);
  return std::unique_ptr<LoadedProgram>(new LoadedProgram(handle));
}

std::unique_ptr<LoadedProgram> LoadedProgram::fromBytes(std::string_view bytes, const std::string &name,
                                                        std::string *error) {
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) {
    *error = std::string("memfd_create: ") + std::strerror(errno);
    return nullptr;
  }
  if (!writeAll(fd, bytes)) {
    *error = std::string("writing the program to memory: ") + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  return fromFile(fd, error);
}

LoadedProgram::~LoadedProgram() {
  std::lock_guard<std::mutex> lock(namesMutex);
  ::dlclose(handle);
  auto found = openNames.find(handle);
  if (--found->second.references > 0) return;
  for (int fd : found->second.descriptors) ::close(fd);
  openNames.erase(found);
}

void *LoadedProgram::symbol(const std::string &name) const { return ::dlsym(handle, name.c_str()); }

} // namespace gpt
