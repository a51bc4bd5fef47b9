// See ReleaseMemory.h.
#include "cc/runtime/ReleaseMemory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gpt {

void releaseFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

} // namespace gpt
