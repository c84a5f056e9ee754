// The reward service's Prometheus metrics (names and labels per docs/metrics.md), all
// registered here on a registry passed in. Thread-safe: handlers record from any thread.
//   rlmesh_reward_items_total{data_source, outcome=ok|error}   items scored
//   rlmesh_reward_errors_total{kind}                           per-item errors by kind
//   rlmesh_reward_score_sum_total{data_source}                 sum of the positive scores
//   rlmesh_reward_score_negative_sum_total{data_source}        sum of -score of the negative
//   rlmesh_reward_request_duration_seconds                     wall time of one Score call
// data_source values are bounded: a data source the service does not know is "other".
#pragma once

#include <string>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "services/reward/reward_service.h"

namespace rlmesh::reward {

class RewardMetrics {
 public:
  // Series for every data source in `data_sources` (and "other") and every error kind are
  // created at zero, so the families are exported before the first request.
  RewardMetrics(prometheus::Registry& registry, const std::vector<std::string>& data_sources);

  // One scored (or failed) item; `data_source_label` is already bounded by the caller.
  void RecordItem(const std::string& data_source_label, const ItemOutcome& outcome);
  // One invalid request, rejected before any item was scored: counted as kind "invalid".
  void RecordRejectedItems(int count);
  void RecordRequest(double seconds);

 private:
  prometheus::Family<prometheus::Counter>& items_;
  prometheus::Family<prometheus::Counter>& errors_;
  prometheus::Family<prometheus::Counter>& score_sum_;
  prometheus::Family<prometheus::Counter>& negative_score_sum_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Histogram& request_duration_all_;
};

}  // namespace rlmesh::reward
