// CoordinatorService over gRPC: validates each request, calls the Coordinator, maps statuses.
#pragma once

#include "rlmesh/v1/coordinator.grpc.pb.h"
#include "services/coordinator/coordinator.h"

namespace rlmesh::coordinator {

class CoordinatorServiceImpl final : public v1::CoordinatorService::Service {
 public:
  explicit CoordinatorServiceImpl(Coordinator* coordinator) : coordinator_(coordinator) {}

  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetCoordinatorStatusRequest*,
                         v1::GetCoordinatorStatusResponse* response) override;
  grpc::Status Pause(grpc::ServerContext*, const v1::PauseRequest* request,
                     v1::PauseResponse* response) override;
  grpc::Status Resume(grpc::ServerContext*, const v1::ResumeRequest*,
                      v1::ResumeResponse* response) override;
  grpc::Status RegisterReplica(grpc::ServerContext*, const v1::RegisterReplicaRequest* request,
                               v1::RegisterReplicaResponse* response) override;
  grpc::Status UnregisterReplica(grpc::ServerContext*, const v1::UnregisterReplicaRequest* request,
                                 v1::UnregisterReplicaResponse* response) override;
  grpc::Status ListReplicas(grpc::ServerContext*, const v1::ListReplicasRequest*,
                            v1::ListReplicasResponse* response) override;

 private:
  Coordinator* coordinator_;
};

}  // namespace rlmesh::coordinator
