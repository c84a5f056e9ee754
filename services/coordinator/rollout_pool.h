// The set of rollout replicas and the fan-out of one step's generation over them.
//
// Replicas join (static addresses from config, or RegisterReplica at run time) in state
// SYNCING; the pool brings each to the current weight version through `bring_up` (the
// coordinator's call to TrainerService.PublishWeights) before it gets work. Generate() spreads
// prompts over READY replicas, least loaded first, keeps the books per (prompt, sample index),
// and re-dispatches every sample a failed replica did not return, so each prompt ends with
// exactly n samples, each produced once, at the expected weight version (or newer, with
// partial rollouts: RolloutPoolOptions::newer_weights_allowed). A replica whose call
// fails, or that does not answer a heartbeat (a GetStatus probe every `heartbeat`, run by a
// thread of the pool), is LOST: it gets no work. A LOST replica that answers a heartbeat goes
// back to SYNCING, and the running step (or the next) re-syncs and re-admits it; one that
// stays unanswering for `evict_after` leaves the pool. Without a heartbeat thread, LOST
// replicas are probed at each step boundary instead. Thread-safe.
#pragma once

#include <cstdint>
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
#include "rlmesh/v1/coordinator.pb.h"
#include "services/coordinator/clients.h"

namespace rlmesh::coordinator {

struct PromptToGenerate {
  std::string prompt_id;           // unique within the step; names the GRPO group
  std::vector<int32_t> token_ids;  // prompt tokens, template applied
};

struct GeneratedGroup {
  std::string prompt_id;
  std::vector<v1::Sample> samples;       // samples[i] is sample index i; size n
  std::vector<std::string> replica_ids;  // replica that produced samples[i]
};

struct RolloutPoolOptions {
  // How long Generate waits for a READY replica when none is left, or for room while every
  // replica refuses for being full, before failing the step (rlmesh.rollout.ready_wait_s).
  absl::Duration no_replica_timeout = absl::Minutes(5);
  // A sample is dispatched at most this many times before the step fails.
  int max_dispatches_per_sample = 4;
  // Largest prompts x n of one Generate call (the replicas' rlmesh.rollout.max_queue); a
  // replica's share of a step is split into calls of at most this many samples. 0 = no limit.
  int64_t max_samples_per_request = 0;
  // Interval of the heartbeat thread's probes; zero = no thread (LOST replicas are probed by
  // SyncReplicas at step boundaries).
  absl::Duration heartbeat = absl::ZeroDuration();
  // A replica LOST this long (unanswering the whole time) is removed.
  absl::Duration evict_after = absl::Minutes(5);
  // Partial rollouts (rlmesh.partial_rollout): a sample may start from the weights expected at
  // dispatch or newer ones and finish on newer weights still (a publish while it ran). False:
  // every token must come from the version expected at dispatch.
  bool newer_weights_allowed = false;
};

// Accounting of the pool since start, for status and /metrics.
struct PoolCounters {
  int64_t samples_received = 0;      // samples accepted into a group
  int64_t samples_redispatched = 0;  // samples sent again after their replica failed
  int64_t samples_rejected = 0;      // duplicates, wrong index, wrong version, aborted
  int64_t replicas_lost = 0;         // replicas that went from serving to LOST
  int64_t replicas_evicted = 0;      // LOST replicas removed after evict_after
  int64_t requests_refused = 0;      // Generate calls a full replica refused (RESOURCE_EXHAUSTED)
};

class RolloutPool {
 public:
  // Brings a replica to the current version; returns the version it now has.
  using BringUpFn = std::function<absl::StatusOr<v1::WeightVersion>(const std::string& replica_id,
                                                                    const std::string& address)>;

  RolloutPool(const RolloutPoolOptions& options, RolloutClientFactory factory);
  // Stops the heartbeat thread.
  ~RolloutPool();
  RolloutPool(const RolloutPool&) = delete;
  RolloutPool& operator=(const RolloutPool&) = delete;

  // Starts the heartbeat thread when options.heartbeat > 0 (once; later calls do nothing).
  void StartHeartbeat();
  // One heartbeat pass, as the thread runs it: probes every READY and LOST replica at once.
  // A READY one that fails becomes LOST; a LOST one that answers becomes SYNCING; a LOST one
  // unanswering since evict_after ago is removed.
  void Heartbeat();

  // What RegisterReplica checks before Register: `address` is host:port with a port in
  // 1..65535, and `max_num_seqs` is >= 0 (0 = not said). InvalidArgument naming the field.
  static absl::Status CheckRegistration(const std::string& address, int32_t max_num_seqs);

  // Adds a replica in state SYNCING, or refreshes one already known at the same address (a
  // heartbeat: state kept; a LOST one goes back to SYNCING); returns its id (`replica_id`, or
  // "rollout-K").
  std::string Register(const std::string& address, const std::string& replica_id,
                       int32_t max_num_seqs, const std::map<std::string, std::string>& labels);
  // What RegisterReplica does: Register, except that an id a live replica holds at another
  // address stays its own while that replica still answers under it: ALREADY_EXISTS naming
  // both addresses. Otherwise two replicas given one rlmesh.rollout.replica_id would take it
  // from each other at every heartbeat, each time re-synced, and a stray registration would
  // drop a serving replica. A holder that does not answer, or answers under another id (a
  // restarted pod's old address, gone or someone else's now), gives the id up.
  absl::StatusOr<std::string> RegisterReplica(const std::string& address,
                                              const std::string& replica_id, int32_t max_num_seqs,
                                              const std::map<std::string, std::string>& labels);
  // Removes a replica. NOT_FOUND for an unknown id.
  absl::Status Unregister(const std::string& replica_id, const std::string& reason);

  // Sets the weight version every sample must come from, and the bring-up function.
  void SetCurrentVersion(const v1::WeightVersion& version);
  void SetBringUp(BringUpFn bring_up);

  // Step boundary: probes LOST replicas (back to SYNCING when reachable) and brings every
  // SYNCING replica to the current version. Errors of single replicas are logged, not returned.
  void SyncReplicas();

  // Generates `params.n` samples for every prompt. Fails only when no replica can serve for
  // `no_replica_timeout`, or a sample failed `max_dispatches_per_sample` times.
  absl::StatusOr<std::vector<GeneratedGroup>> Generate(const std::vector<PromptToGenerate>& prompts,
                                                       const v1::SamplingParams& params,
                                                       const std::string& request_tag);

  // Each READY replica's engine compute seconds since its start (GetStatus); replicas that do
  // not answer are left out.
  std::map<std::string, double> ComputeSecondsByReplica() const;
  // READY replicas as publish targets (the coordinator sends every new version to them).
  std::vector<v1::WeightTarget> ReadyTargets() const;
  // The ids of LOST replicas (PublishWeightsRequest.suspended).
  std::vector<std::string> LostIds() const;
  // Records the outcome of a publish to the READY replicas: ok ones move to `version`,
  // failed ones become LOST.
  void ApplyPublishResults(const v1::PublishWeightsResponse& response);

  std::vector<v1::ReplicaInfo> List() const;
  PoolCounters counters() const;

 private:
  struct Replica {
    v1::ReplicaInfo info;
    std::shared_ptr<RolloutClient> client;
    absl::Time lost_since = absl::InfiniteFuture();  // when it last became LOST
  };
  struct Unit;  // a run of consecutive missing sample indices of one prompt

  void SyncReplicas(bool probe_lost);
  void MarkLost(const std::string& replica_id, const std::string& why);
  bool HasReadyReplica() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DemoteBehindLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RolloutPoolOptions options_;
  const RolloutClientFactory factory_;

  mutable absl::Mutex mu_;
  std::map<std::string, Replica> replicas_ ABSL_GUARDED_BY(mu_);
  int64_t next_replica_number_ ABSL_GUARDED_BY(mu_) = 0;
  v1::WeightVersion current_version_ ABSL_GUARDED_BY(mu_);
  BringUpFn bring_up_ ABSL_GUARDED_BY(mu_);
  PoolCounters counters_ ABSL_GUARDED_BY(mu_);

  absl::Mutex heartbeat_mu_;
  bool stopping_ ABSL_GUARDED_BY(heartbeat_mu_) = false;
  std::thread heartbeat_thread_;
};

}  // namespace rlmesh::coordinator
