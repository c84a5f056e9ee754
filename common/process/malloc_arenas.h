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

// Keeps freed memory in the heap for the next step's tensors instead of handing it back to
// the kernel. By default glibc serves a block of 32 MiB or more (a step's logits, activations,
// weight buffers) with its own mmap and unmaps it on free, and trims the heap top beyond
// 64 MiB, so each step faults its memory in again, page by page, zeroed by the kernel: on the
// quickstart that was a quarter of the step (docs/performance.md, "Freed memory stays in the
// heap"). Sets M_MMAP_THRESHOLD and M_TRIM_THRESHOLD to 1 GiB: blocks below that come from the
// heap and are reused, and the heap top is returned only when more than 1 GiB is free there.
// MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ in the environment win. Returns whether it
// changed anything (false also on non-glibc systems). Call it before any thread starts.
bool KeepFreedMemory();

}  // namespace rlmesh::process
