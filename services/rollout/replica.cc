#include "services/rollout/replica.h"

#include <cmath>
#include <cstdio>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/model/model_info.h"
#include "common/model/pretrained.h"
#include "common/status/status_macros.h"
#include "common/transport/transport.h"
#include "services/rollout/tensor_codec.h"

namespace rlmesh::rollout {

namespace {

// Seed of one prompt's samples: the request seed mixed with the prompt id. The engine draws
// sample k from (this seed, k) (GenerationRequest::first_index), so a prompt's sample k is the
// same whichever replica serves it, in whatever batch, and in whichever call carries it.
uint64_t PromptSeed(uint64_t seed, const std::string& prompt_id) {
  uint64_t z = seed ^ (std::hash<std::string>{}(prompt_id)*0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

v1::FinishReason ToProto(generation::FinishReason reason) {
  switch (reason) {
    case generation::FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case generation::FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case generation::FinishReason::kAbort:
      return v1::FINISH_REASON_ABORT;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

ReplicaOptions ReplicaOptionsFrom(const config::RolloutSettings& settings,
                                  double memory_capacity_bytes) {
  ReplicaOptions options;
  options.model_path = settings.model_path;
  options.dtype = settings.dtype;
  options.device = settings.device;
  options.max_num_seqs = settings.max_num_seqs;
  options.max_model_len = settings.max_model_len;
  options.default_max_new_tokens = settings.default_max_new_tokens;
  options.max_num_batched_tokens = settings.max_num_batched_tokens;
  options.enable_chunked_prefill = settings.enable_chunked_prefill;
  options.free_cache_engine = settings.free_cache_engine;
  options.memory_budget_bytes = settings.gpu_memory_utilization * memory_capacity_bytes;
  options.recompute_kv_on_update = settings.recompute_kv_on_update;
  return options;
}

absl::StatusOr<std::unique_ptr<Replica>> Replica::Create(const ReplicaOptions& options) {
  auto model_options = model::CausalLmOptionsFromConfig(options.dtype, options.device);
  if (!model_options.ok()) return model_options.status();
  auto model = model::LoadPretrained(options.model_path, *model_options);
  if (!model.ok()) return model.status();
  (*model)->eval();
  generation::GenerationEngineOptions engine_options;
  engine_options.max_num_seqs = options.max_num_seqs;
  engine_options.max_model_len = options.max_model_len;
  engine_options.max_num_batched_tokens = options.max_num_batched_tokens;
  engine_options.enable_chunked_prefill = options.enable_chunked_prefill;
  engine_options.release_cache_when_idle = options.free_cache_engine;
  engine_options.recompute_kv_on_update = options.recompute_kv_on_update;
  if (options.memory_budget_bytes > 0) {
    // What is left of the budget after the weights holds the KV cache, as vLLM sizes its
    // cache from gpu_memory_utilization: 2 (keys, values) x layers x kv heads x head dim x
    // tokens per slot x element size per slot.
    const model::ModelConfig& m = (*model)->config();
    int64_t weight_bytes = 0;
    for (const auto& p : (*model)->parameters()) weight_bytes += p.numel() * p.element_size();
    const int64_t element = (*model)->parameters().front().element_size();
    const int64_t slot_len =
        options.max_model_len > 0 ? options.max_model_len : m.max_position_embeddings;
    const double slot_bytes = 2.0 * m.num_hidden_layers * m.num_key_value_heads * m.head_dim *
                              static_cast<double>(slot_len) * static_cast<double>(element);
    const double left = options.memory_budget_bytes - static_cast<double>(weight_bytes);
    const int64_t fit = left > 0 ? static_cast<int64_t>(left / slot_bytes) : 0;
    if (fit < 1) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "actor_rollout_ref.rollout.gpu_memory_utilization: its share of the memory, ",
          static_cast<int64_t>(options.memory_budget_bytes),
          " bytes, leaves no room after the "
          "weights (",
          weight_bytes, " bytes) for one KV-cache slot of ", slot_len, " tokens (",
          static_cast<int64_t>(slot_bytes), " bytes); raise it or lower max_model_len"));
    }
    engine_options.max_num_seqs = std::min(options.max_num_seqs, fit);
  }
  auto engine = generation::GenerationEngine::Create(*model, engine_options);
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<Replica>(new Replica(options, *std::move(model), *std::move(engine)));
}

Replica::Replica(const ReplicaOptions& options, std::shared_ptr<model::CausalLmImpl> model,
                 std::unique_ptr<generation::GenerationEngine> engine)
    : options_(options),
      vocab_size_(model->config().vocab_size),
      eos_ids_(model->config().eos_token_ids),
      engine_(std::move(engine)),
      offers_(options.node_id, "rollout") {
  for (const auto& [name, shape] : model->config().TensorShapes()) param_shapes_[name] = shape;
  for (const torch::Tensor& p : model->parameters()) {
    param_dtype_ = p.scalar_type();  // one dtype for the whole model (rlmesh.dtype)
    break;
  }
  version_.set_version(0);
  version_.set_source(options.model_path);
  serve_thread_ = std::thread([this] { engine_->Serve(); });
}

Replica::~Replica() { Shutdown(); }

absl::StatusOr<v1::GetModelInfoResponse> Replica::ModelInfo() const {
  absl::StatusOr<v1::GetModelInfoResponse> info;
  {
    absl::MutexLock lock(&info_mu_);
    if (!info_) info_ = model::ReadModelInfo(options_.model_path);
    info = *info_;
  }
  if (!info.ok()) return info.status();
  info->set_dtype(options_.dtype);
  *info->mutable_weight_version() = weight_version();
  return info;
}

void Replica::Shutdown() {
  engine_->Shutdown();
  if (serve_thread_.joinable()) serve_thread_.join();
}

absl::StatusOr<int64_t> Replica::Submit(const v1::GenerateRequest& request, SampleFn on_sample) {
  const auto& p = request.sampling_params();
  if (request.prompts_size() == 0)
    return absl::InvalidArgumentError("prompts: expected at least one");
  if (p.n() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling_params.n: expected >= 1, got ", p.n()));
  }
  if (request.request_id().empty())
    return absl::InvalidArgumentError("request_id: must not be empty");
  {
    absl::MutexLock lock(&mu_);
    if (request.min_weight_version() > version_.version()) {
      return absl::FailedPreconditionError(
          absl::StrCat("min_weight_version: the replica is at weight version ", version_.version(),
                       ", the request needs ", request.min_weight_version()));
    }
    if (calls_.count(request.request_id())) {
      return absl::AlreadyExistsError(
          absl::StrCat("request_id: \"", request.request_id(), "\" is already running"));
    }
  }
  generation::SamplingParams params;
  params.n = p.n();
  params.temperature = p.temperature();
  params.do_sample = p.temperature() > 0;
  params.top_p = p.top_p() > 0 && p.top_p() < 1 ? p.top_p() : 1.0;
  params.top_k = p.top_k() > 0 ? p.top_k() : -1;
  params.max_new_tokens =
      p.max_new_tokens() > 0 ? p.max_new_tokens() : options_.default_max_new_tokens;
  params.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  if (!p.ignore_eos())
    params.stop_token_ids.insert(params.stop_token_ids.end(), eos_ids_.begin(), eos_ids_.end());

  std::vector<std::string> submitted;
  // Handed to the engine all at once: its batches do not depend on how fast they came.
  std::vector<
      std::pair<generation::GenerationRequest, generation::GenerationEngine::SampleCallback>>
      batch;
  for (int i = 0; i < request.prompts_size(); ++i) {
    const auto& prompt = request.prompts(i);
    if (prompt.token_ids_size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat("prompts[", i, "].token_ids: empty prompt"));
    }
    generation::GenerationRequest engine_request;
    engine_request.request_id = absl::StrCat(request.request_id(), "#", i);
    engine_request.prompt_ids.assign(prompt.token_ids().begin(), prompt.token_ids().end());
    engine_request.params = params;
    if (p.has_seed()) engine_request.params.seed = PromptSeed(p.seed(), prompt.prompt_id());
    engine_request.first_index = prompt.first_sample_index();
    const std::string prompt_id = prompt.prompt_id();
    const int32_t first = prompt.first_sample_index();
    const std::string call_id = request.request_id();
    const absl::Time arrived = absl::Now();
    if (absl::Status status = engine_->Check(engine_request); !status.ok()) {
      return absl::Status(status.code(), absl::StrCat("prompts[", i, "]: ", status.message()));
    }
    submitted.push_back(engine_request.request_id);
    batch.emplace_back(std::move(engine_request), [on_sample, prompt_id, first, call_id,
                                                   arrived](generation::Sample s) {
      v1::GenerateResponse response;
      response.set_request_id(call_id);
      response.set_prompt_id(prompt_id);
      response.set_sample_index(first + s.index);
      auto* sample = response.mutable_sample();
      for (int64_t t : s.token_ids) sample->add_token_ids(static_cast<int32_t>(t));
      for (float l : s.logprobs) sample->add_logprobs(l);
      sample->set_finish_reason(ToProto(s.finish_reason));
      sample->set_weight_version(static_cast<uint64_t>(s.weight_version_start));
      sample->set_last_weight_version(static_cast<uint64_t>(s.weight_version_end));
      for (const generation::VersionSwitch& change : s.version_switches) {
        auto* proto = sample->add_version_switches();
        proto->set_token_index(static_cast<int32_t>(change.token_index));
        proto->set_weight_version(static_cast<uint64_t>(change.version));
      }
      sample->set_prompt_length(static_cast<int32_t>(s.prompt_length));
      sample->set_generation_seconds(absl::ToDoubleSeconds(absl::Now() - arrived));
      on_sample(std::move(response));
    });
  }
  RETURN_IF_ERROR(engine_->SubmitAll(std::move(batch)));
  absl::MutexLock lock(&mu_);
  calls_[request.request_id()] = std::move(submitted);
  return static_cast<int64_t>(request.prompts_size()) * p.n();
}

int64_t Replica::Abort(const std::string& request_id) {
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(request_id);
    if (it == calls_.end()) return 0;
    ids = std::move(it->second);
    calls_.erase(it);
  }
  // Samples, not prompts: each engine request carries one prompt's n samples.
  int64_t aborted = 0;
  for (const auto& id : ids) {
    int64_t undelivered = 0;
    if (engine_->Abort(id, &undelivered).ok()) aborted += undelivered;
  }
  return aborted;
}

void Replica::Forget(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  calls_.erase(request_id);
}

int64_t Replica::AbortAll(int64_t* calls_aborted) {
  std::vector<std::string> calls;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, _] : calls_) calls.push_back(id);
  }
  int64_t aborted = 0, with_samples = 0;
  for (const auto& id : calls) {
    const int64_t samples = Abort(id);
    aborted += samples;
    with_samples += samples > 0;
  }
  if (calls_aborted != nullptr) *calls_aborted = with_samples;
  return aborted;
}

absl::Status Replica::StageTensors(const v1::UpdateWeightsRequest& request) {
  for (const auto& proto : request.tensors()) {
    auto shape = param_shapes_.find(proto.name());
    if (shape == param_shapes_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors[", proto.name(), "]: not a parameter of this model"));
    }
    auto assembled =
        staged_->parts.Add(proto, rollout::TensorAssembler::Expected{shape->second, param_dtype_});
    if (!assembled.ok()) return assembled.status();
    staged_->bytes += static_cast<int64_t>(proto.data().size());
    if (!assembled->has_value()) continue;  // more parts of it to come
    // Its shape and dtype are the parameter's: the assembler checked them at the first part.
    staged_->tensors[proto.name()] = std::move(**assembled);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::UpdateWeightsResponse> Replica::BeginPull(
    const v1::UpdateWeightsRequest& request, const std::function<bool()>& abandoned) {
  const absl::Time start = absl::Now();
  if (request.endpoint().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("endpoint: transport \"", request.transport(),
                     "\" needs the trainer's data-plane endpoint, got none"));
  }
  absl::MutexLock serial(&pull_mu_);
  std::shared_ptr<WeightSubscription> subscription;
  {
    absl::MutexLock lock(&mu_);
    subscription = subscription_;
  }
  // The trainer's backend, or the one it offers replicas on its node when this is one.
  const transport::Offer primary{request.transport(), request.endpoint()};
  transport::Offer offer = offers_.For(request, options_.device.rfind("cuda", 0) == 0);
  auto subscribe = [&](const transport::Offer& to) {
    WeightSubscriptionOptions options;
    options.transport = to.backend;
    options.endpoint = to.endpoint;
    auto name = request.transport_options().find("receiver_name");
    options.name = name != request.transport_options().end() ? name->second : options_.model_path;
    options.param_shapes = param_shapes_;
    // Host transports (shm, tcp) write the staging tensors with memcpy, so they stay in host
    // memory and COMMIT copies them to the model's device; device transports stage on it.
    options.device = transport::MovesDeviceMemory(to.backend) ? options_.device : "cpu";
    if (request.timeout_seconds() > 0)
      options.transfer_timeout = absl::Seconds(request.timeout_seconds());
    return WeightSubscription::Create(options);
  };
  // A same-node offer that fails here (the trainer's memory cannot be mapped from this
  // container, say) is not taken again: this version goes inline, the next ones over `primary`.
  if (!subscription || !subscription->Matches(offer.backend, offer.endpoint) ||
      !subscription->health().ok()) {
    auto created = subscribe(offer);
    if (!created.ok() && !(offer == primary)) {
      offers_.PassOver(offer, primary, std::string(created.status().message()));
      offer = primary;
      created = subscribe(offer);
    }
    if (!created.ok()) return created.status();
    subscription = std::move(*created);
    absl::MutexLock lock(&mu_);
    subscription_ = subscription;
  }
  const absl::Duration timeout =
      request.timeout_seconds() > 0 ? absl::Seconds(request.timeout_seconds()) : absl::Seconds(300);
  if (absl::Status status = subscription->WaitFor(request.version().version(), timeout, abandoned);
      !status.ok()) {
    if (!(offer == primary) && !absl::IsCancelled(status)) {
      offers_.PassOver(offer, primary, std::string(status.message()));
      absl::MutexLock lock(&mu_);
      subscription_.reset();
    }
    return status;
  }
  v1::UpdateWeightsResponse response;
  absl::MutexLock lock(&mu_);
  staged_ = Staged{request.version(),
                   request.expected_tensors(),
                   subscription->staged_bytes(),
                   {},
                   true,
                   subscription->staged_path(),
                   {}};
  *response.mutable_current_version() = version_;
  *response.mutable_staged_version() = staged_->version;
  response.set_received_tensors(static_cast<int32_t>(subscription->staged_tensors()));
  response.set_received_bytes(staged_->bytes);
  response.set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  return response;
}

absl::StatusOr<v1::UpdateWeightsResponse> Replica::UpdateWeights(
    const v1::UpdateWeightsRequest& request, const std::function<bool()>& abandoned) {
  if (!(request.timeout_seconds() >= 0) || std::isinf(request.timeout_seconds())) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_seconds: expected a finite number >= 0 (0 = 300 s), got ",
                     request.timeout_seconds()));
  }
  if (request.phase() == v1::WEIGHT_UPDATE_PHASE_BEGIN && !request.transport().empty() &&
      request.transport() != "inline") {
    return BeginPull(request, abandoned);
  }
  const absl::Time start = absl::Now();
  v1::UpdateWeightsResponse response;
  absl::MutexLock lock(&mu_);
  switch (request.phase()) {
    case v1::WEIGHT_UPDATE_PHASE_BEGIN:
      staged_ = Staged{request.version(), request.expected_tensors(), 0, {}, false, "inline", {}};
      if (auto status = StageTensors(request); !status.ok()) {
        staged_.reset();
        return status;
      }
      break;
    case v1::WEIGHT_UPDATE_PHASE_DATA:
      if (!staged_ || staged_->version.version() != request.version().version()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "version: no update of version ", request.version().version(), " was begun"));
      }
      if (staged_->pulled) {
        return absl::FailedPreconditionError(
            absl::StrCat("phase: version ", request.version().version(),
                         " comes over the data plane; DATA calls carry inline tensors"));
      }
      if (auto status = StageTensors(request); !status.ok()) {
        staged_.reset();
        return status;
      }
      break;
    case v1::WEIGHT_UPDATE_PHASE_COMMIT: {
      if (!staged_ || staged_->version.version() != request.version().version()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "version: no update of version ", request.version().version(), " was begun"));
      }
      if (!staged_->parts.unfinished().empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("tensors: only some parts of ", staged_->parts.unfinished(),
                         " came for version ", request.version().version()));
      }
      if (!staged_->pulled && staged_->tensors.size() != param_shapes_.size()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "tensors: received ", staged_->tensors.size(), " of the model's ", param_shapes_.size(),
            " parameters for version ", request.version().version()));
      }
      auto copy_into = [](model::CausalLmImpl& model,
                          const std::map<std::string, torch::Tensor>& tensors) {
        torch::NoGradGuard no_grad;
        for (auto& item : model.named_parameters()) {
          auto it = tensors.find(item.key());
          if (it == tensors.end()) {
            return absl::InternalError(absl::StrCat("no staged tensor for ", item.key()));
          }
          item.value().copy_(it->second);
        }
        return absl::OkStatus();
      };
      auto tensors =
          std::make_shared<std::map<std::string, torch::Tensor>>(std::move(staged_->tensors));
      const v1::WeightVersion version = staged_->version;
      std::shared_ptr<WeightSubscription> subscription = staged_->pulled ? subscription_ : nullptr;
      staged_.reset();
      auto applied = engine_->UpdateWeightsBetweenSteps(
          static_cast<int64_t>(version.version()),
          [tensors, subscription, copy_into, v = version.version()](model::CausalLmImpl& model) {
            if (!subscription) return copy_into(model, *tensors);
            // The staging tensors stay locked while they are copied into the model.
            return subscription->WithStaged(
                v, [&](const std::map<std::string, torch::Tensor>& staged) {
                  return copy_into(model, staged);
                });
          });
      mu_.Unlock();  // the engine thread applies it; do not hold our lock meanwhile
      absl::Status status = applied.get();
      mu_.Lock();
      if (!status.ok()) return status;
      version_ = version;
      break;
    }
    case v1::WEIGHT_UPDATE_PHASE_ABORT:
      staged_.reset();
      break;
    default:
      return absl::InvalidArgumentError("phase: expected BEGIN, DATA, COMMIT or ABORT");
  }
  *response.mutable_current_version() = version_;
  if (staged_) {
    *response.mutable_staged_version() = staged_->version;
    response.set_received_tensors(static_cast<int32_t>(staged_->tensors.size()));
    response.set_received_bytes(staged_->bytes);
  }
  response.set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  return response;
}

v1::GetRolloutStatusResponse Replica::Status() const {
  const auto stats = engine_->Stats();
  v1::GetRolloutStatusResponse status;
  status.set_queue_depth(static_cast<int32_t>(stats.queued_sequences));
  status.set_running_sequences(static_cast<int32_t>(stats.running_sequences));
  status.set_kv_cache_usage(stats.kv_tokens_capacity > 0
                                ? static_cast<double>(stats.kv_tokens_used) /
                                      stats.kv_tokens_capacity
                                : 0.0);
  status.set_max_num_seqs(static_cast<int32_t>(stats.max_num_seqs));
  status.set_generated_tokens(stats.generated_tokens_total);
  status.set_kv_cache_capacity_tokens(stats.kv_tokens_capacity);
  absl::MutexLock lock(&mu_);
  *status.mutable_weight_version() = version_;
  status.set_active_requests(static_cast<int32_t>(calls_.size()));
  status.set_update_pending(staged_.has_value());
  return status;
}

v1::WeightVersion Replica::weight_version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

std::string Replica::staged_path() const {
  absl::MutexLock lock(&mu_);
  return staged_ ? staged_->path : "";
}

}  // namespace rlmesh::rollout
