#include "services/coordinator/prompt_source.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/data/prompt_fit.h"
#include "common/data/synthetic_tasks.h"
#include "common/status/status_macros.h"

namespace rlmesh::coordinator {

absl::StatusOr<std::unique_ptr<PromptSource>> PromptSource::Create(
    const config::CoordinatorSettings& settings, const tokenizer::Tokenizer& tokenizer) {
  auto source = std::unique_ptr<PromptSource>(new PromptSource(tokenizer));
  RETURN_IF_ERROR(source->Load(settings));
  return source;
}

absl::Status PromptSource::Load(const config::CoordinatorSettings& settings) {
  // Prompts: the quickstart's synthetic task when one is set (it replaces the data files, as
  // the dry-run warns), else the data files.
  if (settings.synthetic_task == "none" && !settings.train_files.empty()) {
    data::DatasetOptions options;
    options.prompt_key = settings.prompt_key;
    options.reward_fn_key = settings.reward_fn_key;
    ASSIGN_OR_RETURN(train_rows_, data::ReadDataset(settings.train_files, options));
    if (!settings.val_files.empty()) {
      ASSIGN_OR_RETURN(val_rows_, data::ReadDataset(settings.val_files, options));
    }
  } else if (settings.synthetic_task != "none") {
    data::SyntheticTaskOptions options;
    options.task = settings.synthetic_task;
    options.train_size = settings.synthetic_train;
    options.val_size = settings.synthetic_val;
    options.seed = settings.seed;
    options.min_digits = static_cast<int>(settings.synthetic_min_digits);
    options.max_digits = static_cast<int>(settings.synthetic_max_digits);
    ASSIGN_OR_RETURN(auto dataset, data::MakeSyntheticDataset(options));
    train_rows_ = std::move(dataset.train);
    val_rows_ = std::move(dataset.val);
  } else {
    return absl::InvalidArgumentError(
        "data.train_files: expected at least one file (or rlmesh.quickstart.task)");
  }

  ASSIGN_OR_RETURN(const data::Truncation truncation, data::ParseTruncation(settings.truncation));
  // Prompts with the chat template applied; with data.filter_overlong_prompts those over
  // max_prompt_length tokens leave `rows` (counted in `dropped`), else data.truncation
  // decides.
  auto encode_all = [&](std::vector<data::DataRow>& rows, std::vector<std::vector<int32_t>>& out,
                        int64_t* dropped) -> absl::Status {
    out.reserve(rows.size());
    tokenizer::ChatTemplateOptions options;
    options.add_generation_prompt = true;
    std::vector<data::DataRow> kept;
    for (auto& row : rows) {
      std::vector<tokenizer::ChatMessage> messages;
      for (const auto& m : row.prompt) {
        tokenizer::ChatMessage message;
        message.role = m.role;
        message.content = m.content;
        messages.push_back(std::move(message));
      }
      auto ids = tokenizer_.EncodeChat(
          messages, options, settings.chat_template == "auto" ? "" : settings.chat_template);
      if (!ids.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(row.source, ": cannot apply the chat template: ", ids.status().message()));
      }
      if (ids->empty())
        return absl::InvalidArgumentError(absl::StrCat(row.source, ": empty prompt"));
      if (settings.filter_overlong_prompts &&
          static_cast<int64_t>(ids->size()) > settings.max_prompt_length) {
        ++*dropped;
        continue;
      }
      auto fitted = data::FitPrompt(*ids, settings.max_prompt_length, truncation);
      if (!fitted.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(row.source, ": ", fitted.status().message()));
      }
      out.push_back(*std::move(fitted));
      kept.push_back(std::move(row));
    }
    rows = std::move(kept);
    return absl::OkStatus();
  };
  int64_t dropped_train = 0, dropped_val = 0;
  const size_t train_rows = train_rows_.size(), val_rows = val_rows_.size();
  RETURN_IF_ERROR(encode_all(train_rows_, train_prompt_ids_, &dropped_train));
  RETURN_IF_ERROR(encode_all(val_rows_, val_prompt_ids_, &dropped_val));
  if (settings.filter_overlong_prompts) {
    const std::string line = absl::StrCat(
        "data.filter_overlong_prompts: dropped ", dropped_train, " of ", train_rows,
        " training and ", dropped_val, " of ", val_rows,
        " validation prompts longer than data.max_prompt_length = ", settings.max_prompt_length,
        " tokens");
    std::fprintf(stderr, "coordinator: %s\n", line.c_str());
  }
  if (train_rows_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.filter_overlong_prompts: every one of the ", train_rows,
        " training prompts is longer than data.max_prompt_length = ", settings.max_prompt_length));
  }

  data::SamplerOptions sampler_options;
  // Without dynamic sampling gen_batch_size is train_batch_size.
  const int64_t batch =
      settings.gen_batch_size > 0 ? settings.gen_batch_size : settings.train_batch_size;
  sampler_options.batch_size = batch;
  sampler_options.shuffle = settings.shuffle;
  sampler_options.seed = settings.data_seed;
  auto sampler =
      data::EpochSampler::Create(static_cast<int64_t>(train_rows_.size()), sampler_options);
  if (!sampler.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        batch == settings.train_batch_size ? "data.train_batch_size: " : "data.gen_batch_size: ",
        sampler.status().message()));
  }
  sampler_ = std::move(sampler).value();
  total_steps_ = settings.total_training_steps.has_value() && *settings.total_training_steps > 0
                     ? *settings.total_training_steps
                     : settings.total_epochs * sampler_->steps_per_epoch();
  return absl::OkStatus();
}

absl::StatusOr<DrawnStep> PromptSource::Draw(int64_t step, int64_t round) {
  DrawnStep drawn;
  const std::vector<int64_t> indices = sampler_->Next();
  drawn.position = sampler_->position();
  drawn.epoch = drawn.position.epoch;
  ASSIGN_OR_RETURN(drawn.prompts, MakePrompts(train_rows_, train_prompt_ids_, indices,
                                              round == 0 ? absl::StrCat("s", step)
                                                         : absl::StrCat("s", step, "r", round)));
  return drawn;
}

absl::StatusOr<std::vector<StepPrompt>> PromptSource::ValidationPrompts() const {
  std::vector<int64_t> indices(val_rows_.size());
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<int64_t>(i);
  return MakePrompts(val_rows_, val_prompt_ids_, indices, "val");
}

absl::StatusOr<std::vector<StepPrompt>> PromptSource::MakePrompts(
    const std::vector<data::DataRow>& rows, const std::vector<std::vector<int32_t>>& ids,
    const std::vector<int64_t>& indices, const std::string& uid_prefix) const {
  std::vector<StepPrompt> prompts;
  prompts.reserve(indices.size());
  for (int64_t index : indices) {
    const auto& row = rows[index];
    StepPrompt p;
    p.uid = absl::StrCat(uid_prefix, "/", index);
    p.token_ids = ids[index];
    tokenizer::DecodeOptions options;
    options.skip_special_tokens = true;
    ASSIGN_OR_RETURN(p.text, tokenizer_.Decode(p.token_ids, options));
    p.data_source = row.data_source;
    p.ground_truth = row.ground_truth;
    p.extra_info_json = row.extra_info_json;
    prompts.push_back(std::move(p));
  }
  return prompts;
}

}  // namespace rlmesh::coordinator
