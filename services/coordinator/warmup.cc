#include "services/coordinator/warmup.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status/status_macros.h"
#include "services/coordinator/run_log.h"

namespace rlmesh::coordinator {

absl::Status RunSftWarmUp(const config::CoordinatorSettings& settings, TrainerClient& trainer,
                          const tokenizer::Tokenizer& tokenizer, const PromptSource& prompts) {
  const auto& train_rows = prompts.train_rows();
  const auto& train_prompt_ids = prompts.train_prompt_ids();
  std::mt19937_64 rng(settings.seed ^ 0x5f7a3c1d2b4e6f80ULL);
  std::uniform_int_distribution<size_t> pick(0, train_rows.size() - 1);
  const auto eos = tokenizer.eos_token_id();
  if (!eos.has_value()) {
    return absl::FailedPreconditionError("rlmesh.warmup.sft_steps: the tokenizer has no eos token");
  }
  const std::string line =
      absl::StrCat("warm-up: ", settings.warmup_steps, " supervised steps of ",
                   settings.warmup_batch_size, " examples (target: ", settings.warmup_target, ")");
  std::fprintf(stderr, "coordinator: %s\n", line.c_str());
  const absl::Time start = absl::Now();
  for (int64_t step = 1; step <= settings.warmup_steps; ++step) {
    v1::SftStepRequest request;
    request.set_lr(settings.warmup_lr);
    request.set_step(step);
    for (int64_t b = 0; b < settings.warmup_batch_size; ++b) {
      const size_t index = pick(rng);
      std::string target = train_rows[index].ground_truth;
      if (settings.warmup_target == "shuffled_ground_truth")
        std::shuffle(target.begin(), target.end(), rng);
      ASSIGN_OR_RETURN(auto response, tokenizer.Encode(target));
      response.push_back(*eos);
      auto* seq = request.add_sequences();
      seq->set_id(absl::StrCat("warmup", step, "/", b));
      seq->mutable_token_ids()->Add(train_prompt_ids[index].begin(), train_prompt_ids[index].end());
      seq->mutable_token_ids()->Add(response.begin(), response.end());
      seq->set_prompt_length(static_cast<int32_t>(train_prompt_ids[index].size()));
    }
    ASSIGN_OR_RETURN(auto response, trainer.SftStep(request));
    if (step % 25 == 0 || step == settings.warmup_steps) {
      std::printf(
          "warm-up %lld/%lld | sft loss %.4f | %s\n", static_cast<long long>(step),
          static_cast<long long>(settings.warmup_steps),
          response.metrics().count("sft/loss") > 0 ? response.metrics().at("sft/loss") : 0.0,
          FormatDuration(absl::ToDoubleSeconds(absl::Now() - start)).c_str());
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace rlmesh::coordinator
