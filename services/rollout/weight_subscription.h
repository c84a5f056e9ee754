// A rollout replica's subscription to the trainer's weight data plane (common/transport): a
// thread of its own receives every version into staging tensors (one per parameter, in the
// dtype the trainer sends), so the replica acknowledges each version promptly whether or not a
// BEGIN call is waiting, and a replica that joins late is caught up with the current version.
// BEGIN waits for the version to be staged (WaitFor); COMMIT copies the staging tensors into the
// model between two decode steps (WithStaged), while the receiving thread is held off.
// Thread-safe.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transport/transport.h"

namespace rlmesh::rollout {

struct WeightSubscriptionOptions {
  std::string transport;  // a common/transport backend name ("shm", "nccl")
  std::string endpoint;   // the trainer's data-plane endpoint, "host:port"
  std::string name;       // reported by the trainer when this replica fails
  std::map<std::string, std::vector<int64_t>> param_shapes;  // the model's parameters
  absl::Duration transfer_timeout = absl::Seconds(300);
  std::string device = "cpu";  // where staging tensors live (nccl, cuda_ipc: "cuda:N")
};

class WeightSubscription {
 public:
  // Connects to the trainer; Unavailable when it cannot be reached.
  static absl::StatusOr<std::unique_ptr<WeightSubscription>> Create(
      const WeightSubscriptionOptions& options);
  ~WeightSubscription();  // stops the receiving thread (it checks every 200 ms)

  bool Matches(const std::string& transport, const std::string& endpoint) const {
    return options_.transport == transport && options_.endpoint == endpoint;
  }
  // Waits up to `timeout` until `version` is staged. FailedPrecondition when a newer version
  // is staged, the receiving error when a version failed since the last error returned (this
  // one, or one that failed while nobody waited), Unavailable when the trainer is gone (the
  // subscription is then dead: create a new one), DeadlineExceeded on timeout.
  // `abandoned` (may be null), asked every 100 ms, ends the wait early with CANCELLED: the
  // BEGIN's caller went away, and its wait would hold the next BEGIN up for `timeout`.
  absl::Status WaitFor(uint64_t version, absl::Duration timeout,
                       const std::function<bool()>& abandoned = nullptr);
  // Runs `fn` on the staged tensors of `version` (every parameter present) with the receiving
  // thread held off, so they cannot change underneath.
  absl::Status WithStaged(
      uint64_t version,
      const std::function<absl::Status(const std::map<std::string, torch::Tensor>&)>& fn);
  // OK while subscribed; the error that ended the subscription otherwise.
  absl::Status health() const;
  int64_t staged_bytes() const;
  int64_t staged_tensors() const;
  // The way the staged version came: "shm", "tcp" or "nccl" (transport::ReceivedVersion::path).
  std::string staged_path() const;

 private:
  WeightSubscription(const WeightSubscriptionOptions& options,
                     std::unique_ptr<transport::WeightReceiver> receiver);
  void ReceiveLoop();
  // The staging buffer for one incoming tensor; checks name and shape against the model.
  transport::StatusOr<void*> Destination(const transport::TensorMeta& meta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(staging_mu_);

  const WeightSubscriptionOptions options_;
  std::unique_ptr<transport::WeightReceiver> receiver_;  // used by the receiving thread only
  std::thread thread_;

  // Held by the receiving thread from a version's first tensor to its end, and by WithStaged.
  absl::Mutex staging_mu_;
  std::map<std::string, torch::Tensor> staging_ ABSL_GUARDED_BY(staging_mu_);

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool have_version_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t staged_version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t staged_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t staged_tensors_ ABSL_GUARDED_BY(mu_) = 0;
  std::string staged_path_ ABSL_GUARDED_BY(mu_);
  absl::Status dead_ ABSL_GUARDED_BY(mu_);            // set when the subscription ended
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);      // the last version that failed to arrive
  int64_t errors_ ABSL_GUARDED_BY(mu_) = 0;           // versions that failed so far
  int64_t errors_reported_ ABSL_GUARDED_BY(mu_) = 0;  // of which WaitFor has returned
};

}  // namespace rlmesh::rollout
