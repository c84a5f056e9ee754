#include "services/coordinator/coordinator_service.h"

#include "common/status/grpc_status.h"

namespace rlmesh::coordinator {

grpc::Status CoordinatorServiceImpl::GetStatus(grpc::ServerContext*,
                                               const v1::GetCoordinatorStatusRequest*,
                                               v1::GetCoordinatorStatusResponse* response) {
  *response = coordinator_->Status();
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::Pause(grpc::ServerContext*, const v1::PauseRequest* request,
                                           v1::PauseResponse* response) {
  coordinator_->Pause(request->reason().empty() ? "paused by request" : request->reason());
  auto status = coordinator_->Status();
  response->set_state(status.state());
  response->set_global_step(status.global_step());
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::Resume(grpc::ServerContext*, const v1::ResumeRequest*,
                                            v1::ResumeResponse* response) {
  coordinator_->Resume();
  response->set_state(coordinator_->Status().state());
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::RegisterReplica(grpc::ServerContext*,
                                                     const v1::RegisterReplicaRequest* request,
                                                     v1::RegisterReplicaResponse* response) {
  const std::string& address = request->address();
  if (address.empty() || address.find(':') == std::string::npos) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "address: expected \"host:port\", got \"" + address + "\"");
  }
  std::map<std::string, std::string> labels(request->labels().begin(), request->labels().end());
  response->set_replica_id(coordinator_->pool().Register(address, request->replica_id(),
                                                         request->max_num_seqs(), labels));
  *response->mutable_target_weight_version() = coordinator_->Status().weight_version();
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::UnregisterReplica(grpc::ServerContext*,
                                                       const v1::UnregisterReplicaRequest* request,
                                                       v1::UnregisterReplicaResponse*) {
  if (request->replica_id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "replica_id: must not be empty");
  }
  return ToGrpcStatus(coordinator_->pool().Unregister(
      request->replica_id(), request->reason().empty() ? "unregistered" : request->reason()));
}

grpc::Status CoordinatorServiceImpl::ListReplicas(grpc::ServerContext*,
                                                  const v1::ListReplicasRequest*,
                                                  v1::ListReplicasResponse* response) {
  for (const auto& replica : coordinator_->pool().List()) *response->add_replicas() = replica;
  return grpc::Status::OK;
}

}  // namespace rlmesh::coordinator
