#include "services/trainer/micro_batches.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace rlmesh::trainer {

absl::StatusOr<std::vector<std::vector<int64_t>>> PlanMicroBatches(
    const std::vector<int64_t>& tokens, const MicroBatching& how) {
  const int64_t rows = static_cast<int64_t>(tokens.size());
  std::vector<std::vector<int64_t>> plan;
  if (!how.by_tokens) {
    if (how.samples < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("micro-batch size: expected >= 1, got ", how.samples));
    }
    for (int64_t start = 0; start < rows; start += how.samples) {
      plan.emplace_back(static_cast<size_t>(std::min(how.samples, rows - start)));
      std::iota(plan.back().begin(), plan.back().end(), start);
    }
    return plan;
  }
  if (how.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("token budget: expected >= 1, got ", how.max_tokens));
  }
  int64_t total = 0;
  for (int64_t i = 0; i < rows; ++i) {
    if (tokens[i] > how.max_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sample ", i, " has ", tokens[i], " tokens, over the micro-batch token budget of ",
          how.max_tokens, " (the budget must hold the longest prompt + response)"));
    }
    total += tokens[i];
  }
  if (rows == 0) return plan;
  const int64_t count = std::min(
      rows, std::max<int64_t>({1, (total + how.max_tokens - 1) / how.max_tokens, how.min_count}));
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return tokens[a] > tokens[b]; });
  plan.resize(static_cast<size_t>(count));
  std::vector<int64_t> load(static_cast<size_t>(count), 0);
  for (int64_t row : order) {
    // The lightest micro-batch; among equals the first, so the plan is deterministic.
    const size_t lightest =
        static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    plan[lightest].push_back(row);
    load[lightest] += tokens[row];
  }
  for (auto& micro : plan) std::sort(micro.begin(), micro.end());
  return plan;
}

std::vector<std::vector<int64_t>> SplitAcrossRanks(const std::vector<int64_t>& tokens,
                                                   int world_size) {
  const int64_t rows = static_cast<int64_t>(tokens.size());
  const int64_t w = std::max(1, world_size);
  std::vector<std::vector<int64_t>> split(static_cast<size_t>(w));
  if (w == 1) {
    split[0].resize(static_cast<size_t>(rows));
    std::iota(split[0].begin(), split[0].end(), 0);
    return split;
  }
  std::vector<int64_t> capacity(static_cast<size_t>(w), rows / w);
  for (int64_t r = 0; r < rows % w; ++r) ++capacity[static_cast<size_t>(r)];
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return tokens[a] > tokens[b]; });
  std::vector<int64_t> load(static_cast<size_t>(w), 0);
  for (int64_t row : order) {
    size_t best = split.size();
    for (size_t r = 0; r < split.size(); ++r) {
      if (static_cast<int64_t>(split[r].size()) >= capacity[r]) continue;
      if (best == split.size() || load[r] < load[best]) best = r;
    }
    split[best].push_back(row);
    load[best] += tokens[row];
  }
  for (auto& rank_rows : split) std::sort(rank_rows.begin(), rank_rows.end());
  return split;
}

std::vector<std::vector<int64_t>> SplitInOrder(int64_t rows, int world_size) {
  const int64_t w = std::max(1, world_size);
  std::vector<std::vector<int64_t>> split(static_cast<size_t>(w));
  int64_t next = 0;
  for (int64_t r = 0; r < w; ++r) {
    const int64_t count = rows / w + (r < rows % w ? 1 : 0);
    for (int64_t i = 0; i < count; ++i) split[static_cast<size_t>(r)].push_back(next++);
  }
  return split;
}

}  // namespace rlmesh::trainer
