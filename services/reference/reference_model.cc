#include "services/reference/reference_model.h"

#include "absl/strings/str_cat.h"
#include "common/model/pretrained.h"
#include "services/trainer/proto_batch.h"

namespace rlmesh::reference {

absl::StatusOr<std::unique_ptr<ReferenceModel>> ReferenceModel::Create(
    const ReferenceOptions& options) {
  if (options.micro_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu: expected >= 1, got ",
                     options.micro_batch_size));
  }
  auto model_options = model::CausalLmOptionsFromConfig(options.dtype, options.device);
  if (!model_options.ok()) return model_options.status();
  auto model = model::LoadPretrained(options.model_path, *model_options);
  if (!model.ok()) return model.status();
  (*model)->eval();
  for (auto& p : (*model)->parameters()) p.set_requires_grad(false);
  return std::unique_ptr<ReferenceModel>(new ReferenceModel(options, *std::move(model)));
}

absl::StatusOr<v1::ComputeLogProbsResponse> ReferenceModel::ComputeLogProbs(
    const v1::ComputeLogProbsRequest& request) {
  absl::MutexLock lock(&mu_);
  if (!(request.temperature() >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature: expected >= 0, got ", request.temperature()));
  }
  const double temperature = request.temperature() > 0 ? request.temperature() : 1.0;
  trainer::BatchLimits limits;
  limits.vocab_size = model_->config().vocab_size;
  limits.max_sequences = options_.max_batch_sequences;
  limits.max_length = model_->config().max_position_embeddings;
  auto batch = trainer::BatchFromSequences(request.sequences(), limits);
  if (!batch.ok()) return batch.status();

  v1::ComputeLogProbsResponse response;
  const int64_t b_total = batch->input_ids.size(0);
  try {
    torch::NoGradGuard no_grad;
    const auto device = model_->options().device;
    for (int64_t start = 0; start < b_total; start += options_.micro_batch_size) {
      const int64_t end = std::min(b_total, start + options_.micro_batch_size);
      auto ids = batch->input_ids.slice(0, start, end).to(device);
      auto logits = model_->Forward(ids, batch->attention_mask.slice(0, start, end).to(device),
                                    batch->position_ids.slice(0, start, end).to(device));
      auto logp = trainer::TokenLogProbs(logits, ids, temperature).to(torch::kCPU);
      torch::Tensor entropy;
      if (request.calculate_entropy()) {
        auto e = trainer::TokenEntropy(logits, temperature);
        if (!e.ok()) return e.status();
        entropy = e->to(torch::kCPU);
      }
      for (int64_t b = start; b < end; ++b) {
        const auto& seq = request.sequences(static_cast<int>(b));
        auto* result = response.add_results();
        result->set_id(seq.id());
        for (float v : trainer::ResponseValues(logp, b - start, seq)) result->add_logprobs(v);
        if (entropy.defined()) {
          for (float v : trainer::ResponseValues(entropy, b - start, seq)) result->add_entropies(v);
        }
      }
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("reference forward failed: ", e.what_without_backtrace()));
  }
  response.mutable_weight_version()->set_version(0);
  response.mutable_weight_version()->set_source(options_.model_path);
  return response;
}

}  // namespace rlmesh::reference
