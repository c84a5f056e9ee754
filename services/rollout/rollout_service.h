// RolloutService over gRPC on a Replica: Generate streams samples as the engine finishes them
// (and aborts the call's work when the client goes away), GetStatus, UpdateWeights and Abort.
// Records the rollout metrics of docs/metrics.md on the registry given.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "rlmesh/v1/rollout.grpc.pb.h"
#include "services/rollout/replica.h"

namespace rlmesh::rollout {

class RolloutServiceImpl final : public v1::RolloutService::Service {
 public:
  // A Generate call asking for more than max_samples_per_request samples (prompts x n) is
  // refused with INVALID_ARGUMENT; one that would take the samples of all open calls beyond
  // max_held_samples with RESOURCE_EXHAUSTED, naming the limit (admission control). 0 = no
  // limit.
  // `max_message_bytes` is only reported (GetModelInfo); the server enforces it.
  explicit RolloutServiceImpl(prometheus::Registry& registry, int64_t max_samples_per_request = 0,
                              int64_t max_held_samples = 0, int64_t max_message_bytes = 0);
  ~RolloutServiceImpl() override;
  // Until a replica is set (the model is loading), calls fail with UNAVAILABLE.
  void SetReplica(Replica* replica);
  // The id the coordinator registered this replica as, which GetStatus reports.
  void SetReplicaId(const std::string& replica_id);

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GetStatus(grpc::ServerContext* context, const v1::GetRolloutStatusRequest* request,
                         v1::GetRolloutStatusResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::GetModelInfoResponse* response) override;
  grpc::Status UpdateWeights(grpc::ServerContext* context, const v1::UpdateWeightsRequest* request,
                             v1::UpdateWeightsResponse* response) override;
  grpc::Status Abort(grpc::ServerContext* context, const v1::AbortRequest* request,
                     v1::AbortResponse* response) override;

 private:
  void RefreshGauges();
  grpc::Status Finish(const grpc::Status& status);

  const int64_t max_samples_per_request_;
  const int64_t max_held_samples_;
  const int64_t max_message_bytes_;
  std::atomic<int64_t> held_samples_{0};  // of the Generate calls admitted and not ended
  std::atomic<Replica*> replica_{nullptr};
  prometheus::Gauge& queue_depth_;
  prometheus::Gauge& running_;
  prometheus::Gauge& max_sequences_;
  prometheus::Gauge& kv_usage_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& generated_tokens_;
  prometheus::Family<prometheus::Counter>& samples_;
  prometheus::Histogram& request_duration_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Gauge& weight_version_;
  prometheus::Histogram& update_duration_;
  prometheus::Counter& update_bytes_;
  prometheus::Counter& update_failures_;
  prometheus::Family<prometheus::Counter>& updates_;
  absl::Mutex path_mu_;                              // guards last_path_ and replica_id_
  std::string last_path_ ABSL_GUARDED_BY(path_mu_);  // how the last version committed came
  std::string replica_id_ ABSL_GUARDED_BY(path_mu_);
  std::atomic<int64_t> prompt_tokens_seen_{0};
  std::atomic<int64_t> generated_tokens_seen_{0};
  absl::Notification stop_;
  std::thread refresher_;
};

}  // namespace rlmesh::rollout
