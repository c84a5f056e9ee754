// The rule-based scorer contract of the reward service: one item in, one score out.
// Scorers are pure functions of their input (no network, no shared mutable state), so one
// instance may be called from many threads at once.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace rlmesh::reward {

// One (prompt, response, ground truth) triple to score, as the coordinator decoded it.
struct RewardItem {
  std::string id;               // caller's id, unique within a batch
  std::string data_source;      // picks the scorer (verl's data.reward_fn_key column)
  std::string prompt;           // decoded prompt text (informational for rule scorers)
  std::string response;         // decoded response text, special tokens skipped
  std::string ground_truth;     // reward_model.ground_truth of the dataset row
  std::map<std::string, std::string> extra_info;  // extra_info entries with string values
  std::string extra_info_json;  // extra_info of the dataset row as JSON ("" when absent)
};

// What a scorer returns: the scalar reward and named side values (verl's reward_extra_info,
// e.g. "acc" for validation accuracy). Only numbers, so they can become metrics.
struct ScoreResult {
  double score = 0.0;
  std::map<std::string, double> extra;
};

// A scorer for one family of data sources. Score returns INVALID_ARGUMENT for an item it
// cannot score at all (e.g. an empty ground truth); a wrong answer is a low score, not an
// error.
class Scorer {
 public:
  virtual ~Scorer() = default;
  virtual absl::StatusOr<ScoreResult> Score(const RewardItem& item) const = 0;
};

}  // namespace rlmesh::reward
