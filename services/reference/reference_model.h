// The reference policy: a frozen copy of the initial model that returns per-token log-probs
// (and entropies) of given sequences, for the KL loss. Requests are checked (naming the
// field) and run in micro-batches without gradients. Thread-safe: calls are serialized.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/config/service_settings.h"
#include "common/model/causal_lm.h"
#include "rlmesh/v1/reference.pb.h"
#include "rlmesh/v1/rollout.pb.h"
#include "services/trainer/fsdp.h"

namespace rlmesh::reference {

struct ReferenceOptions {
  std::string model_path;           // actor_rollout_ref.model.path
  std::string dtype = "float32";    // rlmesh.dtype
  std::string device = "cpu";       // rlmesh.device
  int64_t micro_batch_size = 16;    // actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu
  int64_t max_token_len = 0;        // token budget of a forward instead (dynamic bsz); 0 = off
  int64_t max_batch_sequences = 0;  // a request with more sequences is rejected; 0 = no limit
  // actor_rollout_ref.ref.fsdp_config.param_offload: the weights stay in host memory as one
  // flat vector per unit (services/trainer/fsdp.h at one rank) and each unit is copied to
  // the device for its forward only.
  bool param_offload = false;
  // actor_rollout_ref.model.use_remove_padding: each micro-batch packed into one row
  // (CausalLmImpl::ForwardPacked); the log-probs equal the padded forward's to rounding.
  bool remove_padding = false;
};

ReferenceOptions ReferenceOptionsFrom(const config::ReferenceSettings& settings);

class ReferenceModel {
 public:
  static absl::StatusOr<std::unique_ptr<ReferenceModel>> Create(const ReferenceOptions& options);

  absl::StatusOr<v1::ComputeLogProbsResponse> ComputeLogProbs(
      const v1::ComputeLogProbsRequest& request);

  // Replaces the frozen policy with the checkpoint folder at `path`; InvalidArgument when its
  // config differs from the current model's (architecture, sizes, vocabulary), the load error
  // (naming the file) when it cannot be read. The old model stays in use on failure.
  absl::StatusOr<v1::WeightVersion> LoadWeights(const std::string& path,
                                                const v1::WeightVersion& version);

  // ReferenceService.UpdateWeights: BEGIN starts a new model of the same config (the current
  // one keeps answering), BEGIN's and DATA's inline tensors are copied into it as they arrive,
  // COMMIT makes it the reference once every parameter has arrived, ABORT drops it. A BEGIN
  // naming a data plane (transport "shm" or "nccl" with the trainer's endpoint) receives the
  // whole version from the trainer's sender before it answers, as a rollout replica's does,
  // then unsubscribes: the reference takes the versions it is asked for, not every one.
  // InvalidArgument for a tensor that is not a parameter or has the wrong shape, or a data
  // plane without an endpoint (the update is dropped); the data plane's error when it cannot
  // be reached (the trainer then sends the version inline); FailedPrecondition for DATA or
  // COMMIT of a version that was not begun, DATA after a pulled BEGIN, or a COMMIT with
  // parameters missing.
  absl::StatusOr<v1::UpdateWeightsResponse> UpdateWeights(const v1::UpdateWeightsRequest& request);
  v1::WeightVersion version();

 private:
  struct Frozen {
    std::shared_ptr<model::CausalLmImpl> model;
    std::shared_ptr<trainer::ShardedParameters> offloaded;  // null without param_offload
  };
  static absl::StatusOr<Frozen> LoadFrozen(const ReferenceOptions& options,
                                           const std::string& path);
  // Gradients off, and with param_offload the weights moved to host-resident units.
  static absl::StatusOr<Frozen> Freeze(const ReferenceOptions& options,
                                       std::shared_ptr<model::CausalLmImpl> model);
  // A version arriving through UpdateWeights, in a model of its own until COMMIT.
  struct Incoming {
    v1::WeightVersion version;
    std::shared_ptr<model::CausalLmImpl> model;
    std::map<std::string, torch::Tensor> parameters;  // the new model's, by name
    std::set<std::string> received;
    int64_t bytes = 0;
    bool pulled = false;  // came over the data plane at BEGIN
  };
  absl::Status Receive(const v1::UpdateWeightsRequest& request, Incoming& incoming);
  // The version of a data-plane BEGIN, from the trainer's sender into `incoming`.
  absl::Status Pull(const v1::UpdateWeightsRequest& request, Incoming& incoming);
  ReferenceModel(const ReferenceOptions& options, Frozen frozen);
  const ReferenceOptions options_;
  absl::Mutex mu_;
  std::shared_ptr<model::CausalLmImpl> model_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<trainer::ShardedParameters> offloaded_ ABSL_GUARDED_BY(mu_);
  v1::WeightVersion version_ ABSL_GUARDED_BY(mu_);
  // Held by UpdateWeights (not by ComputeLogProbs, which goes on with the current model).
  absl::Mutex update_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::optional<Incoming> incoming_ ABSL_GUARDED_BY(update_mu_);
};

}  // namespace rlmesh::reference
