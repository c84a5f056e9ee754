// Deterministic, resumable batches of dataset rows for the training loop (verl's train
// dataloader with drop_last=True): each epoch visits the rows in an order fixed by
// (data.seed, epoch) when shuffling, in file order otherwise, and yields data.train_batch_size
// rows per step; the rows left over at the end of an epoch are skipped. The position
// {epoch, index} is saved in checkpoints; a sampler restored to it yields exactly the batches
// an uninterrupted one would have. Not thread-safe: one owner (the coordinator).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rlmesh::data {

struct SamplerOptions {
  int64_t batch_size = 1;  // data.train_batch_size (prompts per step)
  bool shuffle = true;     // data.shuffle
  uint64_t seed = 1;       // data.seed
  bool drop_last = true;   // false: the last, shorter batch of an epoch is yielded too
};

// Where the sampler is: the next batch starts at `index` of epoch `epoch`'s order.
struct SamplerPosition {
  int64_t epoch = 0;
  int64_t index = 0;
  bool operator==(const SamplerPosition&) const = default;

  std::string ToJson() const;  // {"epoch":E,"index":I}
  static absl::StatusOr<SamplerPosition> FromJson(const std::string& json);
};

class EpochSampler {
 public:
  // INVALID_ARGUMENT when the batch is < 1 or, with drop_last, larger than the dataset.
  static absl::StatusOr<std::unique_ptr<EpochSampler>> Create(int64_t dataset_size,
                                                              const SamplerOptions& options);

  // The next batch of row indices; advances across epochs as needed.
  std::vector<int64_t> Next();

  SamplerPosition position() const { return position_; }

  // Continues from `position` (from a checkpoint). INVALID_ARGUMENT when the index lies
  // outside the epoch.
  absl::Status Restore(const SamplerPosition& position);

  // Batches per epoch: floor(size / batch) with drop_last, else ceil.
  int64_t steps_per_epoch() const;

  // The visiting order of rows in `epoch`.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;

 private:
  EpochSampler(int64_t dataset_size, const SamplerOptions& options)
      : size_(dataset_size), options_(options) {}
  void LoadEpoch(int64_t epoch);

  const int64_t size_;
  const SamplerOptions options_;
  SamplerPosition position_;
  int64_t loaded_epoch_ = -1;
  std::vector<int64_t> order_;  // EpochOrder(loaded_epoch_)
};

}  // namespace rlmesh::data
