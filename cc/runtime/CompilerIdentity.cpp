// See CompilerIdentity.h: the runtime's build id is read from the PT_NOTE segments of the loaded
// binary whose segments contain this very function, as the dynamic loader mapped them; the
// compiler library's from its file, which a warm process never loads.
#include "cc/runtime/CompilerIdentity.h"

#include "cc/runtime/ProgramCompiler.h"

#include <cstdint>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpt {
namespace {

constexpr uint32_t kGnuBuildIdType = 3; // NT_GNU_BUILD_ID

struct Search {
  uintptr_t address; // inside the binary we look for
  std::string buildId;
};

size_t alignedTo4(size_t bytes) { return (bytes + 3) & ~size_t(3); }

/// The GNU build id among the notes of `[notes, notes + bytes)`, as hex; empty when none.
std::string buildIdIn(const char *notes, size_t bytes) {
  static const char kHex[] = "0123456789abcdef";
  size_t offset = 0;
  while (offset + sizeof(ElfW(Nhdr)) <= bytes) {
    ElfW(Nhdr) header;
    std::memcpy(&header, notes + offset, sizeof header);
    size_t name = offset + sizeof header;
    size_t descriptor = name + alignedTo4(header.n_namesz);
    if (descriptor + header.n_descsz > bytes) break;
    if (header.n_type == kGnuBuildIdType && header.n_namesz == 4 && std::memcmp(notes + name, "GNU", 4) == 0) {
      std::string hex;
      for (size_t i = 0; i < header.n_descsz; ++i) {
        auto byte = static_cast<unsigned char>(notes[descriptor + i]);
        hex += kHex[byte >> 4];
        hex += kHex[byte & 15];
      }
      return hex;
    }
    offset = descriptor + alignedTo4(header.n_descsz);
  }
  return "";
}

int visitBinary(struct dl_phdr_info *info, size_t, void *data) {
  auto *search = static_cast<Search *>(data);
  bool contains = false;
  for (int i = 0; i < info->dlpi_phnum && !contains; ++i) {
    const ElfW(Phdr) &segment = info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + segment.p_vaddr;
    contains = segment.p_type == PT_LOAD && search->address >= start && search->address < start + segment.p_memsz;
  }
  if (!contains) return 0; // not this binary: keep looking
  for (int i = 0; i < info->dlpi_phnum && search->buildId.empty(); ++i) {
    const ElfW(Phdr) &segment = info->dlpi_phdr[i];
    if (segment.p_type == PT_NOTE)
      search->buildId = buildIdIn(reinterpret_cast<const char *>(info->dlpi_addr + segment.p_vaddr), segment.p_filesz);
  }
  return 1;
}

std::string identifyRuntime();

/// Reads `bytes` at `offset` of `fd` into `out`; false when the file is shorter.
bool readAt(int fd, uint64_t offset, size_t bytes, void *out) {
  return ::pread(fd, out, bytes, static_cast<off_t>(offset)) == static_cast<ssize_t>(bytes);
}

/// The GNU build id of the ELF file at `path`, read from its PT_NOTE segments without loading it;
/// empty when it has none or cannot be read.
std::string buildIdOfFile(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string id;
  ElfW(Ehdr) header;
  if (readAt(fd, 0, sizeof header, &header) && std::memcmp(header.e_ident, ELFMAG, SELFMAG) == 0)
    for (size_t i = 0; i < header.e_phnum && id.empty(); ++i) {
      ElfW(Phdr) segment;
      if (!readAt(fd, header.e_phoff + i * sizeof segment, sizeof segment, &segment)) break;
      std::string notes(segment.p_filesz, '\0');
      if (segment.p_type == PT_NOTE && segment.p_filesz < (1 << 16) &&
          readAt(fd, segment.p_offset, notes.size(), notes.data()))
        id = buildIdIn(notes.data(), notes.size());
    }
  ::close(fd);
  return id;
}

/// This binary (the runtime: how programs are called) and the compiler library (what they are).
std::string identify() {
  const std::string runtime = identifyRuntime();
  const std::string compiler = buildIdOfFile(programCompilerPath());
  if (runtime.empty() || compiler.empty()) return ""; // nothing that tells builds apart: no disk cache
  return runtime + " compiler-build-id:" + compiler;
}

std::string identifyRuntime() {
  Search search{reinterpret_cast<uintptr_t>(&compilerIdentity), ""};
  dl_iterate_phdr(visitBinary, &search);
  if (!search.buildId.empty()) return "build-id:" + search.buildId;
  // No build id: the file itself, as the loader found it.
  Dl_info where;
  struct stat status;
  if (dladdr(reinterpret_cast<void *>(&compilerIdentity), &where) && where.dli_fname &&
      ::stat(where.dli_fname, &status) == 0)
    return "file:" + std::string(where.dli_fname) + ":" + std::to_string(status.st_size) + ":" +
           std::to_string(status.st_mtim.tv_sec) + "." + std::to_string(status.st_mtim.tv_nsec);
  return ""; // nothing that tells builds apart: no disk cache (CachedJit.cpp)
}

} // namespace

const std::string &compilerIdentity() {
  static const std::string identity = identify();
  return identity;
}

} // namespace gpt
