// The reward model of reward_model.enable: a Hugging Face …ForSequenceClassification
// checkpoint (Llama, Qwen2, Qwen3 decoders with a `score` head of one output) run on
// LibTorch inside the reward service. An item's input is its prompt text followed by its
// response text, tokenized by the model folder's tokenizer.json without added special
// tokens (the prompt text already carries its chat template); its score is the head's output
// at the last token that is not the pad id, as transformers reads it (model::SequenceScores).
// Items are scored in micro-batches of reward_model.micro_batch_size_per_gpu sequences,
// right-padded; one forward at a time. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/reward/remote_scorer.h"

namespace rlmesh::model {
class CausalLmImpl;
}
namespace rlmesh::tokenizer {
class Tokenizer;
}

namespace rlmesh::reward {

struct RewardModelOptions {
  std::string model_path;        // reward_model.model.path
  int64_t micro_batch_size = 0;  // reward_model.micro_batch_size_per_gpu; 0 = all at once
};

class RewardModelScorer : public RemoteScorer {
 public:
  // Loads the model and its tokenizer. FAILED_PRECONDITION naming reward_model.model.path for
  // a folder that is no single-output sequence classifier.
  static absl::StatusOr<std::unique_ptr<RewardModelScorer>> Create(
      const RewardModelOptions& options);
  ~RewardModelScorer() override;

  // One score per item (no extra values); an item longer than the model's
  // max_position_embeddings is INVALID_ARGUMENT; items whose micro-batch would start after
  // `deadline` are DEADLINE_EXCEEDED.
  absl::StatusOr<std::vector<absl::StatusOr<ScoreResult>>> ScoreBatch(
      const std::vector<RewardItem>& items, absl::Time deadline) override;
  std::string address() const override { return options_.model_path; }
  std::string where() const override { return "reward model " + options_.model_path; }
  ItemErrorKind KindOf(const absl::Status& item_error) const override;

  // Forward passes so far (one per micro-batch).
  int64_t forwards() const;

 private:
  RewardModelScorer(const RewardModelOptions& options, std::shared_ptr<model::CausalLmImpl> model,
                    std::unique_ptr<tokenizer::Tokenizer> tokenizer);

  const RewardModelOptions options_;
  const std::shared_ptr<model::CausalLmImpl> model_;
  const std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  mutable absl::Mutex forward_mu_;  // one forward at a time: LibTorch's threads are the machine's
  int64_t forwards_ ABSL_GUARDED_BY(forward_mu_) = 0;
};

}  // namespace rlmesh::reward
