#include "services/rollout/rollout_service.h"

#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics/families.h"
#include "common/rpc/log.h"
#include "common/status/grpc_status.h"
#include "common/transport/control_channel.h"
#include "services/rollout/request_validation.h"

namespace rlmesh::rollout {

namespace {

const prometheus::Histogram::BucketBoundaries kRequestBuckets = {0.05, 0.1, 0.25, 0.5, 1,   2.5, 5,
                                                                 10,   30,  60,   120, 300, 600};
const prometheus::Histogram::BucketBoundaries kUpdateBuckets = {0.01, 0.05, 0.1, 0.25, 0.5, 1,  2.5,
                                                                5,    10,   30,  60,   120, 300};

const char* FinishReasonLabel(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    default:
      return "abort";
  }
}

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK:
      return "OK";
    case grpc::CANCELLED:
      return "CANCELLED";
    case grpc::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::UNAVAILABLE:
      return "UNAVAILABLE";
    default:
      return "OTHER";
  }
}

grpc::Status Loading() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the model is loading");
}

}  // namespace

RolloutServiceImpl::RolloutServiceImpl(prometheus::Registry& registry,
                                       int64_t max_samples_per_request, int64_t max_held_samples,
                                       int64_t max_message_bytes)
    : max_samples_per_request_(max_samples_per_request),
      max_held_samples_(max_held_samples),
      max_message_bytes_(max_message_bytes),
      queue_depth_(metrics::NewGauge(registry, "rlmesh_rollout_queue_depth",
                                     "Sequences accepted but not yet running.")),
      running_(metrics::NewGauge(registry, "rlmesh_rollout_running_sequences",
                                 "Sequences being decoded now.")),
      max_sequences_(metrics::NewGauge(registry, "rlmesh_rollout_max_sequences",
                                       "Configured concurrent sequence limit (max_num_seqs).")),
      kv_usage_(metrics::NewGauge(registry, "rlmesh_rollout_kv_cache_usage_ratio",
                                  "Fraction of the KV cache in use.")),
      prompt_tokens_(metrics::NewCounter(registry, "rlmesh_rollout_prompt_tokens_total",
                                         "Prompt tokens prefilled.")),
      generated_tokens_(metrics::NewCounter(registry, "rlmesh_rollout_generated_tokens_total",
                                            "Tokens sampled.")),
      samples_(prometheus::BuildCounter()
                   .Name("rlmesh_rollout_samples_total")
                   .Help("Samples finished, by finish_reason.")
                   .Register(registry)),
      request_duration_(metrics::NewHistogram(registry,
                                              "rlmesh_rollout_generate_request_duration_seconds",
                                              "Wall time of one Generate call.", kRequestBuckets)),
      requests_(prometheus::BuildCounter()
                    .Name("rlmesh_rollout_requests_total")
                    .Help("Generate calls finished, by gRPC status code.")
                    .Register(registry)),
      weight_version_(metrics::NewGauge(registry, "rlmesh_rollout_weight_version",
                                        "Weight version the replica generates with now.")),
      update_duration_(metrics::NewHistogram(
          registry, "rlmesh_rollout_weight_update_duration_seconds",
          "Time from the start of receiving a version to applying it.", kUpdateBuckets)),
      update_bytes_(metrics::NewCounter(registry, "rlmesh_rollout_weight_update_bytes_total",
                                        "Weight bytes received.")),
      update_failures_(metrics::NewCounter(registry, "rlmesh_rollout_weight_update_failures_total",
                                           "Versions whose transfer or application failed.")),
      updates_(prometheus::BuildCounter()
                   .Name("rlmesh_rollout_weight_updates_total")
                   .Help("Weight versions committed, by the way their bytes came: inline (gRPC), "
                         "shm, tcp (the chain) or nccl.")
                   .Register(registry)) {
  for (const char* path : {"inline", "shm", "tcp"}) updates_.Add({{"transport", path}});
  for (const char* reason : {"stop", "length", "abort"}) samples_.Add({{"finish_reason", reason}});
  requests_.Add({{"code", "OK"}});
  refresher_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(1))) RefreshGauges();
  });
}

RolloutServiceImpl::~RolloutServiceImpl() {
  stop_.Notify();
  refresher_.join();
}

void RolloutServiceImpl::SetReplica(Replica* replica) {
  replica_.store(replica);
  RefreshGauges();
}

void RolloutServiceImpl::RefreshGauges() {
  Replica* replica = replica_.load();
  if (replica == nullptr) return;
  const auto stats = replica->EngineStats();
  queue_depth_.Set(static_cast<double>(stats.queued_sequences));
  running_.Set(static_cast<double>(stats.running_sequences));
  max_sequences_.Set(static_cast<double>(stats.max_num_seqs));
  kv_usage_.Set(stats.kv_tokens_capacity > 0
                    ? static_cast<double>(stats.kv_tokens_used) / stats.kv_tokens_capacity
                    : 0.0);
  const int64_t prompt_before = prompt_tokens_seen_.exchange(stats.prompt_tokens_total);
  if (stats.prompt_tokens_total > prompt_before) {
    prompt_tokens_.Increment(static_cast<double>(stats.prompt_tokens_total - prompt_before));
  }
  const int64_t generated_before = generated_tokens_seen_.exchange(stats.generated_tokens_total);
  if (stats.generated_tokens_total > generated_before) {
    generated_tokens_.Increment(
        static_cast<double>(stats.generated_tokens_total - generated_before));
  }
  weight_version_.Set(static_cast<double>(replica->weight_version().version()));
}

grpc::Status RolloutServiceImpl::Finish(const grpc::Status& status) {
  requests_.Add({{"code", CodeName(status.error_code())}}).Increment();
  RefreshGauges();
  return status;
}

grpc::Status RolloutServiceImpl::Generate(grpc::ServerContext* context,
                                          const v1::GenerateRequest* request,
                                          grpc::ServerWriter<v1::GenerateResponse>* writer) try {
  Replica* replica = replica_.load();
  if (replica == nullptr) return Finish(Loading());
  GenerateLimits limits;
  limits.vocab_size = replica->vocab_size();
  limits.max_samples_per_request = max_samples_per_request_;
  limits.max_new_tokens = replica->options().default_max_new_tokens;
  limits.max_model_len = replica->max_model_len();
  if (absl::Status valid = ValidateGenerateRequest(*request, limits); !valid.ok()) {
    return Finish(ToGrpcStatus(valid));
  }
  // Admission: the samples of every open call together stay within max_held_samples_.
  const int64_t asked =
      static_cast<int64_t>(request->prompts_size()) * request->sampling_params().n();
  int64_t held = held_samples_.load();
  do {
    if (max_held_samples_ > 0 && held + asked > max_held_samples_) {
      return Finish(
          grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                       absl::StrCat("rlmesh.rollout.max_queued_samples = ", max_held_samples_,
                                    ": this replica holds ", held,
                                    " samples of open Generate calls and this "
                                    "call asks for ",
                                    asked, "; send it again later or to another replica")));
    }
  } while (!held_samples_.compare_exchange_weak(held, held + asked));
  struct Release {
    std::atomic<int64_t>& held;
    int64_t samples;
    ~Release() { held -= samples; }
  } release{held_samples_, asked};
  const absl::Time start = absl::Now();
  absl::Mutex mu;
  std::deque<v1::GenerateResponse> ready;
  auto submitted = replica->Submit(*request, [&mu, &ready](v1::GenerateResponse response) {
    absl::MutexLock lock(&mu);
    ready.push_back(std::move(response));
  });
  if (!submitted.ok()) return Finish(ToGrpcStatus(submitted.status()));
  int64_t delivered = 0;
  bool cancelled = false;
  while (delivered < *submitted) {
    std::deque<v1::GenerateResponse> batch;
    {
      absl::MutexLock lock(&mu);
      auto has_samples = [&ready]() { return !ready.empty(); };
      mu.AwaitWithTimeout(absl::Condition(&has_samples), absl::Milliseconds(100));
      batch.swap(ready);
    }
    for (auto& response : batch) {
      ++delivered;
      samples_.Add({{"finish_reason", FinishReasonLabel(response.sample().finish_reason())}})
          .Increment();
      if (!cancelled && !writer->Write(response)) cancelled = true;
    }
    if (!cancelled && context->IsCancelled()) cancelled = true;
    if (cancelled) {
      // The client is gone: stop the work, then wait for the engine to hand back every sample
      // (the callbacks reference this frame).
      replica->Abort(request->request_id());
    }
  }
  replica->Forget(request->request_id());
  request_duration_.Observe(absl::ToDoubleSeconds(absl::Now() - start));
  if (cancelled) return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
  return Finish(grpc::Status::OK);
} catch (...) {
  return StatusFromCurrentException("RolloutService.Generate");
}

void RolloutServiceImpl::SetReplicaId(const std::string& replica_id) {
  absl::MutexLock lock(&path_mu_);
  replica_id_ = replica_id;
}

grpc::Status RolloutServiceImpl::GetStatus(grpc::ServerContext*, const v1::GetRolloutStatusRequest*,
                                           v1::GetRolloutStatusResponse* response) try {
  Replica* replica = replica_.load();
  if (replica == nullptr) return Loading();
  *response = replica->Status();
  {
    absl::MutexLock lock(&path_mu_);
    response->set_replica_id(replica_id_);
  }
  const auto stats = replica->EngineStats();
  response->set_compute_seconds_total(stats.forward_seconds_total + stats.sampling_seconds_total);
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("RolloutService.GetStatus");
}

grpc::Status RolloutServiceImpl::GetModelInfo(grpc::ServerContext*, const v1::GetModelInfoRequest*,
                                              v1::GetModelInfoResponse* response) try {
  Replica* replica = replica_.load();
  if (replica == nullptr) return Loading();
  auto info = replica->ModelInfo();
  // The replica's own folder is broken, not the request: FAILED_PRECONDITION naming the file.
  if (!info.ok()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        std::string(info.status().message()));
  }
  *response = *std::move(info);
  v1::LengthLimits* limits = response->mutable_limits();
  limits->set_max_model_len(static_cast<int32_t>(replica->max_model_len()));
  limits->set_max_prompt_length(static_cast<int32_t>(replica->max_model_len() - 1));
  limits->set_max_new_tokens(static_cast<int32_t>(replica->options().default_max_new_tokens));
  limits->set_max_samples_per_request(max_samples_per_request_);
  limits->set_max_queued_samples(max_held_samples_);
  limits->set_max_message_bytes(max_message_bytes_);
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("RolloutService.GetModelInfo");
}

grpc::Status RolloutServiceImpl::UpdateWeights(grpc::ServerContext* context,
                                               const v1::UpdateWeightsRequest* request,
                                               v1::UpdateWeightsResponse* response) try {
  Replica* replica = replica_.load();
  if (replica == nullptr) return Loading();
  const absl::Time start = absl::Now();
  // A trainer bound to every interface names a wildcard data-plane host: dial the address its
  // call came from instead.
  v1::UpdateWeightsRequest reachable;
  request = transport::WithReachableEndpoint(request, context->peer(), &reachable);
  const std::string path =
      request->phase() == v1::WEIGHT_UPDATE_PHASE_COMMIT ? replica->staged_path() : "";
  auto result = replica->UpdateWeights(*request, [context] { return context->IsCancelled(); });
  if (!result.ok()) {
    update_failures_.Increment();
    return ToGrpcStatus(result.status());
  }
  if (request->phase() == v1::WEIGHT_UPDATE_PHASE_BEGIN && !request->endpoint().empty()) {
    // Pulled over the data plane (shm, nccl) before BEGIN returned: the whole version.
    update_bytes_.Increment(static_cast<double>(result->received_bytes()));
  } else {
    for (const auto& tensor : request->tensors()) {
      update_bytes_.Increment(static_cast<double>(tensor.data().size()));
    }
  }
  if (request->phase() == v1::WEIGHT_UPDATE_PHASE_COMMIT) {
    if (!path.empty()) {
      updates_.Add({{"transport", path}}).Increment();
      // Say when the way versions arrive changes: the first one, a same-node offer taken or
      // given up, a version that had to come inline.
      std::string before;
      {
        absl::MutexLock lock(&path_mu_);
        before = std::exchange(last_path_, path);
      }
      if (path != before) {
        rpc::Log("rollout", "weight version %llu came over %s%s",
                 static_cast<unsigned long long>(request->version().version()), path.c_str(),
                 before.empty() ? "" : absl::StrCat(" (the one before over ", before, ")").c_str());
      }
    }
    update_duration_.Observe(absl::ToDoubleSeconds(absl::Now() - start));
    RefreshGauges();
  }
  *response = std::move(result).value();
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("RolloutService.UpdateWeights");
}

grpc::Status RolloutServiceImpl::Abort(grpc::ServerContext*, const v1::AbortRequest* request,
                                       v1::AbortResponse* response) try {
  Replica* replica = replica_.load();
  if (replica == nullptr) return Loading();
  if (request->all()) {
    int64_t calls = 0;
    response->set_aborted_samples(static_cast<int32_t>(replica->AbortAll(&calls)));
    response->set_aborted_requests(static_cast<int32_t>(calls));
    return grpc::Status::OK;
  }
  if (request->request_ids_size() == 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "request_ids: name at least one request, or set all");
  }
  int32_t calls = 0, samples = 0;
  for (const auto& id : request->request_ids()) {
    const int64_t aborted = replica->Abort(id);
    calls += aborted > 0;
    samples += static_cast<int32_t>(aborted);
  }
  response->set_aborted_requests(calls);
  response->set_aborted_samples(samples);
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("RolloutService.Abort");
}

}  // namespace rlmesh::rollout
