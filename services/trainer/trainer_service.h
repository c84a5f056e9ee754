// TrainerService over gRPC on a Trainer: thin handlers that call the domain object, record the
// trainer metrics of docs/metrics.md, and map statuses (INVALID_ARGUMENT names the field).
#pragma once

#include <atomic>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "rlmesh/v1/trainer.grpc.pb.h"
#include "services/trainer/trainer.h"

namespace rlmesh::trainer {

class TrainerServiceImpl final : public v1::TrainerService::Service {
 public:
  explicit TrainerServiceImpl(prometheus::Registry& registry);
  // Until a trainer is set (the model is loading), calls fail with UNAVAILABLE.
  void SetTrainer(Trainer* trainer) { trainer_.store(trainer); }
  // On ranks > 0 of a trainer group, which never set a trainer: calls fail with
  // FAILED_PRECONDITION saying that rank 0 serves them.
  void SetGroupRank(int rank) { rank_.store(rank); }

  grpc::Status ComputeOldLogProbs(grpc::ServerContext*, const v1::ComputeOldLogProbsRequest* request,
                                  v1::ComputeOldLogProbsResponse* response) override;
  grpc::Status TrainStep(grpc::ServerContext*, const v1::TrainStepRequest* request,
                         v1::TrainStepResponse* response) override;
  grpc::Status SftStep(grpc::ServerContext*, const v1::SftStepRequest* request,
                       v1::SftStepResponse* response) override;
  grpc::Status SaveCheckpoint(grpc::ServerContext*, const v1::SaveCheckpointRequest* request,
                              v1::SaveCheckpointResponse* response) override;
  grpc::Status LoadCheckpoint(grpc::ServerContext*, const v1::LoadCheckpointRequest* request,
                              v1::LoadCheckpointResponse* response) override;
  grpc::Status PublishWeights(grpc::ServerContext*, const v1::PublishWeightsRequest* request,
                              v1::PublishWeightsResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetTrainerStatusRequest* request,
                         v1::GetTrainerStatusResponse* response) override;

 private:
  grpc::Status NotReady() const;

  std::atomic<Trainer*> trainer_{nullptr};
  std::atomic<int> rank_{0};
  prometheus::Gauge& global_step_;
  prometheus::Histogram& step_duration_;
  prometheus::Histogram& old_log_prob_duration_;
  prometheus::Counter& tokens_;
  prometheus::Gauge& grad_norm_;
  prometheus::Counter& optimizer_steps_;
  prometheus::Counter& skipped_steps_;
  prometheus::Histogram& checkpoint_duration_;
  prometheus::Counter& checkpoint_failures_;
  prometheus::Gauge& weight_version_;
  prometheus::Histogram& publish_duration_;
  prometheus::Counter& publish_bytes_;
  prometheus::Counter& publish_failures_;
  prometheus::Counter& inline_fallbacks_;
  std::atomic<int64_t> inline_fallbacks_counted_{0};  // of Trainer::inline_fallbacks
};

}  // namespace rlmesh::trainer
