#include "common/process/malloc_arenas.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace rlmesh::process {

bool UseOneMallocArena() {
#if defined(__GLIBC__)
  if (std::getenv("MALLOC_ARENA_MAX") != nullptr) return false;
  return mallopt(M_ARENA_MAX, 1) == 1;
#else
  return false;
#endif
}

bool KeepFreedMemory() {
#if defined(__GLIBC__)
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr) {
    return false;
  }
  constexpr int kOneGiB = 1 << 30;
  return mallopt(M_MMAP_THRESHOLD, kOneGiB) == 1 && mallopt(M_TRIM_THRESHOLD, kOneGiB) == 1;
#else
  return false;
#endif
}

}  // namespace rlmesh::process
