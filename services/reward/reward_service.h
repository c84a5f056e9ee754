// The reward service's domain object: scores a batch of items by data_source with the
// built-in scorers on a worker pool, or forwards them to a custom remote scorer, under one
// deadline per request. Every item gets its own outcome: a scorer that throws, returns an
// error, runs past the deadline or has no scorer for its data_source fails that item only,
// never the batch. Knows nothing of gRPC; ScoreBatch may be called from many threads.
//
// Routing (see docs/reward.md): a request that asks for the reward model is scored by it
// alone. Otherwise, with a remote scorer configured (a custom RewardService, or a reward
// file's Python workers), items go to it when `custom_data_sources` is empty (the remote
// replaces the built-in scorers) or lists their data_source; all other items use the
// built-in scorer of their data_source.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/config/service_settings.h"
#include "services/reward/remote_scorer.h"
#include "services/reward/scorers/scorer.h"
#include "services/reward/scorers/scorer_registry.h"
#include "services/reward/worker_pool.h"

namespace rlmesh::reward {

struct RewardServiceOptions {
  int num_workers = 4;                                 // rlmesh.reward.num_workers
  absl::Duration default_timeout = absl::Seconds(30);  // rlmesh.reward.timeout_s
  ScorerRegistryOptions scorers;                       // rlmesh.reward.format_score
  std::vector<std::string> custom_data_sources;        // sent to the remote; empty = all items
};

// The outcome of one item: `status` OK and `result` set, or an error and its kind.
struct ItemOutcome {
  absl::Status status;
  ScoreResult result;
  ItemErrorKind error_kind = ItemErrorKind::kNone;
};

// Waits for the scoring tasks of a batch. The real one waits until every task is done or the
// deadline passes; tests substitute one that expires the deadline at a chosen point so that
// timeouts are tested without depending on the speed of the machine.
class BatchWaiter {
 public:
  virtual ~BatchWaiter() = default;
  // Called with `mu` held; returns with it held, when *done == total or at `deadline`.
  virtual void Wait(absl::Mutex& mu, const int& done, int total, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
};

// The service's options from its settings (rlmesh.reward.*).
RewardServiceOptions RewardServiceOptionsFrom(const config::RewardSettings& settings);

class RewardService {
 public:
  // `remote` may be null (no custom scorer); a null `waiter` waits on the clock; a null
  // `registry` is the built-in one made from options.scorers. INVALID_ARGUMENT names the
  // option when options are out of range.
  // `reward_model` (may be null) scores the requests that ask for it (ScoreBatch).
  static absl::StatusOr<std::unique_ptr<RewardService>> Create(
      const RewardServiceOptions& options, std::unique_ptr<RemoteScorer> remote,
      std::unique_ptr<BatchWaiter> waiter = nullptr,
      std::unique_ptr<ScorerRegistry> registry = nullptr,
      std::unique_ptr<RemoteScorer> reward_model = nullptr);
  ~RewardService();

  // Scores `items` (ids already validated by the caller) and returns one outcome per item,
  // in order. Items not finished by `deadline` get DEADLINE_EXCEEDED. With
  // `use_reward_model`, every item is scored by the reward model (which must exist), whatever
  // its data source.
  std::vector<ItemOutcome> ScoreBatch(const std::vector<RewardItem>& items, absl::Time deadline,
                                      bool use_reward_model = false);
  bool has_reward_model() const { return reward_model_ != nullptr; }

  // The deadline of a request that asked for `timeout` (zero or negative: the default),
  // starting now and capped by `cap` (e.g. the RPC's own deadline).
  absl::Time DeadlineFor(absl::Duration timeout, absl::Time cap) const;

  // True when `data_source` is scored here or remotely: a bounded label value for metrics.
  bool IsKnownDataSource(const std::string& data_source) const;
  // Every data source IsKnownDataSource accepts, sorted.
  std::vector<std::string> KnownDataSources() const;

  const RewardServiceOptions& options() const { return options_; }

 private:
  struct Batch;

  RewardService(const RewardServiceOptions& options, std::unique_ptr<ScorerRegistry> registry,
                std::unique_ptr<RemoteScorer> remote, std::unique_ptr<BatchWaiter> waiter,
                std::unique_ptr<RemoteScorer> reward_model);

  bool GoesRemote(const std::string& data_source) const;
  static ItemOutcome RunScorer(const Scorer& scorer, const RewardItem& item);
  void ScoreRemotely(RemoteScorer& scorer, const std::vector<RewardItem>& items,
                     const std::vector<size_t>& indices, absl::Time deadline,
                     std::vector<ItemOutcome>& outcomes);

  const RewardServiceOptions options_;
  const std::unique_ptr<ScorerRegistry> registry_;
  const std::unique_ptr<RemoteScorer> remote_;
  const std::unique_ptr<BatchWaiter> waiter_;
  const std::unique_ptr<RemoteScorer> reward_model_;
  const std::set<std::string> custom_sources_;
  // Declared last: destroyed first, so queued tasks finish while the rest still exists.
  WorkerPool pool_;
};

}  // namespace rlmesh::reward
