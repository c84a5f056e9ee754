// Keeps a rollout replica registered with the coordinator (rlmesh.rollout.register_with):
// registers once the replica serves, retrying with backoff while the coordinator is not up,
// re-registers every `heartbeat` (so a restarted coordinator learns the fleet again; for a
// replica it already knows this is a no-op refresh), and unregisters on Stop(). An id the
// coordinator assigned that another live replica holds after a coordinator restart
// (ALREADY_EXISTS) is given up for a new one; a configured id (rlmesh.rollout.replica_id) is
// kept, and asked for again at every heartbeat until its holder is gone. Owns one
// thread; Stop() is idempotent and also runs in the destructor.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/rpc/client.h"
#include "rlmesh/v1/coordinator.grpc.pb.h"

namespace rlmesh::rollout {

struct RegistrationOptions {
  std::string coordinator;  // host:port of the CoordinatorService
  std::string address;      // host:port the coordinator and trainer reach this replica at
  std::string replica_id;   // requested id; empty = assigned by the coordinator
  int32_t max_num_seqs = 1;
  absl::Duration heartbeat = absl::Seconds(5);
  // Called with the id after each registration (GetStatus reports it).
  std::function<void(const std::string&)> on_registered;
  rpc::ChannelOptions channel;
};

class CoordinatorRegistration {
 public:
  explicit CoordinatorRegistration(const RegistrationOptions& options);
  ~CoordinatorRegistration();
  CoordinatorRegistration(const CoordinatorRegistration&) = delete;
  CoordinatorRegistration& operator=(const CoordinatorRegistration&) = delete;

  void Start();
  // Unregisters (best effort, 5 s deadline) and ends the thread.
  void Stop();

 private:
  void Loop();
  const RegistrationOptions options_;
  std::unique_ptr<v1::CoordinatorService::Stub> stub_;
  std::string assigned_id_;  // written and read by the thread, then by Stop() after join
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace rlmesh::rollout
