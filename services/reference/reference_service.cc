#include "services/reference/reference_service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics/families.h"
#include "common/model/model_info.h"
#include "common/rpc/log.h"
#include "common/status/grpc_status.h"
#include "common/transport/control_channel.h"

namespace rlmesh::reference {

ReferenceServiceImpl::ReferenceServiceImpl(prometheus::Registry& registry,
                                           int64_t max_message_bytes)
    : max_message_bytes_(max_message_bytes),
      sequences_(metrics::NewCounter(registry, "rlmesh_reference_sequences_total",
                                     "Sequences whose log-probs were computed.")),
      tokens_(metrics::NewCounter(registry, "rlmesh_reference_tokens_total",
                                  "Tokens (prompt + response) run through the model.")),
      duration_(metrics::NewHistogram(
          registry, "rlmesh_reference_request_duration_seconds", "Wall time of one log-prob call.",
          prometheus::Histogram::BucketBoundaries{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
                                                  120, 300})),
      updates_(prometheus::BuildCounter()
                   .Name("rlmesh_reference_weight_updates_total")
                   .Help("Weight versions committed, by the transport that brought them.")
                   .Register(registry)),
      version_(metrics::NewGauge(registry, "rlmesh_reference_weight_version",
                                 "Weight version the reference scores with now.")) {}

grpc::Status ReferenceServiceImpl::NotReady() const {
  const int rank = rank_.load();
  if (rank > 0) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("this is reference rank ", rank,
                                     " of a group, which takes no requests: rank 0 serves them"));
  }
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the model is loading");
}

grpc::Status ReferenceServiceImpl::ComputeLogProbs(grpc::ServerContext*,
                                                   const v1::ComputeLogProbsRequest* request,
                                                   v1::ComputeLogProbsResponse* response) try {
  ReferenceModel* model = model_.load();
  if (model == nullptr) return NotReady();
  const absl::Time start = absl::Now();
  auto result = model->ComputeLogProbs(*request);
  duration_.Observe(absl::ToDoubleSeconds(absl::Now() - start));
  if (!result.ok()) return ToGrpcStatus(result.status());
  sequences_.Increment(request->sequences_size());
  int64_t tokens = 0;
  for (const auto& seq : request->sequences()) tokens += seq.token_ids_size();
  tokens_.Increment(static_cast<double>(tokens));
  *response = std::move(result).value();
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("ReferenceService.ComputeLogProbs");
}

grpc::Status ReferenceServiceImpl::LoadWeights(grpc::ServerContext*,
                                               const v1::LoadReferenceWeightsRequest* request,
                                               v1::LoadReferenceWeightsResponse* response) try {
  ReferenceModel* model = model_.load();
  if (model == nullptr) return NotReady();
  auto version = model->LoadWeights(request->path(), request->version());
  if (!version.ok()) return ToGrpcStatus(version.status());
  rpc::Log("reference", "now anchoring the KL term to %s", request->path().c_str());
  *response->mutable_weight_version() = *std::move(version);
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("ReferenceService.LoadWeights");
}

grpc::Status ReferenceServiceImpl::UpdateWeights(grpc::ServerContext* context,
                                                 const v1::UpdateWeightsRequest* request,
                                                 v1::UpdateWeightsResponse* response) try {
  ReferenceModel* model = model_.load();
  if (model == nullptr) return NotReady();
  // A trainer bound to every interface names a wildcard data-plane host: dial the address its
  // call came from instead.
  v1::UpdateWeightsRequest reachable;
  request = transport::WithReachableEndpoint(request, context->peer(), &reachable);
  auto result = model->UpdateWeights(*request);
  if (!result.ok()) return ToGrpcStatus(result.status());
  if (request->phase() == v1::WEIGHT_UPDATE_PHASE_COMMIT) {
    // The way the bytes came: the data plane's path (a same-node offer, the TCP chain) may
    // differ from the transport the BEGIN named.
    const std::string transport = model->committed_path();
    updates_.Add({{"transport", transport}}).Increment();
    version_.Set(static_cast<double>(request->version().version()));
    rpc::Log("reference", "now anchoring the KL term to weight version %llu from the trainer (%s)",
             static_cast<unsigned long long>(request->version().version()), transport.c_str());
  }
  *response = std::move(result).value();
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("ReferenceService.UpdateWeights");
}

grpc::Status ReferenceServiceImpl::GetModelInfo(grpc::ServerContext*,
                                                const v1::GetModelInfoRequest*,
                                                v1::GetModelInfoResponse* response) try {
  ReferenceModel* model = model_.load();
  if (model == nullptr) return NotReady();
  absl::StatusOr<v1::GetModelInfoResponse> info;
  {
    // Read again when LoadWeights put another folder's model in place (its limits may differ).
    const std::string folder = model->folder();
    absl::MutexLock lock(&info_mu_);
    if (!info_ || info_folder_ != folder) {
      info_ = rlmesh::model::ReadModelInfo(folder);
      info_folder_ = folder;
    }
    info = *info_;
  }
  // The replica's own folder is broken, not the request: FAILED_PRECONDITION naming the file.
  if (!info.ok()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        std::string(info.status().message()));
  }
  *response = *std::move(info);
  response->set_dtype(model->options().dtype);
  *response->mutable_weight_version() = model->version();
  // ComputeLogProbs takes sequences up to the model's positions.
  v1::LengthLimits* limits = response->mutable_limits();
  limits->set_max_model_len(limits->max_position_embeddings());
  limits->set_max_prompt_length(limits->max_position_embeddings() - 1);
  limits->set_max_samples_per_request(model->options().max_batch_sequences);
  limits->set_max_message_bytes(max_message_bytes_);
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("ReferenceService.GetModelInfo");
}

}  // namespace rlmesh::reference
