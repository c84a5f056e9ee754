#include "services/coordinator/dynamic_sampling.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace rlmesh::coordinator {

absl::StatusOr<std::vector<double>> FilterMetricValues(const StepRollout& rollout,
                                                       const std::string& metric) {
  std::vector<double> values = rollout.scores;
  if (metric == "acc" || metric == "score") {
    if (!rollout.overlong_rewards.empty()) {
      if (rollout.overlong_rewards.size() != values.size()) {
        return absl::InternalError(absl::StrCat(
            rollout.overlong_rewards.size(), " overlong rewards for ", values.size(), " scores"));
      }
      for (size_t k = 0; k < values.size(); ++k) values[k] -= rollout.overlong_rewards[k];
    }
    // verl's DAPO manager records a scorer's dict as it is, so `acc` is the dict's own "acc"
    // where the scorer gives one (math_dapo, a reward file returning {"score", "acc"}), and
    // the score where it returns a number.
    if (metric == "acc" && !rollout.extras.empty()) {
      if (rollout.extras.size() != values.size()) {
        return absl::InternalError(
            absl::StrCat(rollout.extras.size(), " samples' extras for ", values.size(), " scores"));
      }
      for (size_t k = 0; k < values.size(); ++k) {
        auto acc = rollout.extras[k].find("acc");
        if (acc != rollout.extras[k].end()) values[k] = acc->second;
      }
    }
    return values;
  }
  if (metric == "seq_reward" || metric == "seq_final_reward") return values;
  return absl::InvalidArgumentError(
      absl::StrCat("algorithm.filter_groups.metric: expected acc, score, seq_reward or "
                   "seq_final_reward, got \"",
                   metric, "\""));
}

std::vector<size_t> GroupsWithSpread(const std::vector<double>& values, int32_t n) {
  std::vector<size_t> kept;
  const size_t groups = n > 0 ? values.size() / static_cast<size_t>(n) : 0;
  for (size_t g = 0; g < groups; ++g) {
    const auto first = values.begin() + static_cast<std::ptrdiff_t>(g * n);
    const bool spread =
        n == 1 || std::any_of(first, first + n, [&](double v) { return v != *first; });
    if (spread) kept.push_back(g);
  }
  return kept;
}

void AppendGroups(const std::vector<StepPrompt>& from_prompts, StepRollout&& from,
                  const std::vector<size_t>& which, int32_t n, std::vector<StepPrompt>* prompts,
                  StepRollout* into) {
  for (size_t g : which) {
    prompts->push_back(from_prompts[g]);
    into->groups.push_back(std::move(from.groups[g]));
    for (int32_t i = 0; i < n; ++i) {
      const size_t k = g * static_cast<size_t>(n) + static_cast<size_t>(i);
      into->scores.push_back(from.scores[k]);
      into->texts.push_back(from.texts[k]);
      if (!from.overlong_rewards.empty())
        into->overlong_rewards.push_back(from.overlong_rewards[k]);
      if (!from.extras.empty()) into->extras.push_back(std::move(from.extras[k]));
    }
  }
  into->reward_retries += from.reward_retries;
  for (const auto& [kind, count] : from.reward_failed) into->reward_failed[kind] += count;
  into->gen_compute_seconds += from.gen_compute_seconds;
  into->reward_compute_seconds += from.reward_compute_seconds;
  into->gen_seconds += from.gen_seconds;
  into->reward_seconds += from.reward_seconds;
  into->pool_after = from.pool_after;
}

absl::StatusOr<DynamicBatch> SampleDynamically(
    const DynamicSamplingOptions& options,
    const std::function<absl::StatusOr<SampledRound>(int64_t round)>& round) {
  DynamicBatch batch;
  for (;;) {
    ASSIGN_OR_RETURN(SampledRound sampled, round(batch.rounds));
    if (batch.rounds == 0) {
      // The step began with the first round's generation, and so did its pool books.
      batch.rollout.start = sampled.rollout.start;
      batch.rollout.pool_before = sampled.rollout.pool_before;
    }
    ++batch.rounds;
    ASSIGN_OR_RETURN(const std::vector<double> values,
                     FilterMetricValues(sampled.rollout, options.metric));
    std::vector<size_t> kept = GroupsWithSpread(values, options.n);
    batch.dropped_groups += static_cast<int64_t>(sampled.prompts.size() - kept.size());
    const int64_t room = options.train_batch_size - static_cast<int64_t>(batch.prompts.size());
    if (static_cast<int64_t>(kept.size()) > room) {
      batch.surplus_groups += static_cast<int64_t>(kept.size()) - room;
      kept.resize(static_cast<size_t>(room));
    }
    AppendGroups(sampled.prompts, std::move(sampled.rollout), kept, options.n, &batch.prompts,
                 &batch.rollout);
    if (static_cast<int64_t>(batch.prompts.size()) >= options.train_batch_size) return batch;
    if (options.max_num_gen_batches > 0 && batch.rounds >= options.max_num_gen_batches) {
      return absl::FailedPreconditionError(
          absl::StrCat("dynamic sampling kept ", batch.prompts.size(), " of the ",
                       options.train_batch_size, " groups a step needs after ", batch.rounds,
                       " generation rounds (algorithm.filter_groups.max_num_gen_batches); ",
                       batch.dropped_groups, " groups had no spread in ", options.metric,
                       ". Raise the limit (<= 0: none) or check the data and rewards"));
    }
  }
}

}  // namespace rlmesh::coordinator
