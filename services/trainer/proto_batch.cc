#include "services/trainer/proto_batch.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

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

// What one kind of per-token values may hold, beyond being finite.
enum class Values {
  kAny,       // advantages
  kLogProbs,  // at most kLogProbSlack: log p <= 0, up to rounding
  kWeights,   // >= 0; a sample without any takes 1 on every token (importance weights)
};

// A log-probability is at most 0; float32 log_softmax rounds to a few 1e-7 above it at most.
// A value above this is something else (most likely a probability sent in its place), and
// would make the ratio and the KL wrong without an error.
constexpr float kLogProbSlack = 1e-3f;

// samples[b].<name> at its response positions of a [B, T] tensor, one finite value per response
// token, of `kind`.
absl::StatusOr<torch::Tensor> PerToken(
    const google::protobuf::RepeatedPtrField<v1::TrainingSample>& samples, int64_t length,
    const char* name,
    const google::protobuf::RepeatedField<float>& (v1::TrainingSample::*get)() const, Values kind) {
  const std::optional<float> if_empty =
      kind == Values::kWeights ? std::optional<float>(1.0f) : std::nullopt;
  torch::Tensor out = torch::full({samples.size(), length}, if_empty.value_or(0), torch::kFloat32);
  auto acc = out.accessor<float, 2>();
  for (int b = 0; b < samples.size(); ++b) {
    const auto& sample = samples.Get(b);
    const auto& values = (sample.*get)();
    if (if_empty.has_value() && values.empty()) continue;
    const int prompt = sample.sequence().prompt_length();
    const int response = sample.sequence().token_ids_size() - prompt;
    if (values.size() != response) {
      return absl::InvalidArgumentError(absl::StrCat(
          "samples[", b, "].", name, ": expected ", response, " values (one per response token)",
          if_empty ? " or none" : "", ", got ", values.size()));
    }
    for (int r = 0; r < response; ++r) {
      const float value = values.Get(r);
      if (!std::isfinite(value) || (kind == Values::kWeights && value < 0)) {
        return absl::InvalidArgumentError(absl::StrCat("samples[", b, "].", name, "[", r,
                                                       "]: ", value, " is not a finite number",
                                                       if_empty ? " >= 0" : ""));
      }
      if (kind == Values::kLogProbs && value > kLogProbSlack) {
        return absl::InvalidArgumentError(absl::StrCat(
            "samples[", b, "].", name, "[", r, "]: ", value,
            " is above 0, and a log-probability is at most 0 (a probability sent in its place?)"));
      }
      acc[b][prompt + r] = value;
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
  // Ids name the samples in the step's records and errors: two alike would be told apart by
  // nothing (an id may be empty; those are not compared).
  {
    std::map<std::string, int> first;
    for (int b = 0; b < samples.size(); ++b) {
      const std::string& id = samples.Get(b).sequence().id();
      if (id.empty()) continue;
      auto [it, added] = first.emplace(id, b);
      if (!added) {
        return absl::InvalidArgumentError(absl::StrCat("samples[", b, "].sequence.id: \"", id,
                                                       "\" repeats samples[", it->second, "]"));
      }
    }
  }
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
  auto advantages =
      PerToken(samples, length, "advantages", &v1::TrainingSample::advantages, Values::kAny);
  if (!advantages.ok()) return advantages.status();
  auto old = PerToken(samples, length, "old_logprobs", &v1::TrainingSample::old_logprobs,
                      Values::kLogProbs);
  if (!old.ok()) return old.status();
  batch->advantages = *advantages;
  batch->old_log_probs = *old;
  const bool weighted = std::any_of(samples.begin(), samples.end(),
                                    [](const auto& s) { return s.rollout_is_weights_size() > 0; });
  if (weighted) {
    ASSIGN_OR_RETURN(batch->rollout_is_weights,
                     PerToken(samples, length, "rollout_is_weights",
                              &v1::TrainingSample::rollout_is_weights, Values::kWeights));
  }
  // Rejection sampling: the rejected response tokens leave the mask.
  auto mask = batch->response_mask.accessor<int64_t, 2>();
  for (int b = 0; b < samples.size(); ++b) {
    const auto& sample = samples.Get(b);
    const int prompt = sample.sequence().prompt_length();
    const int response = sample.sequence().token_ids_size() - prompt;
    for (int k = 0; k < sample.rejected_tokens_size(); ++k) {
      const int r = sample.rejected_tokens(k);
      if (r < 0 || r >= response) {
        return absl::InvalidArgumentError(
            absl::StrCat("samples[", b, "].rejected_tokens[", k, "]: ", r,
                         " is not a response position (the response has ", response, " tokens)"));
      }
      mask[b][prompt + r] = 0;
    }
  }
  if (need_ref) {
    auto ref = PerToken(samples, length, "ref_logprobs", &v1::TrainingSample::ref_logprobs,
                        Values::kLogProbs);
    if (!ref.ok()) return ref.status();
    batch->ref_log_probs = *ref;
  }
  return batch;
}

absl::StatusOr<KeptOldLogProbs> KeepOldLogProbs(
    const google::protobuf::RepeatedPtrField<v1::TokenSequence>& sequences,
    const torch::Tensor& log_probs, uint64_t weight_version) {
  KeptOldLogProbs kept;
  kept.weight_version = weight_version;
  std::map<std::string, int> first;
  for (int b = 0; b < sequences.size(); ++b) {
    const v1::TokenSequence& seq = sequences.Get(b);
    if (seq.id().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequences[", b, "].id: must not be empty with keep = true"));
    }
    auto [it, fresh] = first.emplace(seq.id(), b);
    if (!fresh) {
      return absl::InvalidArgumentError(absl::StrCat("sequences[", b, "].id: \"", seq.id(),
                                                     "\" is sequences[", it->second,
                                                     "]'s too; keep = true needs unique ids"));
    }
    kept.by_id.emplace(seq.id(), std::make_pair(seq, ResponseValues(log_probs, b, seq)));
  }
  return kept;
}

absl::StatusOr<google::protobuf::RepeatedPtrField<v1::TrainingSample>> ExpandSamples(
    const google::protobuf::RepeatedPtrField<v1::TrainingSample>& samples,
    const KeptOldLogProbs* kept, uint64_t weight_version) {
  google::protobuf::RepeatedPtrField<v1::TrainingSample> out = samples;
  for (int b = 0; b < out.size(); ++b) {
    v1::TrainingSample& sample = *out.Mutable(b);
    const bool needs_sequence = sample.sequence().token_ids_size() == 0;
    const bool needs_old = sample.old_logprobs_size() == 0;
    if (needs_sequence || needs_old) {
      const std::string& id = sample.sequence().id();
      const char* what = needs_sequence ? "sequence.token_ids" : "old_logprobs";
      if (kept == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("samples[", b, "].", what,
                         ": empty, and no sequences were kept (call "
                         "ComputeOldLogProbs with keep = true on the batch first)"));
      }
      if (kept->weight_version != weight_version) {
        return absl::FailedPreconditionError(absl::StrCat(
            "samples[", b, "].", what, ": empty, and the kept old log-probs are of weight version ",
            kept->weight_version, " while the policy is at version ", weight_version,
            " (call ComputeOldLogProbs with keep = true again)"));
      }
      auto it = kept->by_id.find(id);
      if (it == kept->by_id.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("samples[", b, "].", what, ": empty, and no sequence \"", id,
                         "\" was kept by the last ComputeOldLogProbs with keep = true"));
      }
      const auto& [sequence, logprobs] = it->second;
      if (needs_sequence) {
        *sample.mutable_sequence() = sequence;
      } else if (!google::protobuf::util::MessageDifferencer::Equals(sample.sequence(), sequence)) {
        return absl::InvalidArgumentError(
            absl::StrCat("samples[", b, "].sequence: differs from the sequence kept under id \"",
                         id, "\", whose old log-probs it would take"));
      }
      if (needs_old) sample.mutable_old_logprobs()->Add(logprobs.begin(), logprobs.end());
    }
    if (sample.advantages_size() == 0) {
      if (!std::isfinite(sample.advantage())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "samples[", b, "].advantage: ", sample.advantage(), " is not a finite number"));
      }
      const int response = sample.sequence().token_ids_size() - sample.sequence().prompt_length();
      for (int r = 0; r < response; ++r) sample.add_advantages(sample.advantage());
    }
  }
  return out;
}

std::vector<float> ResponseValues(const torch::Tensor& values, int64_t row,
                                  const v1::TokenSequence& sequence) {
  auto r = values.select(0, row).to(torch::kFloat32).contiguous();
  const float* data = r.data_ptr<float>();
  return std::vector<float>(data + sequence.prompt_length(), data + sequence.token_ids_size());
}

}  // namespace rlmesh::trainer
