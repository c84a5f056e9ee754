// Internal to the generation engine (generation_engine.cc and generation_engine_step.cc):
// the per-request and per-sequence state behind GenerationEngine's private declarations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/generation/generation_engine.h"

namespace rlmesh::generation {

struct GenerationEngine::Request {
  std::string id;
  std::vector<int64_t> prompt;
  SamplingParams params;
  int32_t first_index = 0;  // GenerationRequest::first_index
  SampleCallback on_sample;
  // The fields below are guarded by the engine's mu_.
  int32_t undelivered = 0;  // sequences not yet delivered
  int32_t queued = 0;       // sequences still in queue_
  bool aborted = false;
};

struct GenerationEngine::Sequence {
  std::shared_ptr<Request> request;
  int32_t index = 0;
  torch::Generator generator;
  int64_t slot = -1;
  // The last sampled token, not yet in the KV cache: the next decode step's input.
  int64_t pending_token = -1;
  std::vector<int64_t> tokens;
  std::vector<float> logprobs;
  int64_t weight_version_start = 0;
  int64_t weight_version_end = 0;
  std::vector<VersionSwitch> version_switches;
  // After new weights with GenerationEngineOptions::recompute_kv_on_update: the cache is
  // being filled again from the prompt and the tokens sampled so far (all but the pending
  // one), and no token is sampled when that prefill completes.
  bool refill = false;
  bool done = false;
  FinishReason finish_reason = FinishReason::kLength;
  absl::Status error;
  // Context tokens in the KV cache so far (the prompt, or while refilling the prompt and the
  // response but its pending token), and in how many steps they came (chunked prefill).
  int64_t prefilled = 0;
  int32_t prefill_chunks = 0;
  // Samples of the same request admitted with this one: once its prompt is cached they copy
  // the cache and sample their first token from its logits. A follower waits meanwhile.
  std::vector<Sequence*> followers;
  bool follower = false;
};

}  // namespace rlmesh::generation
