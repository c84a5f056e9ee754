// The actor's batch of sequences: its checks, row selection, and the token-aligned log-probs
// and entropies read from a policy's logits. Pure functions; any thread may call them.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rlmesh::trainer {

// One batch of full sequences (prompt + response, padded to T). Log-prob tensors are aligned
// with the tokens: entry [b, t] is the log-prob of input_ids[b, t], read from the logits at
// t - 1, so column 0 is never a response position.
struct ActorBatch {
  torch::Tensor input_ids;       // [B, T] int64
  torch::Tensor attention_mask;  // [B, T] 0/1
  torch::Tensor position_ids;    // [B, T] int64
  torch::Tensor response_mask;   // [B, T] 0/1, 1 on response tokens (column 0 must be 0)
  torch::Tensor old_log_probs;   // [B, T] floating; UpdatePolicy only
  torch::Tensor ref_log_probs;   // [B, T] floating; UpdatePolicy with use_kl_loss only
  torch::Tensor advantages;      // [B, T] floating; UpdatePolicy only
  // [B, T] floating >= 0, optional (undefined = 1 everywhere): the rollout correction's
  // importance weights, multiplying each token's policy-gradient loss; UpdatePolicy only.
  torch::Tensor rollout_is_weights;
};

// Which optional fields a caller needs.
struct BatchNeeds {
  bool old_log_probs = false;
  bool ref_log_probs = false;
  bool advantages = false;
};

// InvalidArgument naming the field when: a needed tensor is missing; a tensor is not
// [B, T] with the B and T of input_ids (B, T >= 1; T >= 2 so that a response token exists);
// ids are not int64; masks hold values other than 0 and 1; response_mask is 1 in column 0 or
// where attention_mask is 0; a needed floating tensor is not floating or holds NaN or inf;
// rollout_is_weights, when defined, is not [B, T] floating, finite and >= 0.
absl::Status ValidateBatch(const ActorBatch& batch, const BatchNeeds& needs);

// The rows `index` (int64 [n]) of every defined field.
ActorBatch SelectRows(const ActorBatch& batch, const torch::Tensor& index);

// log softmax(logits[:, t-1] / temperature)[input_ids[:, t]] at [:, t], 0 in column 0.
// logits [B, T, V], input_ids [B, T]; differentiable w.r.t. logits.
torch::Tensor TokenLogProbs(const torch::Tensor& logits, const torch::Tensor& input_ids,
                            double temperature);

// Entropy of softmax(logits[:, t-1] / temperature) at [:, t], 0 in column 0.
absl::StatusOr<torch::Tensor> TokenEntropy(const torch::Tensor& logits, double temperature);

// Padding-free packing (verl's use_remove_padding): the attended tokens (attention_mask 1)
// of [B, T] rows, row after row, as one row of N tokens for CausalLmImpl::ForwardPacked.
struct PackedRows {
  torch::Tensor input_ids;     // [1, N] int64
  torch::Tensor position_ids;  // [1, N] int64: each token's position in its own row
  torch::Tensor cu_seqlens;    // [B + 1] int64 on the CPU: row b is tokens cu[b] .. cu[b+1]-1
  torch::Tensor index;         // [N] int64: token n's place b * T + t in the rows
  torch::Tensor starts;        // [N] bool: the first token of its row
  int64_t rows = 0, cols = 0;  // B and T
};
// The rows must be valid (ValidateBatch) and hold at least one attended token.
PackedRows PackRows(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                    const torch::Tensor& position_ids);

// TokenLogProbs and TokenEntropy of a packed row's logits [1, N, V], placed back in [B, T]:
// token n of a row is scored by the logits of token n - 1 of the same row; 0 at padding and
// at each row's first token. Differentiable w.r.t. the logits.
torch::Tensor PackedTokenLogProbs(const torch::Tensor& logits, const PackedRows& packed,
                                  double temperature);
absl::StatusOr<torch::Tensor> PackedTokenEntropy(const torch::Tensor& logits,
                                                 const PackedRows& packed, double temperature);

// A model's logits: of padded rows (input_ids, attention_mask, position_ids) -> [B, T, V], or
// with `packed` of one packed row (input_ids, position_ids, cu_seqlens) -> [1, N, V].
using RowLogits = std::function<absl::StatusOr<torch::Tensor>(
    const torch::Tensor& input_ids, const torch::Tensor& second, const torch::Tensor& third,
    bool packed)>;
enum class EntropyNeed { kNone, kValue, kDifferentiable };  // kValue: computed without a graph
struct TokenScores {
  torch::Tensor log_probs;  // [B, T] as TokenLogProbs
  torch::Tensor entropy;    // [B, T] as TokenEntropy; undefined with kNone
  int64_t tokens = 0;       // token positions the forward computed (padding included)
};
// The token log-probs (and entropies) of `rows` at `temperature` from one forward: with
// `pack` (use_remove_padding) packed into one row (PackRows; padded when no token is
// attended), else padded. Reads input_ids, attention_mask and position_ids.
absl::StatusOr<TokenScores> ScoreTokens(const ActorBatch& rows, double temperature, bool pack,
                                        EntropyNeed entropy, const RowLogits& logits);

}  // namespace rlmesh::trainer
