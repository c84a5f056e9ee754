#include "common/grpo/rollout_rs_options.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status/status_macros.h"

namespace rlmesh::grpo {
namespace {

struct RsKind {
  const char* name;
  RsLevel level;
  int estimator;
};

constexpr RsKind kRsKinds[] = {
    {"token_k1", RsLevel::kToken, 1},      {"token_k2", RsLevel::kToken, 2},
    {"token_k3", RsLevel::kToken, 3},      {"seq_sum_k1", RsLevel::kSeqSum, 1},
    {"seq_sum_k2", RsLevel::kSeqSum, 2},   {"seq_sum_k3", RsLevel::kSeqSum, 3},
    {"seq_mean_k1", RsLevel::kSeqMean, 1}, {"seq_mean_k2", RsLevel::kSeqMean, 2},
    {"seq_mean_k3", RsLevel::kSeqMean, 3}, {"seq_max_k2", RsLevel::kSeqMax, 2},
    {"seq_max_k3", RsLevel::kSeqMax, 3},
};

std::vector<std::string> NonEmptyParts(absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) out.emplace_back(part);
  }
  return out;
}

absl::StatusOr<double> PositiveBound(const std::string& text, const std::string& spec,
                                     const std::string& option) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rollout_rs_threshold: '", spec, "' for ", option, " is not a number"));
  }
  if (!(value > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("rollout_rs_threshold: the bounds of ", option,
                                                   " must be > 0, got '", spec, "'"));
  }
  return value;
}

}  // namespace

absl::StatusOr<std::vector<RsOption>> ParseRolloutRs(absl::string_view rollout_rs,
                                                     absl::string_view rollout_rs_threshold) {
  std::vector<RsOption> options;
  for (const std::string& part : NonEmptyParts(rollout_rs)) {
    const RsKind* kind = nullptr;
    for (const RsKind& k : kRsKinds) {
      if (part == k.name) kind = &k;
    }
    if (kind == nullptr) {
      std::vector<std::string> names;
      for (const RsKind& k : kRsKinds) names.emplace_back(k.name);
      return absl::InvalidArgumentError(absl::StrCat("rollout_rs: unknown option '", part,
                                                     "'; expected ", absl::StrJoin(names, ", ")));
    }
    bool seen = false;
    for (const RsOption& o : options) seen = seen || o.name == part;
    if (!seen) options.push_back({part, kind->level, kind->estimator, 0, 0});
  }
  if (options.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rollout_rs: expected at least one option, got '", rollout_rs, "'"));
  }
  const std::vector<std::string> specs = NonEmptyParts(rollout_rs_threshold);
  if (specs.empty()) {
    return absl::InvalidArgumentError("rollout_rs_threshold: rollout_rs needs a threshold");
  }
  if (specs.size() != 1 && specs.size() != options.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rollout_rs_threshold: expected one threshold for all options or one for each of the ",
        options.size(), ", got ", specs.size()));
  }
  for (size_t i = 0; i < options.size(); ++i) {
    RsOption& o = options[i];
    const std::string& spec = specs.size() == 1 ? specs[0] : specs[i];
    const size_t split = spec.find('_');
    if (o.estimator == 1) {
      if (split != std::string::npos) {
        ASSIGN_OR_RETURN(o.lower, PositiveBound(spec.substr(0, split), spec, o.name));
        ASSIGN_OR_RETURN(o.upper, PositiveBound(spec.substr(split + 1), spec, o.name));
      } else {
        ASSIGN_OR_RETURN(o.upper, PositiveBound(spec, spec, o.name));
        o.lower = 1.0 / o.upper;
      }
    } else {
      if (split != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("rollout_rs_threshold: ", o.name,
                                                       " takes one upper bound, got '", spec, "'"));
      }
      ASSIGN_OR_RETURN(o.upper, PositiveBound(spec, spec, o.name));
    }
  }
  return options;
}

}  // namespace rlmesh::grpo
