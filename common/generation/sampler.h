// Next-token selection from a batch of logits: greedy, or temperature / top-k / top-p sampling
// with one random generator per sequence, plus the log-prob of the chosen token.
//
// Log-prob convention: the log-prob returned for a token is log_softmax(logits / T)[token]
// with T the request's temperature (1 for greedy), over the full vocabulary, before top-k,
// top-p and the banned-token mask. That is exactly what the trainer and the reference
// recompute (verl divides the logits by rollout.temperature and takes log_softmax), so
// rollout and trainer log-probs of the same weights agree. It is not the log-prob under the
// truncated, renormalised distribution the token was drawn from (vLLM's "processed_logprobs"
// after top-p); with top-p/top-k on, that one is larger by -log(kept mass).
//
// Not thread-safe: one Sampler and its generators belong to the thread that drives the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "common/generation/sampling_params.h"

namespace rlmesh::generation {

// The generator of sample `index` of a request with `seed`: seeded with a SplitMix64 mix of
// both, so sample i of a request draws the same numbers in any batch.
torch::Generator MakeSequenceGenerator(uint64_t seed, int64_t index);

// Next uniform double in [0, 1) from `generator` (53 random bits).
double NextUniform(torch::Generator& generator);

// The tokens top-k then top-p keep from one row of (unnormalised, non-negative) probabilities
// `probs[0..vocab)`, most likely first (ties by lower id). top_k <= 0: off; top-k keeps ties
// of the k-th value (as Hugging Face and vLLM do). top-p then keeps the smallest prefix whose
// mass is >= top_p of the mass top-k kept. Tokens of probability 0 are never kept, but at
// least one token is always kept.
std::vector<int64_t> TopKTopPSupport(const float* probs, int64_t vocab, int64_t top_k,
                                     double top_p);

// Inverse-CDF draw: the first token of `support` (in its order) at which the running sum of
// probs reaches u * (mass of `support`). u in [0, 1).
int64_t DrawFromSupport(const float* probs, const std::vector<int64_t>& support, double u);

struct SamplerOptions {
  // Tokens that are never chosen (for example the pad token), greedy or sampled.
  std::vector<int64_t> banned_token_ids;
};

class Sampler {
 public:
  struct Row {
    const SamplingParams* params = nullptr;  // greedy or sampled, T, top-k, top-p
    torch::Generator* generator = nullptr;   // the sequence's generator (unused when greedy)
  };
  struct Result {
    std::vector<int64_t> tokens;  // [B]
    std::vector<float> logprobs;  // [B], see the convention above
  };

  // InvalidArgument when a banned id is negative.
  static absl::StatusOr<std::unique_ptr<Sampler>> Create(const SamplerOptions& options);

  // `logits` [B, V] (any dtype/device; sampled in float32 on the CPU), one Row per row.
  // InvalidArgument when shapes disagree or a banned id is >= V.
  absl::StatusOr<Result> Sample(const torch::Tensor& logits, const std::vector<Row>& rows) const;

 private:
  explicit Sampler(const SamplerOptions& options) : options_(options) {}
  SamplerOptions options_;
};

}  // namespace rlmesh::generation
