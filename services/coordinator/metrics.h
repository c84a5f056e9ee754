// The coordinator's Prometheus metrics (docs/metrics.md, "Coordinator"), registered in one
// place on the registry the coordinator serves. Training metrics keep verl's names under one
// mapping rule (VerlMetricName). Thread-safe (prometheus-cpp metrics are).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "rlmesh/v1/coordinator.pb.h"

namespace rlmesh::coordinator {

// "actor/pg_loss" -> "rlmesh_coordinator_actor_pg_loss": lower case, "@" -> "_at_", every
// other character outside [a-z0-9_] -> "_".
std::string VerlMetricName(const std::string& verl_name);

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry& registry);

  // A finished step: its verl metrics (gauges), duration and phase split.
  void RecordStep(int64_t global_step, const std::map<std::string, double>& metrics);
  void SetTotalSteps(int64_t steps);
  void SetWeightVersion(uint64_t version);
  void SetStaleness(int64_t bound, int64_t max_seen);
  void SetReplicas(const std::vector<v1::ReplicaInfo>& replicas, uint64_t current_version);
  void SetRedispatchedSamples(int64_t total);
  void AddDroppedStale(int64_t samples);
  void AddEqualRewardStep();
  void SetValidation(const std::map<std::string, double>& val_metrics);
  void SetEpochRewards(double current_mean, bool have_previous, double previous_mean);

 private:
  prometheus::Registry& registry_;
  prometheus::Gauge& global_step_;
  prometheus::Gauge& total_steps_;
  prometheus::Counter& steps_total_;
  prometheus::Histogram& step_duration_;
  prometheus::Family<prometheus::Counter>& phase_seconds_;
  prometheus::Gauge& replicas_known_;
  prometheus::Gauge& replicas_up_;
  prometheus::Family<prometheus::Gauge>& replica_version_;
  prometheus::Gauge& weight_version_;
  prometheus::Gauge& staleness_bound_;
  prometheus::Gauge& staleness_max_;
  prometheus::Counter& dropped_stale_;
  prometheus::Counter& redispatched_;
  prometheus::Counter& replica_removals_;
  prometheus::Counter& equal_reward_steps_;
  prometheus::Family<prometheus::Gauge>& validation_;
  prometheus::Gauge& epoch_reward_;
  prometheus::Family<prometheus::Gauge>* previous_epoch_family_;
  prometheus::Gauge* previous_epoch_reward_ = nullptr;

  absl::Mutex mu_;
  // One family per verl metric; its one gauge only while the last step wrote the metric (a
  // value a step did not write, such as rlmesh/staleness/samples_at_0 after the first steps,
  // would otherwise be served on as the current one).
  struct VerlGauge {
    prometheus::Family<prometheus::Gauge>* family = nullptr;
    prometheus::Gauge* gauge = nullptr;
  };
  std::map<std::string, VerlGauge> verl_gauges_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Gauge*> replica_gauges_ ABSL_GUARDED_BY(mu_);
  int64_t redispatched_seen_ ABSL_GUARDED_BY(mu_) = 0;
  size_t known_replicas_seen_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rlmesh::coordinator
