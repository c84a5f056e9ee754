// A scorer outside this process that the reward service forwards items to: any program that
// implements rlmesh.v1.RewardService (GrpcRemoteScorer, grpc_remote_scorer.h, the `custom`
// scorer), or the Python processes running a verl reward file (PythonRewardPool,
// python_pool.h). Tests use fakes. Implementations must be callable from several threads.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/reward/scorers/scorer.h"

namespace rlmesh::reward {

// Why an item failed; the label values of rlmesh_reward_errors_total{kind}.
enum class ItemErrorKind { kNone, kException, kTimeout, kRemote, kUnknownDataSource, kInvalid };
const char* ItemErrorKindName(ItemErrorKind kind);

// The kind of an error this process's own scorer gave an item (a reward file's workers, the
// reward model): DEADLINE_EXCEEDED is a timeout, INVALID_ARGUMENT an invalid item, anything
// else an exception.
inline ItemErrorKind KindOfLocalError(const absl::Status& item_error) {
  switch (item_error.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      return ItemErrorKind::kTimeout;
    case absl::StatusCode::kInvalidArgument:
      return ItemErrorKind::kInvalid;
    default:
      return ItemErrorKind::kException;
  }
}

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

  // What prefixes its items' errors ("custom scorer at 127.0.0.1:50060").
  virtual std::string where() const { return "custom scorer at " + address(); }

  // The kind of an item error this scorer returned. A remote program's own verdict is one
  // the reward service cannot vouch for: kRemote (the coordinator scores such items again).
  virtual ItemErrorKind KindOf(const absl::Status& /*item_error*/) const {
    return ItemErrorKind::kRemote;
  }
};

}  // namespace rlmesh::reward
