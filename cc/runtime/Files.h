// Whole-file reads and writes with every step checked, shared by the disk cache, the program
// loader and the compiler's linker step.
#ifndef GPT_CC_RUNTIME_FILES_H
#define GPT_CC_RUNTIME_FILES_H

#include <string>
#include <string_view>

namespace gpt {

/// Writes all of `bytes` to `fd`, retrying short writes and interruptions; false on an error
/// (errno says which).
bool writeAll(int fd, std::string_view bytes);

/// The whole file at `path`; empty when it cannot be read.
std::string readFile(const std::string &path);

/// Writes `bytes` to `path` (created with `mode`), checking every step; throws
/// std::runtime_error naming the path and the system's reason on failure (a full disk, a missing
/// directory, /dev/full).
void writeFileChecked(const std::string &path, std::string_view bytes, unsigned mode = 0644);

/// The path of `name` in the directory of the binary (the executable or a shared library) whose
/// code contains `address`: how the runtime finds the libraries shipped beside it.
std::string fileBesideBinaryOf(const void *address, const std::string &name);

} // namespace gpt

#endif // GPT_CC_RUNTIME_FILES_H
