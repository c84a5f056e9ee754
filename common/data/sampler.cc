#include "common/data/sampler.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/data/random.h"
#include "nlohmann/json.hpp"

namespace rlmesh::data {

std::string SamplerPosition::ToJson() const {
  return nlohmann::json{{"epoch", epoch}, {"index", index}}.dump();
}

absl::StatusOr<SamplerPosition> SamplerPosition::FromJson(const std::string& json) {
  nlohmann::json parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object() || !parsed.contains("epoch") || !parsed.contains("index") ||
      !parsed["epoch"].is_number_integer() || !parsed["index"].is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data position: expected {\"epoch\": <integer>, \"index\": <integer>}, got ", json));
  }
  SamplerPosition position;
  position.epoch = parsed["epoch"].get<int64_t>();
  position.index = parsed["index"].get<int64_t>();
  if (position.epoch < 0 || position.index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data position: epoch and index must be >= 0, got ", json));
  }
  return position;
}

absl::StatusOr<std::unique_ptr<EpochSampler>> EpochSampler::Create(
    int64_t dataset_size, const SamplerOptions& options) {
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key data.train_batch_size: expected an integer >= 1, got ", options.batch_size));
  }
  if (dataset_size < 1) {
    return absl::InvalidArgumentError("the dataset has no rows");
  }
  if (options.drop_last && options.batch_size > dataset_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key data.train_batch_size: ", options.batch_size, " exceeds the ", dataset_size,
        " rows of the dataset, so an epoch would have no step"));
  }
  return std::unique_ptr<EpochSampler>(new EpochSampler(dataset_size, options));
}

int64_t EpochSampler::steps_per_epoch() const {
  return options_.drop_last ? size_ / options_.batch_size
                            : (size_ + options_.batch_size - 1) / options_.batch_size;
}

std::vector<int64_t> EpochSampler::EpochOrder(int64_t epoch) const {
  std::vector<int64_t> order(size_);
  std::iota(order.begin(), order.end(), 0);
  if (options_.shuffle) {
    Random random(options_.seed, static_cast<uint64_t>(epoch));
    random.Shuffle(order);
  }
  return order;
}

void EpochSampler::LoadEpoch(int64_t epoch) {
  if (loaded_epoch_ == epoch) return;
  order_ = EpochOrder(epoch);
  loaded_epoch_ = epoch;
}

std::vector<int64_t> EpochSampler::Next() {
  const bool epoch_done = options_.drop_last ? position_.index + options_.batch_size > size_
                                             : position_.index >= size_;
  if (epoch_done) {
    ++position_.epoch;
    position_.index = 0;
  }
  LoadEpoch(position_.epoch);
  const int64_t end = std::min(position_.index + options_.batch_size, size_);
  std::vector<int64_t> batch(order_.begin() + position_.index, order_.begin() + end);
  position_.index = end;
  return batch;
}

absl::Status EpochSampler::Restore(const SamplerPosition& position) {
  if (position.epoch < 0 || position.index < 0 || position.index > size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data position {epoch ", position.epoch, ", index ", position.index,
        "}: expected epoch >= 0 and 0 <= index <= ", size_, " (the dataset's rows)"));
  }
  position_ = position;
  return absl::OkStatus();
}

}  // namespace rlmesh::data
