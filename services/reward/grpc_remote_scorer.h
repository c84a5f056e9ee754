// The real `custom` scorer: forwards items to a RewardService at an address over gRPC, with
// the caller's deadline as the call's deadline and the remaining time as its timeout_seconds.
// The channel connects lazily, so the remote may start after this process; while it is
// unreachable, calls fail with UNAVAILABLE (each forwarded item then gets that error).
// Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc/client.h"
#include "rlmesh/v1/reward.grpc.pb.h"
#include "services/reward/remote_scorer.h"

namespace rlmesh::reward {

class GrpcRemoteScorer : public RemoteScorer {
 public:
  // INVALID_ARGUMENT for an empty address. `channel` carries the transport security.
  static absl::StatusOr<std::unique_ptr<GrpcRemoteScorer>> Create(
      const std::string& address, const rpc::ChannelOptions& channel = {});

  absl::StatusOr<std::vector<absl::StatusOr<ScoreResult>>> ScoreBatch(
      const std::vector<RewardItem>& items, absl::Time deadline) override;
  std::string address() const override { return address_; }

 private:
  GrpcRemoteScorer(std::string address, std::unique_ptr<v1::RewardService::Stub> stub)
      : address_(std::move(address)), stub_(std::move(stub)) {}

  const std::string address_;
  const std::unique_ptr<v1::RewardService::Stub> stub_;
};

}  // namespace rlmesh::reward
