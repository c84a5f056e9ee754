// The coordinator's Prometheus phase split: the phases of a step add up to its time, and work
// a pipeline stage did off the step's path is not charged to it.
#include "services/coordinator/metrics.h"

#include <map>
#include <string>

#include "gtest/gtest.h"
#include "prometheus/registry.h"

namespace rlmesh::coordinator {
namespace {

std::map<std::string, double> Phases(prometheus::Registry& registry) {
  std::map<std::string, double> out;
  for (const auto& family : registry.Collect()) {
    if (family.name != "rlmesh_coordinator_phase_seconds_total") continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "phase") out[label.value] = metric.counter.value;
      }
    }
  }
  return out;
}

std::map<std::string, double> Step(double reference_ahead) {
  return {{"timing_s/step", 1.0},
          {"timing_s/gen", 0.3},
          {"timing_s/reward", 0.05},
          {"timing_s/old_log_prob", 0.1},
          {"timing_s/ref", 0.4},
          {"timing_s/update_actor", 0.2},
          {"timing_s/update_weights", 0.05},
          {"rlmesh/reference_ahead", reference_ahead}};
}

TEST(CoordinatorMetricsTest, ReferenceBesideOldLogProbsCountsOnlyItsUnhiddenPart) {
  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  metrics.RecordStep(1, Step(0));
  const auto phases = Phases(registry);
  // ref ran beside old_log_prob: 0.4 - 0.1 = 0.3 of it lay on the step's path.
  EXPECT_NEAR(phases.at("ref"), 0.3, 1e-12);
  EXPECT_NEAR(phases.at("overhead"), 1.0 - (0.3 + 0.05 + 0.1 + 0.3 + 0.2 + 0.05), 1e-12);
}

TEST(CoordinatorMetricsTest, ReferenceComputedAheadIsNotChargedToTheStep) {
  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  metrics.RecordStep(1, Step(1));
  const auto phases = Phases(registry);
  EXPECT_EQ(phases.at("ref"), 0.0);
  EXPECT_NEAR(phases.at("overhead"), 1.0 - (0.3 + 0.05 + 0.1 + 0.2 + 0.05), 1e-12);
}

// The served value of each verl gauge (rlmesh_coordinator_<name>) that has one.
std::map<std::string, double> VerlGauges(prometheus::Registry& registry) {
  std::map<std::string, double> out;
  for (const auto& family : registry.Collect()) {
    if (family.type != prometheus::MetricType::Gauge) continue;
    for (const auto& metric : family.metric) out[family.name] = metric.gauge.value;
  }
  return out;
}

// A verl metric the last step did not write is no longer served: after an asynchronous run's
// first step, samples_at_0 would otherwise stay beside samples_at_1 (twice the step's samples).
TEST(CoordinatorMetricsTest, AMetricTheLastStepDidNotWriteIsNotServed) {
  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  auto step = Step(0);
  step["rlmesh/staleness/samples_at_0"] = 256;
  metrics.RecordStep(1, step);
  EXPECT_EQ(VerlGauges(registry).at("rlmesh_coordinator_rlmesh_staleness_samples_at_0"), 256);
  step.erase("rlmesh/staleness/samples_at_0");
  step["rlmesh/staleness/samples_at_1"] = 256;
  metrics.RecordStep(2, step);
  auto served = VerlGauges(registry);
  EXPECT_EQ(served.count("rlmesh_coordinator_rlmesh_staleness_samples_at_0"), 0u);
  EXPECT_EQ(served.at("rlmesh_coordinator_rlmesh_staleness_samples_at_1"), 256);
  // Written again, it is served again.
  step["rlmesh/staleness/samples_at_0"] = 128;
  metrics.RecordStep(3, step);
  EXPECT_EQ(VerlGauges(registry).at("rlmesh_coordinator_rlmesh_staleness_samples_at_0"), 128);
}

}  // namespace
}  // namespace rlmesh::coordinator
