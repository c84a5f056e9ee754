// How a batch is cut into micro-batches for its forward passes: a fixed number of samples
// each (ppo_micro_batch_size_per_gpu and friends), or, with verl's dynamic batch size
// (use_dynamic_bsz), by a token budget: ceil(total tokens / budget) micro-batches (never
// more than the samples), each sample's tokens being its prompt plus response, balanced by
// giving the longest remaining sample to the lightest micro-batch. verl balances with the
// Karmarkar-Karp method; both give the same count and nearly equal loads. Pure; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace rlmesh::trainer {

struct MicroBatching {
  bool by_tokens = false;  // use_dynamic_bsz
  int64_t samples = 1;     // per micro-batch, when !by_tokens
  int64_t max_tokens = 0;  // the budget, when by_tokens
  // When by_tokens: at least this many micro-batches (never more than the rows). A sharded
  // group runs the same number of passes on every rank (verl's same_micro_num_in_dp).
  int64_t min_count = 0;
};

// Row indices of each micro-batch, in ascending order within each, over rows with
// `tokens[i]` tokens. InvalidArgument when a row alone exceeds the token budget (verl
// asserts the same: the budget must hold the longest sequence) or the sizes are < 1.
absl::StatusOr<std::vector<std::vector<int64_t>>> PlanMicroBatches(
    const std::vector<int64_t>& tokens, const MicroBatching& how);

// The rows each of `world_size` ranks takes of a batch whose rows have `tokens[i]` tokens
// (verl's sequence-length balancing): equal counts (the first n % W ranks one more), and
// within that the longest remaining row goes to the rank with the fewest tokens so far
// (lowest rank among equals). Ascending within each rank; world_size 1 takes every row in
// order. Deterministic, so every rank computes the same split.
std::vector<std::vector<int64_t>> SplitAcrossRanks(const std::vector<int64_t>& tokens,
                                                   int world_size);
// The same counts without balancing (trainer.balance_batch=false): rank r takes the next
// consecutive rows, as verl hands each rank its chunk of the batch.
std::vector<std::vector<int64_t>> SplitInOrder(int64_t rows, int world_size);

}  // namespace rlmesh::trainer
