#include "services/rollout/registration.h"

#include <chrono>

#include "common/rpc/log.h"
#include "common/rpc/rpc_metrics.h"

namespace rlmesh::rollout {

CoordinatorRegistration::CoordinatorRegistration(const RegistrationOptions& options)
    : options_(options),
      stub_(v1::CoordinatorService::NewStub(rpc::CreateChannel(options.coordinator, options.channel))) {}

CoordinatorRegistration::~CoordinatorRegistration() { Stop(); }

void CoordinatorRegistration::Start() { thread_ = std::thread([this] { Loop(); }); }

void CoordinatorRegistration::Loop() {
  int failures = 0;
  bool registered = false;
  while (!stop_.HasBeenNotified()) {
    v1::RegisterReplicaRequest request;
    request.set_address(options_.address);
    request.set_replica_id(assigned_id_.empty() ? options_.replica_id : assigned_id_);
    request.set_max_num_seqs(options_.max_num_seqs);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::RegisterReplicaResponse response;
    grpc::Status status = stub_->RegisterReplica(&context, request, &response);
    absl::Duration wait = options_.heartbeat;
    if (status.ok()) {
      if (!registered) {
        rpc::Log("rollout", "registered with the coordinator at %s as %s (address %s)",
                 options_.coordinator.c_str(), response.replica_id().c_str(),
                 options_.address.c_str());
      }
      registered = true;
      failures = 0;
      assigned_id_ = response.replica_id();
      if (options_.on_registered) options_.on_registered(assigned_id_);
    } else {
      if (status.error_code() == grpc::StatusCode::ALREADY_EXISTS && options_.replica_id.empty() &&
          !assigned_id_.empty()) {
        rpc::Log("rollout", "the coordinator at %s gave %s to another replica; asking for a new id",
                 options_.coordinator.c_str(), assigned_id_.c_str());
        assigned_id_.clear();
        failures = 0;
        continue;
      }
      // Log the first failure and then every tenth, not every retry.
      if (failures++ % 10 == 0) {
        rpc::Log("rollout", "registering with the coordinator at %s failed (%s: %s); retrying",
                 options_.coordinator.c_str(), rpc::StatusCodeName(status.error_code()),
                 status.error_message().c_str());
      }
      registered = false;
      wait = std::min(options_.heartbeat, absl::Milliseconds(200) * (1 << std::min(failures, 5)));
    }
    stop_.WaitForNotificationWithTimeout(wait);
  }
}

void CoordinatorRegistration::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (!thread_.joinable()) return;
  thread_.join();
  if (assigned_id_.empty()) return;
  v1::UnregisterReplicaRequest request;
  request.set_replica_id(assigned_id_);
  request.set_reason("the replica is shutting down");
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::UnregisterReplicaResponse response;
  grpc::Status status = stub_->UnregisterReplica(&context, request, &response);
  rpc::Log("rollout", "left the coordinator's fleet as %s (%s)", assigned_id_.c_str(),
           status.ok() ? "OK" : status.error_message().c_str());
}

}  // namespace rlmesh::rollout
