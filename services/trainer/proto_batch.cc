#include "services/trainer/proto_batch.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace rlmesh::trainer {

namespace {

absl::Status CheckSequence(const v1::TokenSequence& seq, const std::string& where,
                           const BatchLimits& limits) {
  const int64_t length = seq.token_ids_size();
  if (length < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".token_ids: expected a prompt and at least one response token, got ", length,
        " tokens"));
  }
  if (limits.max_length > 0 && length > limits.max_length) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".token_ids: ", length,
                                                   " tokens, over the limit of ",
                                                   limits.max_length));
  }
  if (seq.prompt_length() < 1 || seq.prompt_length() >= length) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".prompt_length: expected 1..",
                                                   length - 1, ", got ", seq.prompt_length()));
  }
  for (int64_t t = 0; t < length; ++t) {
    const int32_t id = seq.token_ids(static_cast<int>(t));
    if (id < 0 || id >= limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".token_ids[", t, "]: ", id,
                                                     " is outside the vocabulary (0..",
                                                     limits.vocab_size - 1, ")"));
    }
  }
  const int64_t response = length - seq.prompt_length();
  if (seq.response_mask_size() != 0 && seq.response_mask_size() != response) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".response_mask: expected ", response,
                                                   " values (one per response token), got ",
                                                   seq.response_mask_size()));
  }
  return absl::OkStatus();
}

template <typename GetSequence>
absl::StatusOr<ActorBatch> Pad(int64_t batch_size, GetSequence get, const BatchLimits& limits,
                               const char* field) {
  if (batch_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": expected at least one, got none"));
  }
  if (limits.max_sequences > 0 && batch_size > limits.max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", batch_size,
                                                   " sequences, over the configured maximum of ",
                                                   limits.max_sequences));
  }
  int64_t max_length = 0;
  for (int64_t b = 0; b < batch_size; ++b) {
    const v1::TokenSequence& seq = get(b);
    const std::string where = absl::StrCat(field, "[", b, "]");
    if (auto status = CheckSequence(seq, where, limits); !status.ok()) return status;
    max_length = std::max<int64_t>(max_length, seq.token_ids_size());
  }
  ActorBatch batch;
  batch.input_ids = torch::zeros({batch_size, max_length}, torch::kInt64);
  batch.attention_mask = torch::zeros({batch_size, max_length}, torch::kInt64);
  batch.position_ids = torch::zeros({batch_size, max_length}, torch::kInt64);
  batch.response_mask = torch::zeros({batch_size, max_length}, torch::kInt64);
  auto ids = batch.input_ids.accessor<int64_t, 2>();
  auto attention = batch.attention_mask.accessor<int64_t, 2>();
  auto positions = batch.position_ids.accessor<int64_t, 2>();
  auto response = batch.response_mask.accessor<int64_t, 2>();
  for (int64_t b = 0; b < batch_size; ++b) {
    const v1::TokenSequence& seq = get(b);
    for (int t = 0; t < seq.token_ids_size(); ++t) {
      ids[b][t] = seq.token_ids(t);
      attention[b][t] = 1;
      positions[b][t] = t;
      if (t >= seq.prompt_length()) {
        const int r = t - seq.prompt_length();
        response[b][t] = seq.response_mask_size() == 0 || seq.response_mask(r) ? 1 : 0;
      }
    }
  }
  return batch;
}

absl::StatusOr<torch::Tensor> PerToken(
    const google::protobuf::RepeatedPtrField<v1::TrainingSample>& samples, int64_t length,
    const char* name,
    const google::protobuf::RepeatedField<float>& (v1::TrainingSample::*get)() const) {
  torch::Tensor out = torch::zeros({samples.size(), length}, torch::kFloat32);
  auto acc = out.accessor<float, 2>();
  for (int b = 0; b < samples.size(); ++b) {
    const auto& sample = samples.Get(b);
    const auto& values = (sample.*get)();
    const int prompt = sample.sequence().prompt_length();
    const int response = sample.sequence().token_ids_size() - prompt;
    if (values.size() != response) {
      return absl::InvalidArgumentError(absl::StrCat("samples[", b, "].", name, ": expected ",
                                                     response, " values (one per response token), got ",
                                                     values.size()));
    }
    for (int r = 0; r < response; ++r) {
      if (!std::isfinite(values.Get(r))) {
        return absl::InvalidArgumentError(absl::StrCat("samples[", b, "].", name, "[", r, "]: ",
                                                       values.Get(r), " is not a finite number"));
      }
      acc[b][prompt + r] = values.Get(r);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ActorBatch> BatchFromSequences(
    const google::protobuf::RepeatedPtrField<v1::TokenSequence>& sequences,
    const BatchLimits& limits, const char* field) {
  return Pad(
      sequences.size(), [&](int64_t b) -> const v1::TokenSequence& { return sequences.Get(b); },
      limits, field);
}

absl::StatusOr<ActorBatch> BatchFromSamples(
    const google::protobuf::RepeatedPtrField<v1::TrainingSample>& samples,
    const BatchLimits& limits, bool need_ref) {
  auto batch = Pad(
      samples.size(),
      [&](int64_t b) -> const v1::TokenSequence& { return samples.Get(b).sequence(); }, limits,
      "samples");
  if (!batch.ok()) {
    // Pad names the sequence as samples[b]; the field is samples[b].sequence.
    std::string message(batch.status().message());
    auto bracket = message.find("]");
    if (message.rfind("samples[", 0) == 0 && bracket != std::string::npos) {
      message.insert(bracket + 1, ".sequence");
    }
    return absl::InvalidArgumentError(message);
  }
  const int64_t length = batch->input_ids.size(1);
  auto advantages = PerToken(samples, length, "advantages", &v1::TrainingSample::advantages);
  if (!advantages.ok()) return advantages.status();
  auto old = PerToken(samples, length, "old_logprobs", &v1::TrainingSample::old_logprobs);
  if (!old.ok()) return old.status();
  batch->advantages = *advantages;
  batch->old_log_probs = *old;
  if (need_ref) {
    auto ref = PerToken(samples, length, "ref_logprobs", &v1::TrainingSample::ref_logprobs);
    if (!ref.ok()) return ref.status();
    batch->ref_log_probs = *ref;
  }
  return batch;
}

std::vector<float> ResponseValues(const torch::Tensor& values, int64_t row,
                                  const v1::TokenSequence& sequence) {
  auto r = values.select(0, row).to(torch::kFloat32).contiguous();
  const float* data = r.data_ptr<float>();
  return std::vector<float>(data + sequence.prompt_length(), data + sequence.token_ids_size());
}

}  // namespace rlmesh::trainer
