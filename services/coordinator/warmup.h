// rlmesh.warmup.*: supervised steps on the trainer before GRPO (the quickstart's way past a
// tiny model's cold start). Each step takes rlmesh.warmup.batch_size training prompts drawn
// with the run seed, followed by their ground truth (or its characters shuffled, the
// "shuffled_ground_truth" control) and the tokenizer's eos token. Publishing the result and
// anchoring the KL reference to it are the coordinator's.
#pragma once

#include "absl/status/status.h"
#include "common/config/service_settings.h"
#include "common/tokenizer/tokenizer.h"
#include "services/coordinator/clients.h"
#include "services/coordinator/prompt_source.h"

namespace rlmesh::coordinator {

// rlmesh.warmup.sft_steps steps (none when it is 0); the first error of the trainer stops
// them. FAILED_PRECONDITION when the tokenizer has no eos token.
absl::Status RunSftWarmUp(const config::CoordinatorSettings& settings, TrainerClient& trainer,
                          const tokenizer::Tokenizer& tokenizer, const PromptSource& prompts);

}  // namespace rlmesh::coordinator
