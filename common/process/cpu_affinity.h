// Placing a service on chosen CPUs (rlmesh.<service>.cpus): the services of one machine can
// be kept off each other's cores, as a Kubernetes CPU manager keeps pods apart.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace rlmesh::process {

// Restricts every thread of this process, and the threads it starts later, to `cpus` (an
// empty list changes nothing). Call it early in main, before the process starts its pools of
// threads. FailedPrecondition naming the CPUs when the kernel refuses them (none of them is
// one this process may run on).
absl::Status RunOnCpus(const std::vector<int>& cpus);

// The CPUs this thread may run on now, ascending.
std::vector<int> AllowedCpus();

// The LibTorch threads a process runs: `configured` (rlmesh.num_threads) when set; otherwise
// its CPUs (`cpus`, or every core of the machine when none were chosen and `ranks_here` > 1)
// divided among the `ranks_here` processes of its group on this machine, at least 1; 0 =
// LibTorch's default (one process, no CPUs chosen).
int64_t LibTorchThreads(int64_t configured, const std::vector<int>& cpus, int64_t ranks_here);

}  // namespace rlmesh::process
