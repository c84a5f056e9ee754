// A verl reward file run by a pool of Python processes: custom_reward_function.path and
// .name, scored by rlmesh.reward.python_workers processes of `python -m rlmesh.reward_worker`
// (proto/python/reward_worker.py), each serving rlmesh.v1.RewardService on its own Unix
// socket in a private folder. Items are queued and each process scores one at a time, so one
// slow or hanging item holds one process only.
//
// Per item: the function's exception is the item's error, with the traceback's last line
// (kind exception); a call still running at the request's deadline (rlmesh.reward.timeout_s)
// is a timeout, and its process is killed and replaced; a process that dies while scoring
// fails that item and is replaced. Create fails, naming the key, when the interpreter, the
// worker module or the reward file cannot be used (the file is loaded before Create returns).
// Thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/config/service_settings.h"
#include "services/reward/remote_scorer.h"

namespace rlmesh::reward {

struct PythonRewardPoolOptions {
  std::string python = "/usr/bin/python3";  // rlmesh.reward.python
  std::string package_dir;                  // holds rlmesh/reward_worker.py: the PYTHONPATH
  std::string reward_file;                  // custom_reward_function.path
  std::string function = "compute_score";   // custom_reward_function.name
  // custom_reward_function.reward_kwargs, a JSON object: keyword arguments added to every call.
  // Create fails, naming the key, when the function cannot take them.
  std::string kwargs = "{}";
  int workers = 4;  // rlmesh.reward.python_workers
  // How long a process may take to load the reward file (its imports included).
  absl::Duration start_timeout = absl::Minutes(2);
  std::function<void()> on_replaced;  // called each time a process is replaced
};

// What rlmesh-reward starts for the reward service's settings (custom_reward_function and
// rlmesh.reward.python*); package_dir and on_replaced are the caller's.
PythonRewardPoolOptions PythonRewardPoolOptionsFrom(const config::RewardSettings& settings);

// The folder holding the rlmesh Python package beside the binary `exe`: <bin>/../python in
// the build tree, <bin>/../lib/rlmesh/python where installed (the image). NOT_FOUND naming
// both when neither has rlmesh/reward_worker.py.
absl::StatusOr<std::string> FindPythonPackage(const std::string& exe);

class PythonRewardPool : public RemoteScorer {
 public:
  static absl::StatusOr<std::unique_ptr<PythonRewardPool>> Create(
      const PythonRewardPoolOptions& options);
  ~PythonRewardPool() override;
  PythonRewardPool(const PythonRewardPool&) = delete;
  PythonRewardPool& operator=(const PythonRewardPool&) = delete;

  // One entry per item, in order; never fails as a whole. Items not finished by `deadline`
  // get DEADLINE_EXCEEDED.
  absl::StatusOr<std::vector<absl::StatusOr<ScoreResult>>> ScoreBatch(
      const std::vector<RewardItem>& items, absl::Time deadline) override;
  std::string address() const override { return options_.reward_file; }
  std::string where() const override;
  // DEADLINE_EXCEEDED: timeout; INVALID_ARGUMENT: invalid; anything else: exception.
  ItemErrorKind KindOf(const absl::Status& item_error) const override;

  // Processes replaced so far (after a timeout or a death).
  int64_t replaced() const;
  // Processes in the pool (rlmesh.reward.python_workers).
  int size() const { return static_cast<int>(slots_.size()); }

 private:
  struct Worker;
  struct Slot;
  struct Batch;
  struct Job;

  PythonRewardPool(const PythonRewardPoolOptions& options, std::string folder);
  // Starts process `index` on the calling thread, which it dies with (PR_SET_PDEATHSIG):
  // the creating thread or the dispatcher, both alive as long as the pool.
  absl::StatusOr<std::unique_ptr<Worker>> SpawnWorker(int index) const;
  // Waits until the process serves, or says why it will not.
  absl::Status AwaitReady(Worker& worker) const;
  absl::StatusOr<std::unique_ptr<Worker>> StartWorker(int index) const;  // both
  void Dispatch(int index);
  // Scores the job's item on process `index`; after a timeout or a death, says in
  // `replace_why` why the process must be replaced.
  absl::StatusOr<ScoreResult> ScoreOn(int index, const Job& job, std::string* replace_why);
  // Kills process `index` (if any) and starts another; `why` ("" = quietly) goes to the log.
  void Replace(int index, const std::string& why);

  const PythonRewardPoolOptions options_;
  const std::string folder_;  // the sockets' private folder, removed on destruction
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::thread> dispatchers_;

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);  // FIFO
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t replaced_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rlmesh::reward
