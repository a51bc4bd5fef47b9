// See CompilerIdentity.h: the build id is read from the PT_NOTE segments of the loaded binary
// whose segments contain this very function, as the dynamic loader mapped them.
#include "cc/runtime/CompilerIdentity.h"

#include <cstdint>
#include <cstring>
#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

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

std::string identify() {
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
