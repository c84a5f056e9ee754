// ReferenceService over gRPC: hands each request to the ReferenceModel, records the
// reference metrics (docs/metrics.md), maps the status (INVALID_ARGUMENT names the field).
#pragma once

#include <atomic>

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
  explicit ReferenceServiceImpl(prometheus::Registry& registry);
  // Until a model is set, calls fail with UNAVAILABLE (the process is still loading it).
  void SetModel(ReferenceModel* model) { model_.store(model); }

  grpc::Status ComputeLogProbs(grpc::ServerContext* context,
                               const v1::ComputeLogProbsRequest* request,
                               v1::ComputeLogProbsResponse* response) override;
  grpc::Status LoadWeights(grpc::ServerContext* context,
                           const v1::LoadReferenceWeightsRequest* request,
                           v1::LoadReferenceWeightsResponse* response) override;
  grpc::Status UpdateWeights(grpc::ServerContext* context, const v1::UpdateWeightsRequest* request,
                             v1::UpdateWeightsResponse* response) override;

 private:
  std::atomic<ReferenceModel*> model_{nullptr};
  prometheus::Counter& sequences_;
  prometheus::Counter& tokens_;
  prometheus::Histogram& duration_;
  prometheus::Family<prometheus::Counter>& updates_;  // by transport
  prometheus::Gauge& version_;
};

}  // namespace rlmesh::reference
