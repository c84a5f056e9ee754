// The coordinator's view of the other services: one small interface per service, so the GRPO
// loop and the replica pool are tested with in-process fakes. The gRPC implementations are in
// grpc_clients.{h,cc}. Every method may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rlmesh/v1/reference.pb.h"
#include "rlmesh/v1/reward.pb.h"
#include "rlmesh/v1/rollout.pb.h"
#include "rlmesh/v1/trainer.pb.h"

namespace rlmesh::coordinator {

class RolloutClient {
 public:
  using SampleCallback = std::function<void(const v1::GenerateResponse&)>;
  virtual ~RolloutClient() = default;
  // Runs one Generate call to its end, calling `on_sample` (on the calling thread) for each
  // streamed sample; returns the call's final status.
  virtual absl::Status Generate(const v1::GenerateRequest& request,
                                const SampleCallback& on_sample) = 0;
  virtual absl::StatusOr<v1::GetRolloutStatusResponse> GetStatus() = 0;
};

class RewardClient {
 public:
  virtual ~RewardClient() = default;
  virtual absl::StatusOr<v1::ScoreResponse> Score(const v1::ScoreRequest& request) = 0;
};

class ReferenceClient {
 public:
  virtual ~ReferenceClient() = default;
  virtual absl::StatusOr<v1::ComputeLogProbsResponse> ComputeLogProbs(
      const v1::ComputeLogProbsRequest& request) = 0;
};

class TrainerClient {
 public:
  virtual ~TrainerClient() = default;
  virtual absl::StatusOr<v1::ComputeOldLogProbsResponse> ComputeOldLogProbs(
      const v1::ComputeOldLogProbsRequest& request) = 0;
  virtual absl::StatusOr<v1::TrainStepResponse> TrainStep(const v1::TrainStepRequest& request) = 0;
  virtual absl::StatusOr<v1::SftStepResponse> SftStep(const v1::SftStepRequest& request) = 0;
  virtual absl::StatusOr<v1::SaveCheckpointResponse> SaveCheckpoint(
      const v1::SaveCheckpointRequest& request) = 0;
  virtual absl::StatusOr<v1::LoadCheckpointResponse> LoadCheckpoint(
      const v1::LoadCheckpointRequest& request) = 0;
  virtual absl::StatusOr<v1::PublishWeightsResponse> PublishWeights(
      const v1::PublishWeightsRequest& request) = 0;
  virtual absl::StatusOr<v1::GetTrainerStatusResponse> GetStatus() = 0;
};

// Makes a client for a rollout replica's address ("host:port").
using RolloutClientFactory =
    std::function<std::unique_ptr<RolloutClient>(const std::string& address)>;

}  // namespace rlmesh::coordinator
