#include "services/reward/metrics.h"

namespace rlmesh::reward {
namespace {

constexpr ItemErrorKind kErrorKinds[] = {ItemErrorKind::kException, ItemErrorKind::kTimeout,
                                         ItemErrorKind::kRemote, ItemErrorKind::kUnknownDataSource,
                                         ItemErrorKind::kInvalid};

}  // namespace

RewardMetrics::RewardMetrics(prometheus::Registry& registry,
                             const std::vector<std::string>& data_sources)
    : items_(prometheus::BuildCounter()
                 .Name("rlmesh_reward_items_total")
                 .Help("Items scored, by data_source and outcome (ok, or error: the item got an "
                       "error instead of a score).")
                 .Register(registry)),
      errors_(prometheus::BuildCounter()
                  .Name("rlmesh_reward_errors_total")
                  .Help("Per-item errors by kind: exception, timeout, remote, "
                        "unknown_data_source, invalid.")
                  .Register(registry)),
      score_sum_(prometheus::BuildCounter()
                     .Name("rlmesh_reward_score_sum_total")
                     .Help("Sum of the positive scores given, by data_source (negative ones "
                           "in rlmesh_reward_score_negative_sum_total).")
                     .Register(registry)),
      negative_score_sum_(prometheus::BuildCounter()
                              .Name("rlmesh_reward_score_negative_sum_total")
                              .Help("Sum of -score over the negative scores given, by "
                                    "data_source: the mean score is (score_sum_total - this) / "
                                    "items_total{outcome=\"ok\"}.")
                              .Register(registry)),
      request_duration_(prometheus::BuildHistogram()
                            .Name("rlmesh_reward_request_duration_seconds")
                            .Help("Wall time of one Score call.")
                            .Register(registry)),
      request_duration_all_(request_duration_.Add(
          {}, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                      0.5, 1, 2.5, 5, 10, 30, 60})) {
  // Every error kind is exported from the start, so rate() sees the first error.
  for (ItemErrorKind kind : kErrorKinds) errors_.Add({{"kind", ItemErrorKindName(kind)}});
  std::vector<std::string> labels = data_sources;
  labels.push_back("other");
  for (const std::string& source : labels) {
    items_.Add({{"data_source", source}, {"outcome", "ok"}});
    items_.Add({{"data_source", source}, {"outcome", "error"}});
    score_sum_.Add({{"data_source", source}});
    negative_score_sum_.Add({{"data_source", source}});
  }
}

void RewardMetrics::RecordItem(const std::string& data_source_label, const ItemOutcome& outcome) {
  const bool ok = outcome.status.ok();
  items_.Add({{"data_source", data_source_label}, {"outcome", ok ? "ok" : "error"}}).Increment();
  if (ok) {
    // A Prometheus counter only grows: negative scores (verl's -1 for a wrong MATH-DAPO
    // answer) go to a counter of their own, as their magnitude.
    const double score = outcome.result.score;
    if (score > 0) score_sum_.Add({{"data_source", data_source_label}}).Increment(score);
    if (score < 0) negative_score_sum_.Add({{"data_source", data_source_label}}).Increment(-score);
  } else {
    errors_.Add({{"kind", ItemErrorKindName(outcome.error_kind)}}).Increment();
  }
}

void RewardMetrics::RecordRejectedItems(int count) {
  errors_.Add({{"kind", ItemErrorKindName(ItemErrorKind::kInvalid)}}).Increment(count);
}

void RewardMetrics::RecordRequest(double seconds) { request_duration_all_.Observe(seconds); }

}  // namespace rlmesh::reward
