// Conversions between the wire batches of the trainer and reference services (TokenSequence,
// TrainingSample) and the actor's padded tensors (ActorBatch), with the request checks both
// services apply: every problem is an InvalidArgument that names the field, e.g.
// `sequences[3].token_ids[5]: 70000 is outside the vocabulary (0..31999)`.
#pragma once

#include <cstdint>
#include <vector>

#include <google/protobuf/repeated_ptr_field.h>
#include <torch/torch.h>

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
// `need_ref`) ref_log_probs, each checked to have one finite value per response token.
absl::StatusOr<ActorBatch> BatchFromSamples(
    const google::protobuf::RepeatedPtrField<v1::TrainingSample>& samples,
    const BatchLimits& limits, bool need_ref);

// Row b's values at its response tokens (positions prompt_length .. length-1) of a [B, T]
// token-aligned tensor.
std::vector<float> ResponseValues(const torch::Tensor& values, int64_t row,
                                  const v1::TokenSequence& sequence);

}  // namespace rlmesh::trainer
