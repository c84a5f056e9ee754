#include "common/process/cpu_affinity.h"

#include <dirent.h>
#include <sched.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rlmesh::process {

absl::Status RunOnCpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return absl::OkStatus();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(absl::StrCat("CPU ", cpu, " is beyond ", CPU_SETSIZE));
    }
    CPU_SET(cpu, &set);
  }
  // Each thread has its own mask and new threads copy their creator's: set it on every thread
  // there is now (/proc/self/task), the calling one first.
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot run on CPUs ",
                                                      absl::StrJoin(cpus, ","), ": ",
                                                      std::strerror(errno), " (this machine's: ",
                                                      absl::StrJoin(AllowedCpus(), ","), ")"));
  }
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (dirent* entry = readdir(tasks)) {
      const pid_t tid = static_cast<pid_t>(std::atoi(entry->d_name));
      if (tid > 0) sched_setaffinity(tid, sizeof(set), &set);  // a thread may just have ended
    }
    closedir(tasks);
  }
  return absl::OkStatus();
}

std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

int64_t LibTorchThreads(int64_t configured, const std::vector<int>& cpus, int64_t ranks_here) {
  if (configured > 0) return configured;
  if (cpus.empty() && ranks_here <= 1) return 0;
  const int64_t available = cpus.empty()
                                ? static_cast<int64_t>(std::thread::hardware_concurrency())
                                : static_cast<int64_t>(cpus.size());
  return std::max<int64_t>(1, available / std::max<int64_t>(1, ranks_here));
}

}  // namespace rlmesh::process
