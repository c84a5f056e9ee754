// The rlmesh_process_* metrics every binary exports (docs/metrics.md): CPU seconds, resident
// and peak memory, device memory used/peak/capacity and device utilization, start time and
// readiness. On CPU the "device" is the host: memory is the resident set, capacity the cgroup
// limit or MemTotal, utilization the process's CPU share of the cores it may use over the last
// 10 s. A background thread refreshes the values every `period`; the object owns it.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace rlmesh::metrics {

// This process's resident set now and its peak since start (VmRSS / VmHWM), in bytes.
double ResidentBytes();
double PeakResidentBytes();

struct ProcessMetricsOptions {
  absl::Duration period = absl::Seconds(1);
  double device_memory_capacity_bytes = 0;  // 0 = detect (cgroup limit, else MemTotal)
  int threads = 0;                          // cores the process may use; 0 = affinity mask
};

class ProcessMetrics {
 public:
  ProcessMetrics(prometheus::Registry& registry, const ProcessMetricsOptions& options = {});
  ~ProcessMetrics();
  ProcessMetrics(const ProcessMetrics&) = delete;
  ProcessMetrics& operator=(const ProcessMetrics&) = delete;

  void SetReady(bool ready) { ready_.Set(ready ? 1 : 0); }
  // Reads /proc and getrusage once and updates every gauge (the thread calls it each period).
  void Update();

 private:
  const ProcessMetricsOptions options_;
  prometheus::Counter& cpu_seconds_;
  prometheus::Gauge& resident_;
  prometheus::Gauge& peak_resident_;
  prometheus::Gauge& device_used_;
  prometheus::Gauge& device_peak_;
  prometheus::Gauge& device_capacity_;
  prometheus::Gauge& utilization_;
  prometheus::Gauge& start_time_;
  prometheus::Gauge& ready_;
  double threads_ = 1;
  double last_cpu_ = 0;
  // (wall time, cpu seconds) samples of the last 10 s, for the utilization window.
  absl::Mutex mu_;
  std::vector<std::pair<absl::Time, double>> window_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace rlmesh::metrics
