#include "services/reward/reward_model_scorer.h"

#include <torch/torch.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/model/causal_lm.h"
#include "common/model/pretrained.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/tokenizer.h"

namespace rlmesh::reward {

absl::StatusOr<std::unique_ptr<RewardModelScorer>> RewardModelScorer::Create(
    const RewardModelOptions& options) {
  auto where = [&options](const absl::Status& s) {
    return absl::FailedPreconditionError(
        absl::StrCat("reward_model.model.path=", options.model_path, ": ", s.message()));
  };
  model::CausalLmOptions model_options;
  model_options.sequence_classification = true;
  absl::StatusOr<std::shared_ptr<model::CausalLmImpl>> loaded =
      model::LoadPretrained(options.model_path, model_options);
  if (!loaded.ok()) return where(loaded.status());
  if ((*loaded)->config().num_labels != 1) {
    return where(absl::InvalidArgumentError(absl::StrCat(
        (*loaded)->config().architecture, " with num_labels ", (*loaded)->config().num_labels,
        ": a reward model gives one score (num_labels 1)")));
  }
  (*loaded)->eval();
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok =
      tokenizer::Tokenizer::FromDirectory(options.model_path);
  if (!tok.ok()) return where(tok.status());
  return std::unique_ptr<RewardModelScorer>(
      new RewardModelScorer(options, *std::move(loaded), *std::move(tok)));
}

RewardModelScorer::RewardModelScorer(const RewardModelOptions& options,
                                     std::shared_ptr<model::CausalLmImpl> model,
                                     std::unique_ptr<tokenizer::Tokenizer> tokenizer)
    : options_(options), model_(std::move(model)), tokenizer_(std::move(tokenizer)) {}

RewardModelScorer::~RewardModelScorer() = default;

int64_t RewardModelScorer::forwards() const {
  absl::MutexLock lock(&forward_mu_);
  return forwards_;
}

ItemErrorKind RewardModelScorer::KindOf(const absl::Status& item_error) const {
  return KindOfLocalError(item_error);
}

absl::StatusOr<std::vector<absl::StatusOr<ScoreResult>>> RewardModelScorer::ScoreBatch(
    const std::vector<RewardItem>& items, absl::Time deadline) {
  std::vector<absl::StatusOr<ScoreResult>> results(items.size(), absl::UnknownError("not scored"));
  const model::ModelConfig& config = model_->config();
  // Token ids of every item that can be scored; the others get their error now.
  std::vector<std::vector<int32_t>> ids(items.size());
  std::vector<size_t> todo;
  tokenizer::EncodeOptions encode;
  encode.add_special_tokens = false;
  for (size_t k = 0; k < items.size(); ++k) {
    absl::StatusOr<std::vector<int32_t>> encoded =
        tokenizer_->Encode(items[k].prompt + items[k].response, encode);
    if (!encoded.ok()) {
      results[k] =
          absl::InvalidArgumentError(absl::StrCat("tokenizing: ", encoded.status().message()));
    } else if (encoded->empty()) {
      results[k] = absl::InvalidArgumentError("empty prompt and response: nothing to score");
    } else if (static_cast<int64_t>(encoded->size()) > config.max_position_embeddings) {
      results[k] = absl::InvalidArgumentError(absl::StrCat(
          encoded->size(), " tokens exceed the reward model's max_position_embeddings ",
          config.max_position_embeddings));
    } else {
      ids[k] = *std::move(encoded);
      todo.push_back(k);
    }
  }
  const size_t chunk = options_.micro_batch_size > 0
                           ? static_cast<size_t>(options_.micro_batch_size)
                           : std::max<size_t>(todo.size(), 1);
  const int64_t pad = config.pad_token_id.value_or(0);
  absl::MutexLock lock(&forward_mu_);
  torch::NoGradGuard no_grad;
  for (size_t begin = 0; begin < todo.size(); begin += chunk) {
    const size_t end = std::min(todo.size(), begin + chunk);
    if (absl::Now() >= deadline) {
      for (size_t j = begin; j < todo.size(); ++j) {
        results[todo[j]] = absl::DeadlineExceededError(
            "timeout: the reward model had not reached this sample by the request deadline");
      }
      break;
    }
    int64_t longest = 0;
    for (size_t j = begin; j < end; ++j) {
      longest = std::max<int64_t>(longest, static_cast<int64_t>(ids[todo[j]].size()));
    }
    const int64_t rows = static_cast<int64_t>(end - begin);
    torch::Tensor input = torch::full({rows, longest}, pad, torch::kLong);
    torch::Tensor mask = torch::zeros({rows, longest}, torch::kLong);
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<int32_t>& seq = ids[todo[begin + r]];
      const int64_t n = static_cast<int64_t>(seq.size());
      input[r].narrow(0, 0, n).copy_(torch::tensor(std::vector<int64_t>(seq.begin(), seq.end())));
      mask[r].narrow(0, 0, n).fill_(1);
    }
    const torch::Tensor positions =
        torch::arange(longest, torch::kLong).unsqueeze(0).expand({rows, longest});
    ++forwards_;
    try {
      const torch::Tensor scores = model::SequenceScores(model_->Forward(input, mask, positions),
                                                         input, mask, config.pad_token_id)
                                       .to(torch::kFloat64)
                                       .contiguous();
      for (int64_t r = 0; r < rows; ++r) {
        ScoreResult result;
        result.score = scores[r][0].item<double>();
        results[todo[begin + r]] = std::move(result);
      }
    } catch (const c10::Error& e) {
      for (size_t j = begin; j < end; ++j) {
        results[todo[j]] = absl::InternalError(
            absl::StrCat("the reward model's forward failed: ", e.what_without_backtrace()));
      }
    }
  }
  return results;
}

}  // namespace rlmesh::reward
