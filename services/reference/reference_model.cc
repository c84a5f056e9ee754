#include "services/reference/reference_model.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/model/pretrained.h"
#include "common/status/status_macros.h"
#include "common/transport/absl_status.h"
#include "common/transport/transport_factory.h"
#include "services/rollout/tensor_codec.h"
#include "services/trainer/micro_batches.h"
#include "services/trainer/proto_batch.h"

namespace rlmesh::reference {

absl::StatusOr<ReferenceModel::Frozen> ReferenceModel::LoadFrozen(const ReferenceOptions& options,
                                                                  const std::string& path) {
  auto model_options = model::CausalLmOptionsFromConfig(options.dtype, options.device);
  if (!model_options.ok()) return model_options.status();
  auto model = model::LoadPretrained(path, *model_options);
  if (!model.ok()) return model.status();
  return Freeze(options, *std::move(model));
}

absl::StatusOr<ReferenceModel::Frozen> ReferenceModel::Freeze(
    const ReferenceOptions& options, std::shared_ptr<model::CausalLmImpl> model) {
  model->eval();
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  Frozen frozen{std::move(model), nullptr};
  if (options.param_offload) {
    std::vector<std::vector<torch::Tensor>> units;
    for (int u = 0; u < frozen.model->NumUnits(); ++u) {
      units.push_back(frozen.model->UnitParameters(u));
    }
    trainer::FsdpOptions offload;
    offload.param_offload = true;
    offload.trainable = false;
    ASSIGN_OR_RETURN(frozen.offloaded, trainer::ShardedParameters::Create(units, nullptr, offload));
    frozen.model->SetSharding(frozen.offloaded.get());
  }
  return frozen;
}

ReferenceOptions ReferenceOptionsFrom(const config::ReferenceSettings& settings) {
  ReferenceOptions options;
  options.model_path = settings.model_path;
  options.dtype = settings.dtype;
  options.device = settings.device;
  options.micro_batch_size = settings.micro_batch_size;
  options.max_token_len = settings.max_token_len;
  options.max_batch_sequences = settings.max_batch_sequences;
  options.param_offload = settings.param_offload;
  options.remove_padding = settings.remove_padding;
  return options;
}

absl::StatusOr<std::unique_ptr<ReferenceModel>> ReferenceModel::Create(
    const ReferenceOptions& options) {
  if (options.micro_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu: expected >= 1, got ",
                     options.micro_batch_size));
  }
  ASSIGN_OR_RETURN(Frozen frozen, LoadFrozen(options, options.model_path));
  return std::unique_ptr<ReferenceModel>(new ReferenceModel(options, std::move(frozen)));
}

ReferenceModel::ReferenceModel(const ReferenceOptions& options, Frozen frozen)
    : options_(options), model_(std::move(frozen.model)), offloaded_(std::move(frozen.offloaded)) {
  version_.set_version(0);
  version_.set_source(options_.model_path);
}

absl::StatusOr<v1::WeightVersion> ReferenceModel::LoadWeights(const std::string& path,
                                                              const v1::WeightVersion& version) {
  if (path.empty()) return absl::InvalidArgumentError("path: must not be empty");
  ASSIGN_OR_RETURN(Frozen loaded, LoadFrozen(options_, path));
  absl::MutexLock lock(&mu_);
  const model::ModelConfig& now = model_->config();
  const model::ModelConfig& next = loaded.model->config();
  if (next.architecture != now.architecture || next.hidden_size != now.hidden_size ||
      next.num_hidden_layers != now.num_hidden_layers || next.vocab_size != now.vocab_size ||
      next.intermediate_size != now.intermediate_size ||
      next.num_attention_heads != now.num_attention_heads ||
      next.num_key_value_heads != now.num_key_value_heads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "path: ", path, " holds a ", next.architecture, " with hidden ", next.hidden_size, ", ",
        next.num_hidden_layers, " layers, vocab ", next.vocab_size, "; the reference is a ",
        now.architecture, " with hidden ", now.hidden_size, ", ", now.num_hidden_layers,
        " layers, vocab ", now.vocab_size));
  }
  model_ = std::move(loaded.model);
  offloaded_ = std::move(loaded.offloaded);
  version_ = version;
  if (version_.source().empty()) version_.set_source(path);
  return version_;
}

v1::WeightVersion ReferenceModel::version() {
  absl::MutexLock lock(&mu_);
  return version_;
}

absl::Status ReferenceModel::Receive(const v1::UpdateWeightsRequest& request, Incoming& incoming) {
  torch::NoGradGuard no_grad;
  for (int i = 0; i < request.tensors_size(); ++i) {
    const v1::Tensor& proto = request.tensors(i);
    auto parameter = incoming.parameters.find(proto.name());
    if (parameter == incoming.parameters.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors[", i, "] (", proto.name(), "): not a parameter of this model"));
    }
    ASSIGN_OR_RETURN(torch::Tensor tensor, rollout::DecodeTensor(proto));
    if (tensor.sizes() != parameter->second.sizes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors[", i, "] (", proto.name(), ").shape: expected ",
                       c10::str(parameter->second.sizes()), ", got ", c10::str(tensor.sizes())));
    }
    try {
      parameter->second.copy_(tensor);
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("tensors[", i, "] (", proto.name(),
                                              "): copy failed: ", e.what_without_backtrace()));
    }
    incoming.received.insert(proto.name());
    incoming.bytes += static_cast<int64_t>(proto.data().size());
  }
  return absl::OkStatus();
}

absl::Status ReferenceModel::Pull(const v1::UpdateWeightsRequest& request, Incoming& incoming) {
  const uint64_t wanted = request.version().version();
  if (request.endpoint().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("endpoint: transport \"", request.transport(),
                     "\" needs the trainer's data-plane endpoint, got none"));
  }
  const double timeout = request.timeout_seconds() > 0 ? request.timeout_seconds() : 300;
  transport::ReceiverOptions options;
  options.endpoint = request.endpoint();
  auto name = request.transport_options().find("receiver_name");
  options.name = name != request.transport_options().end() ? name->second : "reference";
  options.transfer_timeout = transport::Duration(timeout);
  const bool on_device = request.transport() == "nccl";
  const torch::Device device = on_device ? incoming.model->options().device : torch::kCPU;
  if (device.is_cuda()) options.device = device.has_index() ? device.index() : 0;
  // One subscription for this version only: dropped after it (the trainer then sees the
  // connection closed and stops sending to it).
  auto receiver = transport::CreateReceiver(request.transport(), options);
  if (!receiver.ok()) {
    return absl::Status(transport::ToAbsl(receiver.status()).code(),
                        absl::StrCat("transport: receiving from ", request.endpoint(), " over ",
                                     request.transport(), ": ", receiver.status().message()));
  }
  // Tensors go straight into the new model's parameters when their dtype and memory match;
  // otherwise through a staging tensor, converted once the version is complete.
  std::map<std::string, torch::Tensor> staged;
  auto destination = [&](const transport::TensorMeta& meta) -> transport::StatusOr<void*> {
    auto parameter = incoming.parameters.find(meta.name);
    if (parameter == incoming.parameters.end()) {
      return transport::InvalidArgumentError("tensor \"" + meta.name +
                                             "\": not a parameter of this model");
    }
    const torch::Tensor& p = parameter->second;
    if (p.sizes().vec() != meta.shape) {
      return transport::InvalidArgumentError("tensor \"" + meta.name + "\": expected shape " +
                                             c10::str(p.sizes()) + ", got " +
                                             c10::str(c10::IntArrayRef(meta.shape)));
    }
    auto dtype = rollout::FromTransportDType(meta.dtype);
    if (!dtype.ok()) return transport::InvalidArgumentError(std::string(dtype.status().message()));
    incoming.received.insert(meta.name);
    if (*dtype == p.scalar_type() && p.device() == device && p.is_contiguous()) {
      staged.erase(meta.name);
      return p.data_ptr();
    }
    torch::Tensor& t = staged[meta.name];
    t = torch::empty(meta.shape, torch::TensorOptions().dtype(*dtype).device(device));
    return t.data_ptr();
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout);
  while (true) {
    // A receiver that joins between two versions is first caught up with the sender's current
    // one, which may be older than the one asked for: it is received and overwritten.
    incoming.received.clear();
    const double left = absl::ToDoubleSeconds(deadline - absl::Now());
    if (left <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("weight version ", wanted,
                                                      " did not arrive from ", request.endpoint(),
                                                      " within ", timeout, " s"));
    }
    auto got = (*receiver)->ReceiveNext(destination, transport::Duration(left));
    if (!got.ok()) {
      return absl::Status(transport::ToAbsl(got.status()).code(),
                          absl::StrCat("weight version ", wanted, " from ", request.endpoint(),
                                       ": ", got.status().message()));
    }
    if (got->version > wanted) {
      return absl::FailedPreconditionError(absl::StrCat(
          "weight version ", wanted, " was asked for but the trainer sent ", got->version));
    }
    if (got->version < wanted) continue;
    incoming.bytes = static_cast<int64_t>(got->bytes);
    break;
  }
  torch::NoGradGuard no_grad;
  try {
    for (const auto& [name, tensor] : staged) incoming.parameters.at(name).copy_(tensor);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("copying the received weights: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::UpdateWeightsResponse> ReferenceModel::UpdateWeights(
    const v1::UpdateWeightsRequest& request) {
  const absl::Time start = absl::Now();
  const bool pulled = !request.transport().empty() && request.transport() != "inline";
  absl::MutexLock update(&update_mu_);
  const uint64_t v = request.version().version();
  auto begun = [&]() -> absl::Status {
    if (!incoming_ || incoming_->version.version() != v) {
      return absl::FailedPreconditionError(
          absl::StrCat("version: no update of version ", v, " was begun"));
    }
    return absl::OkStatus();
  };
  switch (request.phase()) {
    case v1::WEIGHT_UPDATE_PHASE_BEGIN: {
      incoming_.reset();
      model::ModelConfig config;
      model::CausalLmOptions model_options;
      {
        absl::MutexLock lock(&mu_);
        config = model_->config();
        model_options = model_->options();
      }
      ASSIGN_OR_RETURN(auto fresh, model::CausalLmImpl::CreateUninitialized(config, model_options));
      Incoming incoming;
      incoming.version = request.version();
      for (const auto& item : fresh->named_parameters())
        incoming.parameters.emplace(item.key(), item.value());
      incoming.model = std::move(fresh);
      incoming.pulled = pulled;
      RETURN_IF_ERROR(pulled ? Pull(request, incoming) : Receive(request, incoming));
      incoming_ = std::move(incoming);
      break;
    }
    case v1::WEIGHT_UPDATE_PHASE_DATA: {
      RETURN_IF_ERROR(begun());
      if (incoming_->pulled) {
        return absl::FailedPreconditionError(
            absl::StrCat("phase: version ", v, " came over the data plane (",
                         request.transport().empty() ? "see BEGIN" : request.transport(),
                         "); DATA calls carry inline tensors"));
      }
      if (absl::Status status = Receive(request, *incoming_); !status.ok()) {
        incoming_.reset();
        return status;
      }
      break;
    }
    case v1::WEIGHT_UPDATE_PHASE_COMMIT: {
      RETURN_IF_ERROR(begun());
      if (incoming_->received.size() != incoming_->parameters.size()) {
        std::string missing;
        for (const auto& [name, _] : incoming_->parameters) {
          if (incoming_->received.count(name) == 0) {
            missing = name;
            break;
          }
        }
        return absl::FailedPreconditionError(
            absl::StrCat("tensors: received ", incoming_->received.size(), " of the model's ",
                         incoming_->parameters.size(), " parameters for version ", v, " (", missing,
                         " missing)"));
      }
      ASSIGN_OR_RETURN(Frozen frozen, Freeze(options_, std::move(incoming_->model)));
      const v1::WeightVersion version = incoming_->version;
      incoming_.reset();
      absl::MutexLock lock(&mu_);
      model_ = std::move(frozen.model);
      offloaded_ = std::move(frozen.offloaded);
      version_ = version;
      break;
    }
    case v1::WEIGHT_UPDATE_PHASE_ABORT:
      incoming_.reset();
      break;
    default:
      return absl::InvalidArgumentError("phase: expected BEGIN, DATA, COMMIT or ABORT");
  }
  v1::UpdateWeightsResponse response;
  *response.mutable_current_version() = version();
  if (incoming_) {
    *response.mutable_staged_version() = incoming_->version;
    response.set_received_tensors(static_cast<int32_t>(incoming_->received.size()));
    response.set_received_bytes(incoming_->bytes);
  }
  response.set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  return response;
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
  trainer::MicroBatching how;
  how.samples = options_.micro_batch_size;
  how.by_tokens = options_.max_token_len > 0;
  how.max_tokens = options_.max_token_len;
  std::vector<int64_t> tokens(static_cast<size_t>(b_total));
  for (int64_t b = 0; b < b_total; ++b)
    tokens[b] = request.sequences(static_cast<int>(b)).token_ids_size();
  auto plan = trainer::PlanMicroBatches(tokens, how);
  if (!plan.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequences: actor_rollout_ref.ref.log_prob_max_token_len_per_gpu: ",
                     plan.status().message()));
  }
  absl::Duration compute;
  std::vector<torch::Tensor> logps(static_cast<size_t>(b_total)),
      entropies(static_cast<size_t>(b_total));
  std::vector<int64_t> row_in_micro(static_cast<size_t>(b_total));
  try {
    torch::NoGradGuard no_grad;
    const auto device = model_->options().device;
    for (const std::vector<int64_t>& rows : *plan) {
      const absl::Time compute_start = absl::Now();
      const auto index = torch::tensor(rows, torch::kInt64);
      trainer::ActorBatch micro;
      micro.input_ids = batch->input_ids.index_select(0, index).to(device);
      micro.attention_mask = batch->attention_mask.index_select(0, index).to(device);
      micro.position_ids = batch->position_ids.index_select(0, index).to(device);
      auto scores = trainer::ScoreTokens(
          micro, temperature, options_.remove_padding,
          request.calculate_entropy() ? trainer::EntropyNeed::kValue : trainer::EntropyNeed::kNone,
          [this](const torch::Tensor& ids, const torch::Tensor& second, const torch::Tensor& third,
                 bool packed) ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<torch::Tensor> {
            return packed ? model_->ForwardPacked(ids, second, third)
                          : model_->Forward(ids, second, third);
          });
      if (!scores.ok()) return scores.status();
      auto logp = scores->log_probs.to(torch::kCPU);
      torch::Tensor entropy;
      if (request.calculate_entropy()) entropy = scores->entropy.to(torch::kCPU);
      compute += absl::Now() - compute_start;
      for (size_t k = 0; k < rows.size(); ++k) {
        logps[rows[k]] = logp;
        entropies[rows[k]] = entropy;
        row_in_micro[rows[k]] = static_cast<int64_t>(k);
      }
    }
    for (int64_t b = 0; b < b_total; ++b) {
      const auto& seq = request.sequences(static_cast<int>(b));
      auto* result = response.add_results();
      result->set_id(seq.id());
      for (float v : trainer::ResponseValues(logps[b], row_in_micro[b], seq))
        result->add_logprobs(v);
      if (entropies[b].defined()) {
        for (float v : trainer::ResponseValues(entropies[b], row_in_micro[b], seq)) {
          result->add_entropies(v);
        }
      }
    }
    response.set_micro_batches(static_cast<int32_t>(plan->size()));
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("reference forward failed: ", e.what_without_backtrace()));
  }
  response.set_compute_seconds(absl::ToDoubleSeconds(compute));
  *response.mutable_weight_version() = version_;
  return response;
}

}  // namespace rlmesh::reference
