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

}  // namespace rlmesh::process
