// ReferenceService over gRPC: hands each request to the ReferenceModel, records the
// reference metrics (docs/metrics.md), maps the status (INVALID_ARGUMENT names the field).
#pragma once

#include <atomic>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "rlmesh/v1/reference.grpc.pb.h"
#include "services/reference/reference_model.h"

namespace rlmesh::reference {

class ReferenceServiceImpl final : public v1::ReferenceService::Service {
 public:
  // `max_message_bytes` is only reported (GetModelInfo); the server enforces it.
  explicit ReferenceServiceImpl(prometheus::Registry& registry, int64_t max_message_bytes = 0);
  // Until a model is set, calls fail with UNAVAILABLE (the process is still loading it).
  void SetModel(ReferenceModel* model) { model_.store(model); }
  // Ranks > 0 of a reference group take no requests: each call says rank 0 serves them.
  void SetGroupRank(int rank) { rank_.store(rank); }

  grpc::Status ComputeLogProbs(grpc::ServerContext* context,
                               const v1::ComputeLogProbsRequest* request,
                               v1::ComputeLogProbsResponse* response) override;
  grpc::Status LoadWeights(grpc::ServerContext* context,
                           const v1::LoadReferenceWeightsRequest* request,
                           v1::LoadReferenceWeightsResponse* response) override;
  grpc::Status UpdateWeights(grpc::ServerContext* context, const v1::UpdateWeightsRequest* request,
                             v1::UpdateWeightsResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::GetModelInfoResponse* response) override;

 private:
  // FAILED_PRECONDITION on a rank > 0 of a group, else UNAVAILABLE while the model loads.
  grpc::Status NotReady() const;

  const int64_t max_message_bytes_;
  std::atomic<ReferenceModel*> model_{nullptr};
  absl::Mutex info_mu_;
  // The model folder's part of GetModelInfo, read on the first call.
  std::optional<absl::StatusOr<v1::GetModelInfoResponse>> info_ ABSL_GUARDED_BY(info_mu_);
  std::string info_folder_ ABSL_GUARDED_BY(info_mu_);  // the folder info_ was read from
  std::atomic<int> rank_{0};
  prometheus::Counter& sequences_;
  prometheus::Counter& tokens_;
  prometheus::Histogram& duration_;
  prometheus::Family<prometheus::Counter>& updates_;  // by transport
  prometheus::Gauge& version_;
};

}  // namespace rlmesh::reference
