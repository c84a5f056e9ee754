#include "services/reference/reference_model.h"

#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/dist/group.h"
#include "common/model/pretrained.h"
#include "common/model/safetensors.h"
#include "common/model/safetensors_reader.h"
#include "common/status/status_macros.h"
#include "common/transport/absl_status.h"
#include "common/transport/transport_factory.h"
#include "services/rollout/tensor_codec.h"
#include "services/trainer/micro_batches.h"
#include "services/trainer/proto_batch.h"

namespace rlmesh::reference {

namespace {

// The requests ranks > 0 of a group run, by the op rank 0 posts them under.
constexpr char kComputeLogProbs[] = "ComputeLogProbs";
constexpr char kLoadWeights[] = "LoadWeights";
constexpr char kUpdateWeights[] = "UpdateWeights";
constexpr char kStop[] = "stop";

}  // namespace

absl::StatusOr<ReferenceModel::Frozen> ReferenceModel::LoadFrozen(const ReferenceOptions& options,
                                                                  const std::string& path,
                                                                  dist::Group* group) {
  if (group != nullptr && group->world_size() > 1) return LoadSharded(options, path, group);
  auto model_options = model::CausalLmOptionsFromConfig(options.dtype, options.device);
  if (!model_options.ok()) return model_options.status();
  auto model = model::LoadPretrained(path, *model_options);
  if (!model.ok()) return model.status();
  return Freeze(options, *std::move(model), nullptr);
}

absl::StatusOr<ReferenceModel::Frozen> ReferenceModel::LoadSharded(const ReferenceOptions& options,
                                                                   const std::string& path,
                                                                   dist::Group* group) {
  ASSIGN_OR_RETURN(model::CausalLmOptions model_options,
                   model::CausalLmOptionsFromConfig(options.dtype, options.device));
  ASSIGN_OR_RETURN(
      model::ModelConfig config,
      model::ModelConfig::FromFile((std::filesystem::path(path) / "config.json").string()));
  // Uninitialized storage is released as the shards are cut, before any of it is written.
  ASSIGN_OR_RETURN(auto fresh, model::CausalLmImpl::CreateUninitialized(config, model_options));
  ASSIGN_OR_RETURN(Frozen frozen, Freeze(options, fresh, group));
  RETURN_IF_ERROR(trainer::LoadFolderUnitByUnit(*frozen.offloaded, *fresh, path));
  return frozen;
}

absl::StatusOr<ReferenceModel::Frozen> ReferenceModel::Freeze(
    const ReferenceOptions& options, std::shared_ptr<model::CausalLmImpl> model,
    dist::Group* group) {
  model->eval();
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  Frozen frozen{std::move(model), nullptr};
  const bool sharded = group != nullptr && group->world_size() > 1;
  if (options.param_offload || sharded) {
    std::vector<std::vector<torch::Tensor>> units;
    for (int u = 0; u < frozen.model->NumUnits(); ++u) {
      units.push_back(frozen.model->UnitParameters(u));
    }
    trainer::FsdpOptions fsdp;
    fsdp.param_offload = options.param_offload;
    fsdp.trainable = false;
    ASSIGN_OR_RETURN(frozen.offloaded,
                     trainer::ShardedParameters::Create(units, sharded ? group : nullptr, fsdp));
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
    const ReferenceOptions& options, dist::Group* group) {
  if (options.micro_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu: expected >= 1, got ",
                     options.micro_batch_size));
  }
  ASSIGN_OR_RETURN(Frozen frozen, LoadFrozen(options, options.model_path, group));
  return std::unique_ptr<ReferenceModel>(new ReferenceModel(options, std::move(frozen), group));
}

ReferenceModel::ReferenceModel(const ReferenceOptions& options, Frozen frozen, dist::Group* group)
    : options_(options),
      group_(group),
      model_(std::move(frozen.model)),
      offloaded_(std::move(frozen.offloaded)),
      offers_(options.node_id, "reference") {
  version_.set_version(0);
  version_.set_source(options_.model_path);
}

bool ReferenceModel::grouped() const { return group_ != nullptr && group_->world_size() > 1; }

template <typename Response>
absl::StatusOr<Response> ReferenceModel::OnEveryRank(
    absl::string_view op, const google::protobuf::Message& request,
    const std::function<absl::StatusOr<Response>()>& run) {
  if (!grouped()) return run();
  RETURN_IF_ERROR(group_->Post(op, request.SerializeAsString()));
  absl::StatusOr<Response> here = run();
  RETURN_IF_ERROR(group_->Finish(here.status()));
  return here;
}

absl::Status ReferenceModel::ServeRank() {
  if (!grouped() || group_->rank() == 0) {
    return absl::InternalError("ServeRank: only ranks > 0 of a group serve rank 0's requests");
  }
  while (true) {
    ASSIGN_OR_RETURN(const dist::Command command, group_->Next());
    if (command.op == kStop) return absl::OkStatus();
    absl::Status status;
    if (command.op == kComputeLogProbs) {
      auto request = dist::ParseRequest<v1::ComputeLogProbsRequest>(command);
      status = request.ok() ? ComputeHere(*request).status() : request.status();
    } else if (command.op == kLoadWeights) {
      auto request = dist::ParseRequest<v1::LoadReferenceWeightsRequest>(command);
      status =
          request.ok() ? LoadHere(request->path(), request->version()).status() : request.status();
    } else if (command.op == kUpdateWeights) {
      auto request = dist::ParseRequest<v1::UpdateWeightsRequest>(command);
      status = request.ok() ? UpdateHere(*request).status() : request.status();
    } else {
      status = absl::InternalError(absl::StrCat("unknown command \"", command.op, "\""));
    }
    const absl::Status all = group_->Finish(status);
    if (!group_->broken().ok()) return group_->broken();
    if (!all.ok()) {
      std::fprintf(stderr, "[reference rank %d] %s failed: %s\n", group_->rank(),
                   command.op.c_str(), std::string(all.message()).c_str());
    }
  }
}

void ReferenceModel::StopRanks() {
  if (!grouped() || group_->rank() != 0) return;
  absl::MutexLock lock(&group_mu_);
  // The others exit on it and do not answer; a broken group has no one left to tell.
  (void)group_->Post(kStop, "");
}

int64_t ReferenceModel::held_weight_bytes() {
  absl::MutexLock lock(&mu_);
  if (offloaded_ != nullptr) {
    int64_t bytes = 0;
    for (int u = 0; u < offloaded_->num_units(); ++u) bytes += offloaded_->param_shard(u).nbytes();
    return bytes;
  }
  int64_t bytes = 0;
  for (const auto& p : model_->parameters()) bytes += p.nbytes();
  return bytes;
}

absl::Status ReferenceModel::SameArchitecture(const std::string& path,
                                              const model::ModelConfig& next) {
  const model::ModelConfig& now = model_->config();
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
  return absl::OkStatus();
}

absl::StatusOr<v1::WeightVersion> ReferenceModel::LoadWeights(const std::string& path,
                                                              const v1::WeightVersion& version) {
  if (path.empty()) return absl::InvalidArgumentError("path: must not be empty");
  std::optional<absl::MutexLock> lock;
  if (grouped()) lock.emplace(&group_mu_);
  v1::LoadReferenceWeightsRequest request;
  request.set_path(path);
  *request.mutable_version() = version;
  return OnEveryRank<v1::WeightVersion>(kLoadWeights, request,
                                        [&] { return LoadHere(path, version); });
}

absl::StatusOr<v1::WeightVersion> ReferenceModel::LoadHere(const std::string& path,
                                                           const v1::WeightVersion& version) {
  // The folder's architecture first: nothing is loaded when it is not the current model's.
  absl::StatusOr<Frozen> loaded = [&]() -> absl::StatusOr<Frozen> {
    ASSIGN_OR_RETURN(
        model::ModelConfig next,
        model::ModelConfig::FromFile((std::filesystem::path(path) / "config.json").string()));
    {
      absl::MutexLock lock(&mu_);
      RETURN_IF_ERROR(SameArchitecture(path, next));
    }
    return LoadFrozen(options_, path, group_);
  }();
  if (grouped()) {
    // The ranks swap together or not at all: a rank that could not load (its own disk) keeps
    // every rank on the old weights, and its error is the call's.
    auto failures = torch::tensor({loaded.ok() ? 0.0 : 1.0}, torch::kFloat64);
    RETURN_IF_ERROR(group_->AllReduceSum({failures}, "agreeing on the loaded weights"));
    if (!loaded.ok()) return loaded.status();
    if (failures.item<double>() > 0) return version;  // another rank's error is the call's
  }
  if (!loaded.ok()) return loaded.status();
  absl::MutexLock lock(&mu_);
  model_ = std::move(loaded->model);
  offloaded_ = std::move(loaded->offloaded);
  folder_ = path;
  version_ = version;
  if (version_.source().empty()) version_.set_source(path);
  return version_;
}

v1::WeightVersion ReferenceModel::version() {
  absl::MutexLock lock(&mu_);
  return version_;
}

std::string ReferenceModel::folder() {
  absl::MutexLock lock(&mu_);
  return folder_.empty() ? options_.model_path : folder_;
}

std::string ReferenceModel::committed_path() {
  absl::MutexLock lock(&update_mu_);
  return committed_path_;
}

absl::Status ReferenceModel::Receive(const v1::UpdateWeightsRequest& request, Incoming& incoming) {
  torch::NoGradGuard no_grad;
  for (int i = 0; i < request.tensors_size(); ++i) {
    const v1::Tensor& proto = request.tensors(i);
    // A whole parameter of the new model, or in a group a place in a unit's flat vector.
    auto parameter = incoming.parameters.find(proto.name());
    auto slot = incoming.slots.find(proto.name());
    const bool whole = parameter != incoming.parameters.end();
    if (!whole && slot == incoming.slots.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors[", i, "] (", proto.name(), "): not a parameter of this model"));
    }
    // The parameter's shape and dtype, checked at the first part, before anything is allocated.
    rollout::TensorAssembler::Expected expected =
        whole ? rollout::TensorAssembler::Expected{parameter->second.sizes().vec(),
                                                   parameter->second.scalar_type()}
              : rollout::TensorAssembler::Expected{
                    slot->second.shape,
                    incoming.shards[static_cast<size_t>(slot->second.unit)].scalar_type()};
    ASSIGN_OR_RETURN(std::optional<torch::Tensor> assembled,
                     incoming.parts.Add(proto, std::move(expected)));
    incoming.bytes += static_cast<int64_t>(proto.data().size());
    if (!assembled) continue;  // more parts of it to come
    // Its shape and dtype are the parameter's: the assembler checked them at the first part.
    torch::Tensor tensor = std::move(*assembled);
    try {
      if (whole) {
        parameter->second.copy_(tensor);
      } else {
        // The part of the tensor that falls in this rank's slice of its unit's flat vector.
        torch::Tensor& shard = incoming.shards[static_cast<size_t>(slot->second.unit)];
        const int64_t begin = group_->rank() * shard.numel();
        const int64_t offset = slot->second.offset;
        const int64_t from = std::max(begin, offset);
        const int64_t to = std::min(begin + shard.numel(), offset + tensor.numel());
        if (from < to) {
          shard.narrow(0, from - begin, to - from)
              .copy_(tensor.reshape({-1}).narrow(0, from - offset, to - from));
        }
      }
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("tensors[", i, "] (", proto.name(),
                                              "): copy failed: ", e.what_without_backtrace()));
    }
    incoming.received.insert(proto.name());
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
  // The trainer's backend, or the one it offers receivers on its node when this is one.
  const transport::Offer primary{request.transport(), request.endpoint()};
  transport::Offer offer = offers_.For(request, incoming.model->options().device.is_cuda());
  auto subscribe = [&](const transport::Offer& to, torch::Device* device) {
    transport::ReceiverOptions options;
    options.endpoint = to.endpoint;
    auto name = request.transport_options().find("receiver_name");
    options.name = name != request.transport_options().end() ? name->second : "reference";
    options.transfer_timeout = transport::Duration(timeout);
    *device = transport::MovesDeviceMemory(to.backend) ? incoming.model->options().device
                                                       : torch::Device(torch::kCPU);
    if (device->is_cuda()) options.device = device->has_index() ? device->index() : 0;
    return transport::CreateReceiver(to.backend, options);
  };
  // One subscription for this version only: dropped after it (the trainer then sees the
  // connection closed and stops sending to it). A same-node offer that cannot be subscribed to
  // gives way to the trainer's backend at once; one whose version fails here fails this BEGIN
  // (the trainer sends it inline).
  torch::Device device(torch::kCPU);
  auto receiver = subscribe(offer, &device);
  if (!receiver.ok() && !(offer == primary)) {
    offers_.PassOver(offer, primary, receiver.status().message());
    offer = primary;
    receiver = subscribe(primary, &device);
  }
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
    if (!got.ok() && !(offer == primary)) offers_.PassOver(offer, primary, got.status().message());
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
    incoming.path = got->path;
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
  const bool pulled = !request.transport().empty() && request.transport() != "inline";
  if (grouped() && pulled) {
    return absl::FailedPreconditionError(absl::StrCat(
        "transport: a reference group of ", group_->world_size(),
        " ranks takes its weights inline (each rank keeps its slice of every tensor); got \"",
        request.transport(), "\""));
  }
  std::optional<absl::MutexLock> lock;
  if (grouped()) lock.emplace(&group_mu_);
  return OnEveryRank<v1::UpdateWeightsResponse>(kUpdateWeights, request,
                                                [&] { return UpdateHere(request); });
}

absl::StatusOr<v1::UpdateWeightsResponse> ReferenceModel::UpdateHere(
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
      Incoming incoming;
      incoming.version = request.version();
      incoming.pulled = pulled;
      if (grouped()) {
        // New shards beside the current ones; the parameters' places from the current layout.
        absl::MutexLock lock(&mu_);
        std::map<const c10::TensorImpl*, std::string> names;
        for (const auto& item : model_->named_parameters()) {
          names[item.value().unsafeGetTensorImpl()] = item.key();
        }
        for (int u = 0; u < offloaded_->num_units(); ++u) {
          incoming.shards.push_back(torch::zeros_like(offloaded_->param_shard(u)));
          const trainer::FlatUnit& layout = offloaded_->layout(u);
          for (size_t k = 0; k < layout.params.size(); ++k) {
            const torch::Tensor& p = layout.params[k];
            incoming.slots[names.at(p.unsafeGetTensorImpl())] = {u, layout.param_offsets[k],
                                                                 p.sizes().vec()};
          }
        }
      } else {
        ASSIGN_OR_RETURN(auto fresh,
                         model::CausalLmImpl::CreateUninitialized(config, model_options));
        for (const auto& item : fresh->named_parameters())
          incoming.parameters.emplace(item.key(), item.value());
        incoming.model = std::move(fresh);
      }
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
      std::vector<std::string> expected;
      for (const auto& [name, _] : incoming_->parameters) expected.push_back(name);
      for (const auto& [name, _] : incoming_->slots) expected.push_back(name);
      if (incoming_->received.size() != expected.size()) {
        std::string missing;
        for (const auto& name : expected) {
          if (incoming_->received.count(name) == 0) {
            missing = name;
            break;
          }
        }
        return absl::FailedPreconditionError(absl::StrCat(
            "tensors: received ", incoming_->received.size(), " of the model's ", expected.size(),
            " parameters for version ", v, " (", missing, " missing)"));
      }
      const v1::WeightVersion version = incoming_->version;
      const std::string path = incoming_->path;
      if (grouped()) {
        // Requests run one at a time in a group, so no forward reads the shards meanwhile.
        absl::MutexLock lock(&mu_);
        torch::NoGradGuard no_grad;
        for (int u = 0; u < offloaded_->num_units(); ++u) {
          const_cast<torch::Tensor&>(offloaded_->param_shard(u))
              .copy_(incoming_->shards[static_cast<size_t>(u)]);
        }
        incoming_.reset();
        version_ = version;
        committed_path_ = path;
        break;
      }
      ASSIGN_OR_RETURN(Frozen frozen, Freeze(options_, std::move(incoming_->model), nullptr));
      incoming_.reset();
      absl::MutexLock lock(&mu_);
      model_ = std::move(frozen.model);
      offloaded_ = std::move(frozen.offloaded);
      version_ = version;
      committed_path_ = path;
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
  std::optional<absl::MutexLock> lock;
  if (grouped()) lock.emplace(&group_mu_);
  return OnEveryRank<v1::ComputeLogProbsResponse>(kComputeLogProbs, request,
                                                  [&] { return ComputeHere(request); });
}

absl::StatusOr<v1::ComputeLogProbsResponse> ReferenceModel::ComputeHere(
    const v1::ComputeLogProbsRequest& request) {
  absl::MutexLock lock(&mu_);
  // Logits divided by a temperature below 1e-30 overflow float32 and the log-probs become NaN.
  if (!std::isfinite(request.temperature()) || request.temperature() < 0 ||
      (request.temperature() > 0 && request.temperature() < 1e-30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "temperature: expected 0 (= 1) or a finite number >= 1e-30, got ", request.temperature()));
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
  // Every rank plans every rank's micro-batches (the split is deterministic), so a row over
  // the budget fails all of them before any collective, and each knows the most passes.
  const int world = grouped() ? group_->world_size() : 1;
  const int rank = grouped() ? group_->rank() : 0;
  const std::vector<std::vector<int64_t>> split = trainer::SplitAcrossRanks(tokens, world);
  std::vector<std::vector<int64_t>> plan;
  size_t passes = 0, total_passes = 0;
  for (int r = 0; r < world; ++r) {
    std::vector<int64_t> rank_tokens;
    for (int64_t row : split[r]) rank_tokens.push_back(tokens[row]);
    std::vector<std::vector<int64_t>> rank_plan;
    if (!rank_tokens.empty()) {
      auto planned = trainer::PlanMicroBatches(rank_tokens, how);
      if (!planned.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequences: actor_rollout_ref.ref.log_prob_max_token_len_per_gpu: ",
                         planned.status().message()));
      }
      rank_plan = *std::move(planned);
      for (auto& rows : rank_plan) {
        for (int64_t& row : rows) row = split[r][row];
      }
    }
    passes = std::max(passes, rank_plan.size());
    total_passes += rank_plan.size();
    if (r == rank) plan = std::move(rank_plan);
  }
  absl::Duration compute;
  std::vector<torch::Tensor> logps(static_cast<size_t>(b_total)),
      entropies(static_cast<size_t>(b_total));
  std::vector<int64_t> row_in_micro(static_cast<size_t>(b_total));
  try {
    torch::NoGradGuard no_grad;
    const auto device = model_->options().device;
    auto score = [&](const std::vector<int64_t>& rows) {
      const auto index = torch::tensor(rows, torch::kInt64);
      trainer::ActorBatch micro;
      micro.input_ids = batch->input_ids.index_select(0, index).to(device);
      micro.attention_mask = batch->attention_mask.index_select(0, index).to(device);
      micro.position_ids = batch->position_ids.index_select(0, index).to(device);
      return trainer::ScoreTokens(
          micro, temperature, options_.remove_padding,
          request.calculate_entropy() ? trainer::EntropyNeed::kValue : trainer::EntropyNeed::kNone,
          [this](const torch::Tensor& ids, const torch::Tensor& second, const torch::Tensor& third,
                 bool packed) ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<torch::Tensor> {
            return packed ? model_->ForwardPacked(ids, second, third)
                          : model_->Forward(ids, second, third);
          });
    };
    for (const std::vector<int64_t>& rows : plan) {
      const absl::Time compute_start = absl::Now();
      auto scores = score(rows);
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
    // A rank with fewer passes scores one sequence per missing pass and drops it: every
    // rank's forwards gather the same units in the same order.
    for (size_t i = plan.size(); i < passes; ++i) {
      auto scores = score({0});
      if (!scores.ok()) return scores.status();
    }
    // Each row's response values, at its offset in one flat vector per quantity.
    std::vector<int64_t> offsets(static_cast<size_t>(b_total) + 1, 0);
    for (int64_t b = 0; b < b_total; ++b) {
      const auto& seq = request.sequences(static_cast<int>(b));
      offsets[b + 1] = offsets[b] + (seq.token_ids_size() - seq.prompt_length());
    }
    auto flat_logps = torch::zeros({offsets[b_total]}, torch::kFloat32);
    auto flat_entropies =
        torch::zeros({request.calculate_entropy() ? offsets[b_total] : 0}, torch::kFloat32);
    for (int64_t b = 0; b < b_total; ++b) {
      if (!logps[b].defined()) continue;  // another rank's row
      const auto& seq = request.sequences(static_cast<int>(b));
      auto put = [&](const torch::Tensor& values, torch::Tensor& flat) {
        const std::vector<float> v = trainer::ResponseValues(values, row_in_micro[b], seq);
        std::copy(v.begin(), v.end(), flat.data_ptr<float>() + offsets[b]);
      };
      put(logps[b], flat_logps);
      if (entropies[b].defined()) put(entropies[b], flat_entropies);
    }
    if (grouped()) {
      // Zeros but in this rank's rows, summed across the ranks: every value from its one rank.
      std::vector<torch::Tensor> parts = {flat_logps};
      if (request.calculate_entropy()) parts.push_back(flat_entropies);
      RETURN_IF_ERROR(group_->AllReduceSum(parts, "gathering the reference log-probs"));
    }
    const float* lp = flat_logps.data_ptr<float>();
    const float* en = flat_entropies.data_ptr<float>();
    for (int64_t b = 0; b < b_total; ++b) {
      const auto& seq = request.sequences(static_cast<int>(b));
      auto* result = response.add_results();
      result->set_id(seq.id());
      for (int64_t k = offsets[b]; k < offsets[b + 1]; ++k) {
        result->add_logprobs(lp[k]);
        if (request.calculate_entropy()) result->add_entropies(en[k]);
      }
    }
    response.set_micro_batches(static_cast<int32_t>(total_passes));
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("reference forward failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    // A gather of the group's shards that failed (a rank died or stalled).
    return absl::InternalError(absl::StrCat("reference forward failed: ", e.what()));
  }
  response.set_compute_seconds(absl::ToDoubleSeconds(compute));
  *response.mutable_weight_version() = version_;
  return response;
}

}  // namespace rlmesh::reference
