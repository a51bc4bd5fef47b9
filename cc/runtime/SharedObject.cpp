// See SharedObject.h.
#include "cc/runtime/SharedObject.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <spawn.h>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char **environ;

namespace gpt {
namespace {

bool writeAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return true;
}

/// The whole file at `path`; empty when it cannot be read.
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

/// A private directory for one link, removed with what is in it.
class TemporaryDirectory {
public:
  TemporaryDirectory() {
    const char *base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/gpt-link-XXXXXX";
    if (!::mkdtemp(pattern.data()))
      throw std::runtime_error("cannot create a directory to link a compiled program in (" + pattern +
                               "): " + std::strerror(errno));
    path = pattern;
  }
  ~TemporaryDirectory() {
    for (const char *name : {"/program.o", "/program.so", "/linker.log"}) ::unlink((path + name).c_str());
    ::rmdir(path.c_str());
  }
  std::string path;
};

/// Runs `argv` with its standard error (and output) in `log`; returns its exit status, -1 when it
/// could not be started or did not exit.
int run(const std::vector<std::string> &argv, const std::string &log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char *> arguments;
  for (const std::string &argument : argv) arguments.push_back(const_cast<char *>(argument.c_str()));
  arguments.push_back(nullptr);
  pid_t pid = 0;
  int spawned = ::posix_spawn(&pid, arguments[0], &actions, nullptr, arguments.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

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

std::string linkSharedObject(std::string_view object) {
  if (::access(GPT_CLANG_PATH, X_OK) != 0)
    throw std::runtime_error(std::string("cannot link a compiled program: the linker driver ") + GPT_CLANG_PATH +
                             " is missing (tools/setup.sh installs clang-19 and lld-19)");
  TemporaryDirectory directory;
  const std::string input = directory.path + "/program.o", output = directory.path + "/program.so",
                    log = directory.path + "/linker.log";
  int fd = ::open(input.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  bool written = fd >= 0 && writeAll(fd, object);
  if (fd >= 0) written = ::close(fd) == 0 && written;
  if (!written) throw std::runtime_error("cannot write " + input + ": " + std::strerror(errno));
  // -z now: every symbol is bound when the program is loaded, so a missing one is a load error
  // rather than a crash in the middle of a call. The runtime path finds libomp, which the
  // process has not loaded before the first program needs it.
  const std::vector<std::string> argv = {GPT_CLANG_PATH,
                                         "-shared",
                                         "-fuse-ld=lld",
                                         "-nostartfiles",
                                         "-Wl,-z,now",
                                         "-Wl,-z,relro",
                                         "-Wl,--enable-new-dtags",
                                         "-Wl,-rpath," GPT_LLVM_LIBDIR,
                                         "-o",
                                         output,
                                         input,
                                         GPT_LIBOMP_PATH,
                                         GPT_C_RUNNER_UTILS_PATH,
                                         "-lm"};
  int status = run(argv, log);
  if (status != 0) {
    std::string messages = readFile(log);
    if (messages.size() > 4000) messages = messages.substr(0, 4000) + "...";
    throw std::runtime_error(
        "linking a compiled program into a shared object failed (" +
        (status < 0 ? std::string("the linker did not run") : "exit status " + std::to_string(status)) +
        "): " + messages);
  }
  std::string shared = readFile(output);
  if (shared.compare(0, 4, "\177ELF") != 0) // octal: "\x7fELF" would read as one hex escape
    throw std::runtime_error("the linker wrote no shared object at " + output);
  return shared;
}

std::unique_ptr<LoadedProgram> LoadedProgram::fromFile(int fd, std::string *error) {
  // The OpenMP runtime is loaded for good before any program: as a dependency of programs alone it
  // would be unloaded with the last of them, under its worker threads.
  static void *openmp = ::dlopen(GPT_LIBOMP_PATH, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
  if (!openmp) {
    const char *reason = ::dlerror();
    *error = std::string("cannot load the OpenMP runtime ") + GPT_LIBOMP_PATH + ": " + (reason ? reason : "");
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
