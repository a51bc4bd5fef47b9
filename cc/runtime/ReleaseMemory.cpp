// See ReleaseMemory.h.
#include "cc/runtime/ReleaseMemory.h"

#include <cstddef>
#include <cstdlib> // defines __GLIBC__ where the C library is glibc
#include <dlfcn.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gpt {

void releaseFreedMemory() {
  // The blocks programs keep for their next call (cc/runtime/support/Workspace.cpp), found in the
  // global scope where the runtime loads the program support library before the first program.
  using Release = size_t (*)();
  if (auto release = reinterpret_cast<Release>(::dlsym(RTLD_DEFAULT, "gpt_workspace_release"))) release();
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

} // namespace gpt
