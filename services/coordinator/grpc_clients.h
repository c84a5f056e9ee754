// gRPC implementations of the coordinator's service clients (clients.h). Idempotent calls
// (status, scoring, log-probs, publishing a version) are retried with backoff while the peer
// is UNAVAILABLE; training steps are not, so an update is never applied twice.
#pragma once

#include <memory>
#include <string>

#include "common/rpc/client.h"
#include "services/coordinator/clients.h"

namespace rlmesh::coordinator {

struct GrpcClientOptions {
  double call_timeout_seconds = 600;  // deadline of one call
  // Deadline of a replica's GetStatus, the pool's heartbeat probe (rlmesh.rpc.keepalive_timeout_s).
  double probe_timeout_seconds = 5;
  // Deadline of one Score attempt: rlmesh.reward.timeout_s, the reward service's own budget,
  // plus the probe timeout for its answer to arrive.
  double score_timeout_seconds = 35;
  rpc::RetryPolicy retry;             // for idempotent calls
  rpc::ChannelOptions channel;        // of every channel (TLS included)
};

std::unique_ptr<RolloutClient> NewGrpcRolloutClient(const std::string& address,
                                                    const GrpcClientOptions& options);
std::unique_ptr<RewardClient> NewGrpcRewardClient(const std::string& address,
                                                  const GrpcClientOptions& options);
std::unique_ptr<ReferenceClient> NewGrpcReferenceClient(const std::string& address,
                                                        const GrpcClientOptions& options);
std::unique_ptr<TrainerClient> NewGrpcTrainerClient(const std::string& address,
                                                    const GrpcClientOptions& options);

}  // namespace rlmesh::coordinator
