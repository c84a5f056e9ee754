// The `custom` scorer: any remote program that implements rlmesh.v1.RewardService. This is
// the interface the reward service forwards to; GrpcRemoteScorer (grpc_remote_scorer.h) is
// the real one, tests use fakes. Implementations must be callable from several threads.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/reward/scorers/scorer.h"

namespace rlmesh::reward {

class RemoteScorer {
 public:
  virtual ~RemoteScorer() = default;

  // Scores `items` remotely, finishing by `deadline`. On success returns exactly one entry
  // per item, in order: its result, or the error the remote reported for that item. A
  // failure of the call as a whole (unreachable, deadline, malformed answer) is the
  // returned status.
  virtual absl::StatusOr<std::vector<absl::StatusOr<ScoreResult>>> ScoreBatch(
      const std::vector<RewardItem>& items, absl::Time deadline) = 0;

  // Where the remote lives, for error messages ("127.0.0.1:50060").
  virtual std::string address() const = 0;
};

}  // namespace rlmesh::reward
