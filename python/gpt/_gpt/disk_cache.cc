// The on-disk compile cache (cc/runtime/ObjectCache.h), for `python -m gpt cache` and tests.
#include "python/gpt/_gpt/bindings.h"

#include "cc/runtime/CompilerIdentity.h"
#include "cc/runtime/ObjectCache.h"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace gpt::python {

void initDiskCache(py::module_ &m) {
  m.attr("DEFAULT_CACHE_MAX_BYTES") = kDefaultCacheMaxBytes;
  m.def(
      "compiler_identity", [] { return compilerIdentity(); },
      "This build of the compiler as the disk cache's keys name it: 'build-id:<hex>' (the extension's GNU "
      "build id), or 'file:<path>:<bytes>:<mtime>'; empty when neither is known (nothing is cached then).");
  m.def(
      "disk_cache_entries",
      [](const std::string &directory) {
        std::vector<std::tuple<std::string, uint64_t, double>> listed;
        for (const ObjectCache::Entry &entry : ObjectCache(directory).entries())
          listed.emplace_back(entry.path, entry.bytes, entry.lastUsed);
        return listed;
      },
      py::arg("directory"), "(path, bytes, last used as seconds since the epoch) of every entry, most recent first.");
  m.def(
      "clear_disk_cache", [](const std::string &directory) { return ObjectCache(directory).clear(); },
      py::arg("directory"), "Removes every entry and abandoned temporary; returns how many files were removed.");
  m.def(
      "evict_disk_cache",
      [](const std::string &directory, uint64_t maxBytes) { ObjectCache(directory, maxBytes).evict(); },
      py::arg("directory"), py::arg("max_bytes"),
      "Removes the least recently used entries until the rest fit in max_bytes.");
}

} // namespace gpt::python
