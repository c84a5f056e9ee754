// Conversions between the wire batches of the trainer and reference services (TokenSequence,
// TrainingSample) and the actor's padded tensors (ActorBatch), with the request checks both
// services apply: every problem is an InvalidArgument that names the field, e.g.
// `sequences[3].token_ids[5]: 70000 is outside the vocabulary (0..31999)`.
#pragma once

#include <google/protobuf/repeated_ptr_field.h>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "rlmesh/v1/trainer.pb.h"
#include "services/trainer/actor_batch.h"

namespace rlmesh::trainer {

struct BatchLimits {
  int64_t vocab_size = 0;     // token ids must be in [0, vocab_size)
  int64_t max_sequences = 0;  // 0 = no limit
  int64_t max_length = 0;     // tokens per sequence; 0 = no limit
};

// Right-pads the sequences into input_ids/attention_mask/position_ids/response_mask [B, T].
absl::StatusOr<ActorBatch> BatchFromSequences(
    const google::protobuf::RepeatedPtrField<v1::TokenSequence>& sequences,
    const BatchLimits& limits, const char* field = "sequences");

// The same for training samples, also filling advantages, old_log_probs and (when
// `need_ref`) ref_log_probs, each checked to have one finite value per response token, and
// rollout_is_weights when a sample has any (one finite value >= 0 per response token; a
// sample without weighs 1).
absl::StatusOr<ActorBatch> BatchFromSamples(
    const google::protobuf::RepeatedPtrField<v1::TrainingSample>& samples,
    const BatchLimits& limits, bool need_ref);

// What ComputeOldLogProbs kept (keep = true) for the next TrainStep's compact samples: each
// sequence by id with its log-probs, computed at `weight_version`.
struct KeptOldLogProbs {
  uint64_t weight_version = 0;
  std::map<std::string, std::pair<v1::TokenSequence, std::vector<float>>> by_id;
};

// The kept entries of `sequences` and their per-token `log_probs` ([B, T], ResponseValues);
// InvalidArgument naming the sequence for an empty or repeated id.
absl::StatusOr<KeptOldLogProbs> KeepOldLogProbs(
    const google::protobuf::RepeatedPtrField<v1::TokenSequence>& sequences,
    const torch::Tensor& log_probs, uint64_t weight_version);

// The samples in full form (trainer.proto, TrainingSample): a sample without token ids takes
// the kept sequence of its id, one without old_logprobs the kept log-probs, one without
// per-token advantages its `advantage` on every response token. FailedPrecondition naming the
// sample when it needs kept values that are missing or from other weights than
// `weight_version`; InvalidArgument when its token ids differ from the sequence kept under
// its id, or its advantage is not finite. `kept` may be null (nothing kept).
absl::StatusOr<google::protobuf::RepeatedPtrField<v1::TrainingSample>> ExpandSamples(
    const google::protobuf::RepeatedPtrField<v1::TrainingSample>& samples,
    const KeptOldLogProbs* kept, uint64_t weight_version);

// Row b's values at its response tokens (positions prompt_length .. length-1) of a [B, T]
// token-aligned tensor.
std::vector<float> ResponseValues(const torch::Tensor& values, int64_t row,
                                  const v1::TokenSequence& sequence);

}  // namespace rlmesh::trainer
