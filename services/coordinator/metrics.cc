#include "services/coordinator/metrics.h"

#include <cctype>

#include "common/metrics/families.h"

namespace rlmesh::coordinator {

namespace {

using metrics::NewCounter;
using metrics::NewGauge;

}  // namespace

// verl's names with abbreviated units (timing_s/gen, perf/max_memory_allocated_gb,
// timing_per_token_ms/gen) become base units for Prometheus, spelled out and scaled.
std::pair<std::string, double> BaseUnits(const std::string& verl_name) {
  std::string name = verl_name;
  double scale = 1.0;
  if (auto at = name.rfind("_gb"); at != std::string::npos && at + 3 == name.size()) {
    name.replace(at, 3, "_bytes");
    scale = 1024.0 * 1024.0 * 1024.0;
  }
  if (auto at = name.find("_ms/"); at != std::string::npos) {
    name.replace(at, 4, "_seconds/");
    scale = 1e-3;
  }
  if (name.rfind("timing_s/", 0) == 0) name.replace(0, 9, "timing_seconds/");
  return {name, scale};
}

std::string VerlMetricName(const std::string& verl_name) {
  std::string out = "rlmesh_coordinator_";
  for (char c : verl_name) {
    const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (c == '@') {
      out += "_at_";
    } else if ((lower >= 'a' && lower <= 'z') || (lower >= '0' && lower <= '9') || lower == '_') {
      out += lower;
    } else {
      out += '_';
    }
  }
  return out;
}

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry& registry)
    : registry_(registry),
      global_step_(NewGauge(registry, "rlmesh_coordinator_global_step",
                            "Last completed GRPO step.")),
      total_steps_(NewGauge(registry, "rlmesh_coordinator_total_steps",
                            "Steps the run will take.")),
      steps_total_(NewCounter(registry, "rlmesh_coordinator_steps_total",
                              "GRPO steps completed by this process.")),
      step_duration_(prometheus::BuildHistogram()
                         .Name("rlmesh_coordinator_step_duration_seconds")
                         .Help("Wall time of one GRPO step.")
                         .Register(registry)
                         .Add({}, prometheus::Histogram::BucketBoundaries{
                                      0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
                                      1200, 3600})),
      phase_seconds_(prometheus::BuildCounter()
                         .Name("rlmesh_coordinator_phase_seconds_total")
                         .Help("Cumulative wall time per step phase; the phases add up to the "
                               "step time.")
                         .Register(registry)),
      replicas_known_(NewGauge(registry, "rlmesh_coordinator_rollout_replicas_known",
                               "Rollout replicas the coordinator knows of.")),
      replicas_up_(NewGauge(registry, "rlmesh_coordinator_rollout_replicas_up",
                            "Known replicas that are healthy and at the current weight version.")),
      replica_version_(prometheus::BuildGauge()
                           .Name("rlmesh_coordinator_rollout_replica_weight_version")
                           .Help("Weight version of each known replica.")
                           .Register(registry)),
      weight_version_(NewGauge(registry, "rlmesh_coordinator_weight_version",
                               "Current weight version.")),
      staleness_bound_(NewGauge(registry, "rlmesh_coordinator_staleness_bound_versions",
                                "rlmesh.max_staleness.")),
      staleness_max_(NewGauge(registry, "rlmesh_coordinator_sample_staleness_max_versions",
                              "Largest version lag among the samples of the last step.")),
      dropped_stale_(NewCounter(registry, "rlmesh_coordinator_samples_dropped_stale_total",
                                "Samples dropped because they were older than the bound.")),
      redispatched_(NewCounter(registry, "rlmesh_coordinator_samples_redispatched_total",
                               "Samples sent to another replica after theirs left or failed.")),
      replica_removals_(NewCounter(registry, "rlmesh_coordinator_replica_removals_total",
                                   "Replicas removed from the fleet.")),
      equal_reward_steps_(NewCounter(registry, "rlmesh_coordinator_equal_reward_steps_total",
                                     "Steps in which every group had equal rewards.")),
      validation_(prometheus::BuildGauge()
                      .Name("rlmesh_coordinator_validation_reward_mean")
                      .Help("Last validation score per data source (mean@1).")
                      .Register(registry)),
      epoch_reward_(NewGauge(registry, "rlmesh_coordinator_epoch_reward_mean",
                             "Mean of critic/score/mean over the current epoch so far.")),
      previous_epoch_family_(&prometheus::BuildGauge()
                                  .Name("rlmesh_coordinator_previous_epoch_reward_mean")
                                  .Help("Mean of critic/score/mean over the last completed epoch.")
                                  .Register(registry)) {}

void CoordinatorMetrics::RecordStep(int64_t global_step,
                                    const std::map<std::string, double>& metrics) {
  global_step_.Set(static_cast<double>(global_step));
  steps_total_.Increment();
  auto get = [&](const char* name) {
    auto it = metrics.find(name);
    return it == metrics.end() ? 0.0 : it->second;
  };
  const double step_s = get("timing_s/step");
  step_duration_.Observe(step_s);
  const std::pair<const char*, const char*> phases[] = {
      {"gen", "timing_s/gen"}, {"reward", "timing_s/reward"},
      {"old_log_prob", "timing_s/old_log_prob"}, {"ref", "timing_s/ref"},
      {"update", "timing_s/update_actor"}, {"sync", "timing_s/update_weights"}};
  double accounted = 0;
  for (const auto& [phase, key] : phases) {
    double seconds = get(key);
    // Reference and old log-probs run in parallel: count only the part of ref that was not
    // hidden behind old_log_prob, so the phases add up to the step time.
    // A reference pass its pipeline stage ran ahead (rlmesh/reference_ahead) was not on the
    // step's path at all.
    if (std::string(phase) == "ref") {
      seconds = get("rlmesh/reference_ahead") > 0
                    ? 0.0
                    : std::max(0.0, seconds - get("timing_s/old_log_prob"));
    }
    phase_seconds_.Add({{"phase", phase}}).Increment(seconds);
    accounted += seconds;
  }
  phase_seconds_.Add({{"phase", "overhead"}}).Increment(std::max(0.0, step_s - accounted));

  absl::MutexLock lock(&mu_);
  for (const auto& [name, value] : metrics) {
    // Names that embed a data source (and, in val-aux/, a reward file's own keys) would make
    // one metric per value: not mapped.
    if (name.rfind("val-core/", 0) == 0 || name.rfind("val-aux/", 0) == 0) continue;
    const auto [base_name, scale] = BaseUnits(name);
    VerlGauge& verl = verl_gauges_[name];
    if (verl.family == nullptr) {
      verl.family = &prometheus::BuildGauge()
                         .Name(VerlMetricName(base_name))
                         .Help("verl metric " + name + " of the last completed step" +
                               (scale != 1.0 ? ", in base units." : "."))
                         .Register(registry_);
    }
    if (verl.gauge == nullptr) verl.gauge = &verl.family->Add({});
    verl.gauge->Set(value * scale);
  }
  // What this step did not write is no longer served.
  for (auto& [name, verl] : verl_gauges_) {
    if (verl.gauge != nullptr && metrics.count(name) == 0) {
      verl.family->Remove(verl.gauge);
      verl.gauge = nullptr;
    }
  }
}

void CoordinatorMetrics::SetTotalSteps(int64_t steps) { total_steps_.Set(static_cast<double>(steps)); }

void CoordinatorMetrics::SetWeightVersion(uint64_t version) {
  weight_version_.Set(static_cast<double>(version));
}

void CoordinatorMetrics::SetStaleness(int64_t bound, int64_t max_seen) {
  staleness_bound_.Set(static_cast<double>(bound));
  staleness_max_.Set(static_cast<double>(max_seen));
}

void CoordinatorMetrics::AddDroppedStale(int64_t samples) {
  dropped_stale_.Increment(static_cast<double>(samples));
}

void CoordinatorMetrics::SetReplicas(const std::vector<v1::ReplicaInfo>& replicas,
                                     uint64_t current_version) {
  absl::MutexLock lock(&mu_);
  int up = 0;
  std::map<std::string, prometheus::Gauge*> seen;
  for (const auto& r : replicas) {
    const bool ready = r.state() == v1::REPLICA_STATE_READY &&
                       r.weight_version().version() == current_version;
    up += ready;
    auto pod = r.labels().find("pod");
    const std::string label = pod != r.labels().end() ? pod->second : r.address();
    auto it = replica_gauges_.find(label);
    prometheus::Gauge* gauge = it != replica_gauges_.end()
                                   ? it->second
                                   : &replica_version_.Add({{"replica", label}});
    gauge->Set(static_cast<double>(r.weight_version().version()));
    seen[label] = gauge;
  }
  for (const auto& [label, gauge] : replica_gauges_) {
    if (!seen.count(label)) {
      replica_version_.Remove(gauge);
      replica_removals_.Increment();
    }
  }
  replica_gauges_ = std::move(seen);
  replicas_known_.Set(static_cast<double>(replicas.size()));
  replicas_up_.Set(up);
}

void CoordinatorMetrics::SetRedispatchedSamples(int64_t total) {
  absl::MutexLock lock(&mu_);
  if (total > redispatched_seen_) redispatched_.Increment(static_cast<double>(total - redispatched_seen_));
  redispatched_seen_ = total;
}

void CoordinatorMetrics::AddEqualRewardStep() { equal_reward_steps_.Increment(); }

void CoordinatorMetrics::SetValidation(const std::map<std::string, double>& val_metrics) {
  // "val-core/<data_source>/reward/mean@1"
  for (const auto& [name, value] : val_metrics) {
    const std::string prefix = "val-core/";
    const std::string suffix = "/reward/mean@1";
    if (name.rfind(prefix, 0) != 0 || name.size() <= prefix.size() + suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string source =
        name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    validation_.Add({{"data_source", source}}).Set(value);
  }
}

void CoordinatorMetrics::SetEpochRewards(double current_mean, bool have_previous,
                                         double previous_mean) {
  epoch_reward_.Set(current_mean);
  if (have_previous) {
    if (previous_epoch_reward_ == nullptr) previous_epoch_reward_ = &previous_epoch_family_->Add({});
    previous_epoch_reward_->Set(previous_mean);
  }
}

}  // namespace rlmesh::coordinator
