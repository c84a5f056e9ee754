// The thin gRPC face of the reward service: validates a ScoreRequest, hands the items to the
// RewardService domain object under the request's deadline, and maps the outcomes back.
// Malformed requests (no items, an item without id or data_source, duplicate ids, more items
// than max_batch_size, a negative or non-finite timeout) get INVALID_ARGUMENT naming the
// field; nothing is scored then. Per-item failures travel in RewardResult.error, never as the
// call's status. Thread-safe; the service and metrics must outlive it.
#pragma once

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "rlmesh/v1/reward.grpc.pb.h"
#include "services/reward/metrics.h"
#include "services/reward/reward_service.h"

namespace rlmesh::reward {

struct RewardGrpcOptions {
  int max_batch_size = 65536;  // items per request
};

// The validation, separate for tests: OK, or INVALID_ARGUMENT naming the field.
absl::Status ValidateScoreRequest(const v1::ScoreRequest& request,
                                  const RewardGrpcOptions& options);

class RewardGrpcService final : public v1::RewardService::Service {
 public:
  RewardGrpcService(RewardService* service, RewardMetrics* metrics,
                    const RewardGrpcOptions& options)
      : service_(service), metrics_(metrics), options_(options) {}

  grpc::Status Score(grpc::ServerContext* context, const v1::ScoreRequest* request,
                     v1::ScoreResponse* response) override;

 private:
  RewardService* const service_;
  RewardMetrics* const metrics_;
  const RewardGrpcOptions options_;
};

}  // namespace rlmesh::reward
