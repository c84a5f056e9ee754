#include "services/coordinator/coordinator_service.h"

#include "common/status/grpc_status.h"

namespace rlmesh::coordinator {

grpc::Status CoordinatorServiceImpl::GetStatus(grpc::ServerContext*,
                                               const v1::GetCoordinatorStatusRequest*,
                                               v1::GetCoordinatorStatusResponse* response) try {
  *response = coordinator_->Status();
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("CoordinatorService.GetStatus");
}

grpc::Status CoordinatorServiceImpl::Pause(grpc::ServerContext*, const v1::PauseRequest* request,
                                           v1::PauseResponse* response) try {
  coordinator_->Pause(request->reason().empty() ? "paused by request" : request->reason());
  auto status = coordinator_->Status();
  response->set_state(status.state());
  response->set_global_step(status.global_step());
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("CoordinatorService.Pause");
}

grpc::Status CoordinatorServiceImpl::Resume(grpc::ServerContext*, const v1::ResumeRequest*,
                                            v1::ResumeResponse* response) try {
  coordinator_->Resume();
  response->set_state(coordinator_->Status().state());
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("CoordinatorService.Resume");
}

grpc::Status CoordinatorServiceImpl::RegisterReplica(grpc::ServerContext*,
                                                     const v1::RegisterReplicaRequest* request,
                                                     v1::RegisterReplicaResponse* response) try {
  const std::string& address = request->address();
  if (absl::Status checked = RolloutPool::CheckRegistration(address, request->max_num_seqs());
      !checked.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(checked.message()));
  }
  std::map<std::string, std::string> labels(request->labels().begin(), request->labels().end());
  absl::StatusOr<std::string> id = coordinator_->pool().RegisterReplica(
      address, request->replica_id(), request->max_num_seqs(), labels);
  if (!id.ok()) return ToGrpcStatus(id.status());
  response->set_replica_id(*id);
  *response->mutable_target_weight_version() = coordinator_->Status().weight_version();
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("CoordinatorService.RegisterReplica");
}

grpc::Status CoordinatorServiceImpl::UnregisterReplica(grpc::ServerContext*,
                                                       const v1::UnregisterReplicaRequest* request,
                                                       v1::UnregisterReplicaResponse*) try {
  if (request->replica_id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "replica_id: must not be empty");
  }
  return ToGrpcStatus(coordinator_->pool().Unregister(
      request->replica_id(), request->reason().empty() ? "unregistered" : request->reason()));
} catch (...) {
  return StatusFromCurrentException("CoordinatorService.UnregisterReplica");
}

grpc::Status CoordinatorServiceImpl::ListReplicas(grpc::ServerContext*,
                                                  const v1::ListReplicasRequest*,
                                                  v1::ListReplicasResponse* response) try {
  for (const auto& replica : coordinator_->pool().List()) *response->add_replicas() = replica;
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("CoordinatorService.ListReplicas");
}

}  // namespace rlmesh::coordinator
