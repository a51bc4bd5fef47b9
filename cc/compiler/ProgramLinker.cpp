// Linking compiled programs (see ProgramLinker.h).
#include "cc/compiler/ProgramLinker.h"

#include "cc/runtime/Files.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char **environ;

namespace gpt {
namespace {

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
    for (const std::string &file : files) ::unlink(file.c_str());
    ::rmdir(path.c_str());
  }
  /// `name` in the directory, removed with it.
  std::string file(const std::string &name) { return files.emplace_back(path + "/" + name); }
  std::string path;
  std::vector<std::string> files;
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

/// The C math library this process runs with, as a path the linker takes (libm.so.6): what a
/// program's calls into libm (expf, ...) bind to, found where the process has it instead of through
/// the C compiler's search paths.
const std::string &mathLibrary() {
  static const std::string path = [] {
    Dl_info info{};
    float (*expOfFloat)(float) = &::expf;
    if (::dladdr(reinterpret_cast<void *>(expOfFloat), &info) == 0 || !info.dli_fname || !*info.dli_fname)
      throw std::runtime_error("cannot link a compiled program: the C math library this process uses is not found");
    return std::string(info.dli_fname);
  }();
  return path;
}

} // namespace

std::string linkSharedObject(const std::vector<std::string> &objects) {
  if (::access(GPT_LLD_PATH, X_OK) != 0)
    throw std::runtime_error(std::string("cannot link a compiled program: the linker ") + GPT_LLD_PATH +
                             " is missing (tools/setup.sh installs lld-19)");
  TemporaryDirectory directory;
  std::vector<std::string> inputs;
  for (size_t i = 0; i < objects.size(); ++i) {
    const std::string input = inputs.emplace_back(directory.file("program" + std::to_string(i) + ".o"));
    int fd = ::open(input.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    bool written = fd >= 0 && writeAll(fd, objects[i]);
    if (fd >= 0) written = ::close(fd) == 0 && written;
    if (!written) throw std::runtime_error("cannot write " + input + ": " + std::strerror(errno));
  }
  const std::string output = directory.file("program.so"), log = directory.file("linker.log");
  // ld.lld itself, not through the clang driver: the driver only added the C runtime's search
  // paths and libraries (libc, libgcc), which a program's symbols bind to in the process that
  // loads it anyway, and it cost a process of its own that loads libclang-cpp: 26 ms of a link's
  // 46 (a program's compile is about 500 ms). -z now: every symbol is bound when the program is
  // loaded, so a missing one is a load error rather than a crash in the middle of a call. The
  // runtime path finds libomp, which the process has not loaded before the first program needs it.
  // --eh-frame-hdr, as the driver passes it: unwinders (perf, debuggers) find the frames.
  std::vector<std::string> argv = {GPT_LLD_PATH,
                                   "-shared",
                                   "--eh-frame-hdr",
                                   "--hash-style=gnu",
                                   "-z",
                                   "now",
                                   "-z",
                                   "relro",
                                   "--enable-new-dtags",
                                   "-rpath",
                                   GPT_LLVM_LIBDIR,
                                   "-o",
                                   output};
  argv.insert(argv.end(), inputs.begin(), inputs.end());
  argv.insert(argv.end(), {GPT_LIBOMP_PATH, mathLibrary()});
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

} // namespace gpt
