// The services' malloc set-up: one arena for every thread. glibc gives each thread that
// allocates under contention its own arena (up to 8 per core), and memory freed in one arena
// is only reused by allocations from that arena. gRPC runs each request on whichever pool
// thread is free, so the trainer's activations, optimizer state and weight snapshots landed
// in a different arena at every step and the resident set grew by ~80 MB a step (3.2 to
// 5.7 GB over 30 steps of a 116 M-parameter model; with one arena it stays at 3.65 GB,
// docs/performance.md). Each service's main calls this before it starts any thread.
#pragma once

namespace rlmesh::process {

// Sets glibc's M_ARENA_MAX to 1 unless the user set MALLOC_ARENA_MAX in the environment,
// which wins. Returns whether it changed anything (false also on non-glibc systems).
bool UseOneMallocArena();

}  // namespace rlmesh::process
