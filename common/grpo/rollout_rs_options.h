// The options of verl's rejection sampling (algorithm.rollout_correction.rollout_rs and
// rollout_rs_threshold), parsed without LibTorch so that the configuration can check them;
// rollout_correction.h applies them.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rlmesh::grpo {

// Rejection sampling: tokens or whole responses whose divergence between the trainer's and
// the rollout's policy is out of bounds are masked out of the update.
// Per token, with r = clamp(old_logp - rollout_logp, -20, 20): k1 = -r, k2 = r^2 / 2,
// k3 = e^r - 1 - r.
enum class RsLevel {
  kToken,    // token_k*: each token's own statistic
  kSeqSum,   // seq_sum_k*: the sum over the response, for every token of it
  kSeqMean,  // seq_mean_k*: the mean (count + 1e-8)
  kSeqMax,   // seq_max_k2, seq_max_k3: the largest (0 for a response without tokens)
};

struct RsOption {
  std::string name;  // verl's, e.g. "token_k1", "seq_mean_k3"
  RsLevel level = RsLevel::kToken;
  int estimator = 1;  // 1, 2 or 3
  // k1: kept when log(lower) <= statistic <= log(upper) (ratio bounds). k2, k3: kept when
  // statistic <= upper; lower is unused.
  double lower = 0, upper = 0;
};

// verl's rollout_rs (comma-separated options, repeats dropped, order kept) and
// rollout_rs_threshold (one value for all options or one per option, comma-separated; a k1
// option takes "lower_upper" or an upper bound alone, whose reciprocal is then the lower; the
// others one upper bound without "_"; every bound > 0). InvalidArgument naming the key and
// the offending part otherwise.
absl::StatusOr<std::vector<RsOption>> ParseRolloutRs(absl::string_view rollout_rs,
                                                     absl::string_view rollout_rs_threshold);

}  // namespace rlmesh::grpo
