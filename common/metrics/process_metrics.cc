#include "common/metrics/process_metrics.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace rlmesh::metrics {

namespace {

prometheus::Gauge& Gauge(prometheus::Registry& r, const char* name, const char* help,
                         bool device) {
  auto& family = prometheus::BuildGauge().Name(name).Help(help).Register(r);
  return device ? family.Add({{"device", "cpu"}}) : family.Add({});
}

// A value in kB from /proc/self/status ("VmRSS:", "VmHWM:"), in bytes.
double StatusBytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      std::istringstream fields(line.substr(key.size()));
      double kb = 0;
      fields >> kb;
      return kb * 1024.0;
    }
  }
  return 0;
}

}  // namespace

double ResidentBytes() { return StatusBytes("VmRSS:"); }
double PeakResidentBytes() { return StatusBytes("VmHWM:"); }

namespace {

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec * 1e-6;
}

double DetectCapacity() {
  // cgroup v2 limit, when one is set.
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");
  std::string value;
  if (cgroup >> value && value != "max") {
    try {
      return std::stod(value);
    } catch (...) {
    }
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (meminfo >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024.0;
    std::string unit;
    meminfo >> unit;
  }
  return 0;
}

}  // namespace

ProcessMetrics::ProcessMetrics(prometheus::Registry& registry, const ProcessMetricsOptions& options)
    : options_(options),
      cpu_seconds_(prometheus::BuildCounter()
                       .Name("rlmesh_process_cpu_seconds_total")
                       .Help("User + system CPU time of the process.")
                       .Register(registry)
                       .Add({})),
      resident_(Gauge(registry, "rlmesh_process_resident_memory_bytes", "Resident set size.", false)),
      peak_resident_(Gauge(registry, "rlmesh_process_peak_resident_memory_bytes",
                           "Peak resident set size since start.", false)),
      device_used_(Gauge(registry, "rlmesh_process_device_memory_used_bytes",
                         "Memory in use on the device (CPU: the resident set).", true)),
      device_peak_(Gauge(registry, "rlmesh_process_device_memory_peak_bytes",
                         "Peak device memory in use since start.", true)),
      device_capacity_(Gauge(registry, "rlmesh_process_device_memory_capacity_bytes",
                             "Capacity of the device's memory.", true)),
      utilization_(Gauge(registry, "rlmesh_process_device_utilization_ratio",
                         "Busy fraction of the device over the last 10 s.", true)),
      start_time_(Gauge(registry, "rlmesh_process_start_time_seconds",
                        "Unix time the process started.", false)),
      ready_(Gauge(registry, "rlmesh_process_ready", "1 once the service reports SERVING.", false)) {
  threads_ = options.threads;
  if (threads_ <= 0) {
    cpu_set_t set;
    threads_ = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  }
  device_capacity_.Set(options.device_memory_capacity_bytes > 0 ? options.device_memory_capacity_bytes
                                                                 : DetectCapacity());
  start_time_.Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  Update();
  thread_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(options_.period)) Update();
  });
}

ProcessMetrics::~ProcessMetrics() {
  stop_.Notify();
  thread_.join();
}

void ProcessMetrics::Update() {
  const double cpu = CpuSeconds();
  absl::MutexLock lock(&mu_);
  if (cpu > last_cpu_) cpu_seconds_.Increment(cpu - last_cpu_);
  last_cpu_ = std::max(last_cpu_, cpu);
  const double rss = ResidentBytes();
  const double hwm = PeakResidentBytes();
  resident_.Set(rss);
  peak_resident_.Set(hwm);
  device_used_.Set(rss);
  device_peak_.Set(hwm);
  const absl::Time now = absl::Now();
  window_.push_back({now, cpu});
  while (window_.size() > 2 && now - window_.front().first > absl::Seconds(10)) {
    window_.erase(window_.begin());
  }
  const double wall = absl::ToDoubleSeconds(now - window_.front().first);
  if (wall > 0) utilization_.Set((cpu - window_.front().second) / wall / threads_);
}

}  // namespace rlmesh::metrics
