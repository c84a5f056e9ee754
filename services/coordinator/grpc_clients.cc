#include "services/coordinator/grpc_clients.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status/grpc_status.h"
#include "rlmesh/v1/reference.grpc.pb.h"
#include "rlmesh/v1/reward.grpc.pb.h"
#include "rlmesh/v1/rollout.grpc.pb.h"
#include "rlmesh/v1/trainer.grpc.pb.h"

namespace rlmesh::coordinator {

namespace {

void SetDeadline(grpc::ClientContext* context, double seconds) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
}

// A failed call's status, with the peer and method in the message.
absl::Status CallError(const grpc::Status& status, const std::string& address,
                       const char* method) {
  absl::Status s = FromGrpcStatus(status);
  return absl::Status(s.code(), absl::StrCat(method, " on ", address, ": ", s.message()));
}

template <typename Response, typename Fn>
absl::StatusOr<Response> Unary(const GrpcClientOptions& options, const std::string& address,
                               const char* method, bool retry, Fn&& fn,
                               double timeout_seconds = 0) {
  Response response;
  auto call = [&](grpc::ClientContext* context) {
    SetDeadline(context, timeout_seconds > 0 ? timeout_seconds : options.call_timeout_seconds);
    return fn(context, &response);
  };
  grpc::Status status;
  if (retry) {
    status = rpc::CallWithRetry(options.retry, call, nullptr,
                                /*retry_deadline_exceeded=*/timeout_seconds > 0);
  } else {
    grpc::ClientContext context;
    status = call(&context);
  }
  if (!status.ok()) return CallError(status, address, method);
  return response;
}

class GrpcRolloutClient : public RolloutClient {
 public:
  GrpcRolloutClient(const std::string& address, const GrpcClientOptions& options)
      : address_(address),
        options_(options),
        stub_(v1::RolloutService::NewStub(rpc::CreateChannel(address, options.channel))) {}

  absl::Status Generate(const v1::GenerateRequest& request,
                        const SampleCallback& on_sample) override {
    grpc::ClientContext context;
    SetDeadline(&context, options_.call_timeout_seconds);
    auto reader = stub_->Generate(&context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) on_sample(response);
    grpc::Status status = reader->Finish();
    if (!status.ok()) return CallError(status, address_, "RolloutService.Generate");
    return absl::OkStatus();
  }

  absl::StatusOr<v1::GetRolloutStatusResponse> GetStatus() override {
    // A short deadline and no retry of ours: this is the pool's heartbeat probe.
    v1::GetRolloutStatusResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, options_.probe_timeout_seconds);
    grpc::Status status = stub_->GetStatus(&context, v1::GetRolloutStatusRequest(), &response);
    if (!status.ok()) return CallError(status, address_, "RolloutService.GetStatus");
    return response;
  }

 private:
  const std::string address_;
  const GrpcClientOptions options_;
  std::unique_ptr<v1::RolloutService::Stub> stub_;
};

class GrpcRewardClient : public RewardClient {
 public:
  GrpcRewardClient(const std::string& address, const GrpcClientOptions& options)
      : address_(address),
        options_(options),
        stub_(v1::RewardService::NewStub(rpc::CreateChannel(address, options.channel))) {}

  absl::StatusOr<v1::ScoreResponse> Score(const v1::ScoreRequest& request) override {
    return Unary<v1::ScoreResponse>(
        options_, address_, "RewardService.Score", true,
        [&](grpc::ClientContext* c, v1::ScoreResponse* r) { return stub_->Score(c, request, r); },
        options_.score_timeout_seconds);
  }

 private:
  const std::string address_;
  const GrpcClientOptions options_;
  std::unique_ptr<v1::RewardService::Stub> stub_;
};

class GrpcReferenceClient : public ReferenceClient {
 public:
  GrpcReferenceClient(const std::string& address, const GrpcClientOptions& options)
      : address_(address),
        options_(options),
        stub_(v1::ReferenceService::NewStub(rpc::CreateChannel(address, options.channel))) {}

  absl::StatusOr<v1::ComputeLogProbsResponse> ComputeLogProbs(
      const v1::ComputeLogProbsRequest& request) override {
    return Unary<v1::ComputeLogProbsResponse>(
        options_, address_, "ReferenceService.ComputeLogProbs", true,
        [&](grpc::ClientContext* c, v1::ComputeLogProbsResponse* r) {
          return stub_->ComputeLogProbs(c, request, r);
        });
  }

 private:
  const std::string address_;
  const GrpcClientOptions options_;
  std::unique_ptr<v1::ReferenceService::Stub> stub_;
};

class GrpcTrainerClient : public TrainerClient {
 public:
  GrpcTrainerClient(const std::string& address, const GrpcClientOptions& options)
      : address_(address),
        options_(options),
        stub_(v1::TrainerService::NewStub(rpc::CreateChannel(address, options.channel))) {}

  absl::StatusOr<v1::ComputeOldLogProbsResponse> ComputeOldLogProbs(
      const v1::ComputeOldLogProbsRequest& request) override {
    return Unary<v1::ComputeOldLogProbsResponse>(
        options_, address_, "TrainerService.ComputeOldLogProbs", true,
        [&](grpc::ClientContext* c, v1::ComputeOldLogProbsResponse* r) {
          return stub_->ComputeOldLogProbs(c, request, r);
        });
  }
  absl::StatusOr<v1::TrainStepResponse> TrainStep(const v1::TrainStepRequest& request) override {
    return Unary<v1::TrainStepResponse>(options_, address_, "TrainerService.TrainStep", false,
                                        [&](grpc::ClientContext* c, v1::TrainStepResponse* r) {
                                          return stub_->TrainStep(c, request, r);
                                        });
  }
  absl::StatusOr<v1::SftStepResponse> SftStep(const v1::SftStepRequest& request) override {
    return Unary<v1::SftStepResponse>(options_, address_, "TrainerService.SftStep", false,
                                      [&](grpc::ClientContext* c, v1::SftStepResponse* r) {
                                        return stub_->SftStep(c, request, r);
                                      });
  }
  absl::StatusOr<v1::SaveCheckpointResponse> SaveCheckpoint(
      const v1::SaveCheckpointRequest& request) override {
    return Unary<v1::SaveCheckpointResponse>(
        options_, address_, "TrainerService.SaveCheckpoint", true,
        [&](grpc::ClientContext* c, v1::SaveCheckpointResponse* r) {
          return stub_->SaveCheckpoint(c, request, r);
        });
  }
  absl::StatusOr<v1::LoadCheckpointResponse> LoadCheckpoint(
      const v1::LoadCheckpointRequest& request) override {
    return Unary<v1::LoadCheckpointResponse>(
        options_, address_, "TrainerService.LoadCheckpoint", true,
        [&](grpc::ClientContext* c, v1::LoadCheckpointResponse* r) {
          return stub_->LoadCheckpoint(c, request, r);
        });
  }
  absl::StatusOr<v1::PublishWeightsResponse> PublishWeights(
      const v1::PublishWeightsRequest& request) override {
    return Unary<v1::PublishWeightsResponse>(
        options_, address_, "TrainerService.PublishWeights", true,
        [&](grpc::ClientContext* c, v1::PublishWeightsResponse* r) {
          return stub_->PublishWeights(c, request, r);
        });
  }
  absl::StatusOr<v1::GetTrainerStatusResponse> GetStatus() override {
    return Unary<v1::GetTrainerStatusResponse>(
        options_, address_, "TrainerService.GetStatus", true,
        [&](grpc::ClientContext* c, v1::GetTrainerStatusResponse* r) {
          return stub_->GetStatus(c, v1::GetTrainerStatusRequest(), r);
        });
  }

 private:
  const std::string address_;
  const GrpcClientOptions options_;
  std::unique_ptr<v1::TrainerService::Stub> stub_;
};

}  // namespace

std::unique_ptr<RolloutClient> NewGrpcRolloutClient(const std::string& address,
                                                    const GrpcClientOptions& options) {
  return std::make_unique<GrpcRolloutClient>(address, options);
}
std::unique_ptr<RewardClient> NewGrpcRewardClient(const std::string& address,
                                                  const GrpcClientOptions& options) {
  return std::make_unique<GrpcRewardClient>(address, options);
}
std::unique_ptr<ReferenceClient> NewGrpcReferenceClient(const std::string& address,
                                                        const GrpcClientOptions& options) {
  return std::make_unique<GrpcReferenceClient>(address, options);
}
std::unique_ptr<TrainerClient> NewGrpcTrainerClient(const std::string& address,
                                                    const GrpcClientOptions& options) {
  return std::make_unique<GrpcTrainerClient>(address, options);
}

}  // namespace rlmesh::coordinator
