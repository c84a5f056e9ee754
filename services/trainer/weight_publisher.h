// Sends a weight version to rollout replicas through RolloutService.UpdateWeights with the
// "inline" transport: BEGIN, DATA calls of at most `bucket_bytes` of tensors each, COMMIT —
// one control round-trip per bucket rather than per tensor, all replicas in parallel. A
// replica that fails or does not answer within the timeout is reported, not retried; the
// coordinator decides what to do with it. Thread-safe.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/rpc/client.h"
#include "rlmesh/v1/trainer.pb.h"

namespace rlmesh::trainer {

struct PublishOptions {
  int64_t bucket_bytes = 64 << 20;   // tensor bytes per DATA call
  double timeout_seconds = 300;      // per replica, for the whole transfer
  rpc::ChannelOptions channel;        // of the channel to each replica (TLS included)
};

// Named tensors of one version (HF parameter names).
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Publishes `tensors` as `version` to every target; one result per target, in order.
v1::PublishWeightsResponse PublishWeights(const NamedTensors& tensors,
                                          const v1::WeightVersion& version,
                                          const google::protobuf::RepeatedPtrField<v1::WeightTarget>& targets,
                                          const PublishOptions& options);

}  // namespace rlmesh::trainer
