// What a generation request asks for and what each finished sample carries. Torch-free, so
// the rollout service's gRPC layer can fill and read these without LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace rlmesh::generation {

// Sampling settings of one request, with verl's `actor_rollout_ref.rollout.*` semantics:
// temperature 0 or do_sample=false is greedy (argmax); top_k <= 0 (verl uses -1) is off;
// top_p 1.0 is off.
struct SamplingParams {
  int32_t n = 1;             // samples (independent sequences) of this prompt
  double temperature = 1.0;  // logits are divided by it before softmax
  bool do_sample = true;     // false: greedy whatever the temperature
  double top_p = 1.0;        // keep the smallest set of tokens whose mass >= top_p
  int64_t top_k = -1;        // keep the top_k most likely tokens (<= 0: off)
  int64_t max_new_tokens = 256;
  std::vector<int64_t> stop_token_ids;  // sampling one ends the sample (it is kept in output)
  // Sample i draws from a generator seeded from (seed, i), so outputs do not depend on the
  // batch it ran in. Unset: a seed drawn by the engine.
  std::optional<uint64_t> seed;

  bool greedy() const { return !do_sample || temperature == 0.0; }
  // Temperature the log-probs are computed under: `temperature`, or 1 when it is 0.
  double logprob_temperature() const { return temperature > 0.0 ? temperature : 1.0; }
};

// InvalidArgument naming the field when a value is outside its range (n >= 1,
// temperature >= 0 and finite, 0 < top_p <= 1, top_k >= -1, max_new_tokens >= 1, stop ids in
// [0, vocab_size)).
absl::Status ValidateSamplingParams(const SamplingParams& params, int64_t vocab_size);

enum class FinishReason {
  kStop,    // a stop token was sampled (it is the last output token)
  kLength,  // max_new_tokens reached, or the sequence filled its KV-cache slot
  kAbort,   // Abort()/AbortAll(), engine shutdown, or a model error (see Sample::error)
};

// "stop", "length", "abort" (the names vLLM and verl use).
const char* FinishReasonName(FinishReason reason);

// Newer weights taking over a running sample: response token `token_index` and the ones
// after it (until the next switch) came from weight version `version`.
struct VersionSwitch {
  int64_t token_index = 0;
  int64_t version = 0;
};

// One finished sequence of a request.
struct Sample {
  std::string request_id;
  int32_t index = 0;  // 0 .. n-1 within the request
  int64_t prompt_length = 0;
  std::vector<int64_t> token_ids;  // generated tokens, the stop token included
  std::vector<float> logprobs;     // log-prob of each generated token (see Sampler)
  FinishReason finish_reason = FinishReason::kLength;
  absl::Status error;                // non-OK only when a model error aborted the sample
  int64_t weight_version_start = 0;  // weight version when the sample began decoding
  int64_t weight_version_end = 0;    // weight version that produced its last token
  // Empty when every token came from weight_version_start.
  std::vector<VersionSwitch> version_switches;
};

}  // namespace rlmesh::generation
