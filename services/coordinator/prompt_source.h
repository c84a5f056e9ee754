// The run's prompts: the training and validation rows (the data files, or the quickstart's
// synthetic task), encoded once with the chat template and fitted to data.max_prompt_length,
// and the epoch sampler that draws each step's batch. Create fails naming the key or the row
// that is wrong. Draw and Restore move the sampler and must come from one thread at a time;
// the rest is read-only after Create.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/service_settings.h"
#include "common/data/dataset.h"
#include "common/data/sampler.h"
#include "common/tokenizer/tokenizer.h"
#include "services/coordinator/grpo_step.h"

namespace rlmesh::coordinator {

// One step's prompts, drawn in step order, and where the sampler stood after them.
struct DrawnStep {
  std::vector<StepPrompt> prompts;
  int64_t epoch = 0;
  data::SamplerPosition position;
};

class PromptSource {
 public:
  // `tokenizer` must outlive the source.
  static absl::StatusOr<std::unique_ptr<PromptSource>> Create(
      const config::CoordinatorSettings& settings, const tokenizer::Tokenizer& tokenizer);

  // The next batch of training prompts (data.gen_batch_size of them, which is
  // data.train_batch_size without dynamic sampling), with uids "s<step>/<row>", and
  // "s<step>r<round>/<row>" for a step's later rounds of dynamic sampling.
  absl::StatusOr<DrawnStep> Draw(int64_t step, int64_t round = 0);
  // Every validation prompt, in file order, with uids "val/<row>".
  absl::StatusOr<std::vector<StepPrompt>> ValidationPrompts() const;

  // Continues from a checkpoint's position (INVALID_ARGUMENT outside the epoch).
  absl::Status Restore(const data::SamplerPosition& position) {
    return sampler_->Restore(position);
  }
  data::SamplerPosition position() const { return sampler_->position(); }
  // trainer.total_training_steps when set (> 0), else total_epochs x batches per epoch.
  int64_t total_steps() const { return total_steps_; }

  // The training rows and their encoded prompts (the warm-up's examples), index for index.
  const std::vector<data::DataRow>& train_rows() const { return train_rows_; }
  const std::vector<std::vector<int32_t>>& train_prompt_ids() const { return train_prompt_ids_; }
  size_t num_validation_prompts() const { return val_rows_.size(); }

 private:
  explicit PromptSource(const tokenizer::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  absl::Status Load(const config::CoordinatorSettings& settings);
  // The prompts of rows[indices[i]], whose token ids are ids[indices[i]].
  absl::StatusOr<std::vector<StepPrompt>> MakePrompts(const std::vector<data::DataRow>& rows,
                                                      const std::vector<std::vector<int32_t>>& ids,
                                                      const std::vector<int64_t>& indices,
                                                      const std::string& uid_prefix) const;

  const tokenizer::Tokenizer& tokenizer_;
  std::vector<data::DataRow> train_rows_, val_rows_;
  std::vector<std::vector<int32_t>> train_prompt_ids_, val_prompt_ids_;
  std::unique_ptr<data::EpochSampler> sampler_;
  int64_t total_steps_ = 0;
};

}  // namespace rlmesh::coordinator
