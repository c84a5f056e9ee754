// A rollout replica: the policy, its generation engine (driven by a thread of its own), and
// the staging area of a weight update. Generate() turns one GenerateRequest into engine
// requests and streams each finished sample to a callback; weight updates arrive in
// BEGIN / DATA / COMMIT calls and are applied between two decode steps. BEGIN either takes
// inline tensors (DATA calls follow) or names a data-plane transport and endpoint: the replica
// then subscribes to the trainer there (weight_subscription.h), waits until the version is
// staged, and COMMIT applies the staged tensors. No gRPC inside: the service
// (rollout_service.h) validates requests and maps statuses. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/config/service_settings.h"
#include "common/generation/generation_engine.h"
#include "common/model/causal_lm.h"
#include "common/transport/transport.h"
#include "rlmesh/v1/rollout.pb.h"
#include "services/rollout/tensor_codec.h"
#include "services/rollout/weight_subscription.h"

namespace rlmesh::rollout {

struct ReplicaOptions {
  std::string model_path;
  std::string dtype = "float32";
  std::string device = "cpu";
  int64_t max_num_seqs = 64;              // actor_rollout_ref.rollout.max_num_seqs, at most
  int64_t max_model_len = 0;              // prompt + response tokens per slot; 0 = model's limit
  int64_t max_num_batched_tokens = 8192;  // tokens one engine step processes
  bool enable_chunked_prefill = true;
  bool free_cache_engine = false;  // release the KV cache while idle
  // Bytes the weights and the KV cache may take (gpu_memory_utilization x the device's
  // memory); the slots are max_num_seqs or as many as fit, whichever is fewer. 0 = no limit.
  double memory_budget_bytes = 0;
  // What running sequences do when new weights arrive mid-generation (GenerationEngineOptions).
  bool recompute_kv_on_update = false;
  int64_t default_max_new_tokens = 512;  // data.max_response_length
  // This replica's node, against which a trainer's same-node offer is matched
  // (transport::ChooseOffer); "" = this machine's transport::NodeId(). Tests set another to
  // stand for a replica on another node.
  std::string node_id;
};

// The replica's options from its settings; `memory_capacity_bytes` is the memory its
// gpu_memory_utilization is a fraction of (0 = unknown: no limit).
ReplicaOptions ReplicaOptionsFrom(const config::RolloutSettings& settings,
                                  double memory_capacity_bytes);

class Replica {
 public:
  static absl::StatusOr<std::unique_ptr<Replica>> Create(const ReplicaOptions& options);
  ~Replica();

  using SampleFn = std::function<void(v1::GenerateResponse)>;
  // Submits every prompt's n samples; `on_sample` is called (from the engine thread) once per
  // finished sample. Returns the number of samples that will be delivered, or the first
  // error (InvalidArgument naming the field; nothing of the request stays queued then).
  absl::StatusOr<int64_t> Submit(const v1::GenerateRequest& request, SampleFn on_sample);
  // Aborts the engine requests of a Generate call; returns its samples not delivered yet
  // (0 for an unknown or finished call).
  int64_t Abort(const std::string& request_id);
  // Abort of every open call; `calls`, when given, gets how many had samples to abort.
  int64_t AbortAll(int64_t* calls = nullptr);
  // Forgets a finished Generate call's engine request ids.
  void Forget(const std::string& request_id);

  // `abandoned` (may be null) says whether the caller has gone: a BEGIN waiting for a version
  // over the data plane then stops waiting (CANCELLED), so it does not hold the next BEGIN up
  // until its timeout_seconds.
  absl::StatusOr<v1::UpdateWeightsResponse> UpdateWeights(
      const v1::UpdateWeightsRequest& request, const std::function<bool()>& abandoned = nullptr);

  v1::GetRolloutStatusResponse Status() const;
  generation::EngineStats EngineStats() const { return engine_->Stats(); }
  // KV-cache slots: sequences this replica decodes at once (what it registers as capacity).
  int64_t slots() const { return engine_->options().max_num_seqs; }
  v1::WeightVersion weight_version() const;
  // How the staged version's bytes came: "inline" (gRPC), "shm", "tcp" or "nccl"; "" when none
  // is staged. A COMMIT applies that version.
  std::string staged_path() const;
  int64_t vocab_size() const { return vocab_size_; }
  // Tokens of one sequence, prompt and response (the engine's KV-cache slot length).
  int64_t max_model_len() const { return engine_->options().max_model_len; }
  const ReplicaOptions& options() const { return options_; }
  // GetModelInfo's model part (common/model/model_info.h) with this replica's weight version
  // and dtype; the folder's files are read on the first call only.
  absl::StatusOr<v1::GetModelInfoResponse> ModelInfo() const;
  // Stops the engine: queued and running samples end with FINISH_REASON_ABORT.
  void Shutdown();

 private:
  Replica(const ReplicaOptions& options, std::shared_ptr<model::CausalLmImpl> model,
          std::unique_ptr<generation::GenerationEngine> engine);

  struct Staged {
    v1::WeightVersion version;
    int32_t expected_tensors = 0;
    int64_t bytes = 0;
    std::map<std::string, torch::Tensor> tensors;
    bool pulled = false;          // staged by the subscription, not in `tensors`
    std::string path = "inline";  // how its bytes came ("inline", "shm", "tcp", "nccl", ...)
    TensorAssembler parts;        // inline tensors that come in parts
  };
  // BEGIN with a data-plane transport: subscribe (or reuse the subscription) and wait for the
  // version to be staged.
  absl::StatusOr<v1::UpdateWeightsResponse> BeginPull(const v1::UpdateWeightsRequest& request,
                                                      const std::function<bool()>& abandoned)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status StageTensors(const v1::UpdateWeightsRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ReplicaOptions options_;
  const int64_t vocab_size_;
  std::vector<int64_t> eos_ids_;
  std::map<std::string, std::vector<int64_t>> param_shapes_;
  torch::Dtype param_dtype_ = torch::kFloat32;  // every parameter's; weights must arrive in it
  std::unique_ptr<generation::GenerationEngine> engine_;
  std::thread serve_thread_;

  mutable absl::Mutex mu_;
  v1::WeightVersion version_ ABSL_GUARDED_BY(mu_);
  std::optional<Staged> staged_ ABSL_GUARDED_BY(mu_);
  // Serializes BeginPull calls, so two of them never create two subscriptions.
  absl::Mutex pull_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::shared_ptr<WeightSubscription> subscription_ ABSL_GUARDED_BY(mu_);
  // Which of the trainer's offers BEGIN takes (a same-node one that failed here, no more).
  transport::OfferChoice offers_ ABSL_GUARDED_BY(pull_mu_);
  mutable absl::Mutex info_mu_;
  mutable std::optional<absl::StatusOr<v1::GetModelInfoResponse>> info_ ABSL_GUARDED_BY(info_mu_);
  // Engine request ids of each Generate call, for Abort.
  std::map<std::string, std::vector<std::string>> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rlmesh::rollout
