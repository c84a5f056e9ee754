#include "services/reward/python_pool.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/process/subprocess.h"
#include "common/rpc/log.h"
#include "common/status/status_macros.h"
#include "rlmesh/v1/reward.grpc.pb.h"
#include "services/reward/proto_convert.h"

namespace rlmesh::reward {
namespace {

namespace fs = std::filesystem;

// The lines rlmesh.reward_worker prints (proto/python/reward_worker.py).
constexpr char kReady[] = "rlmesh-reward-worker: ready";
constexpr char kError[] = "rlmesh-reward-worker: error: ";
constexpr char kWorkerModule[] = "rlmesh/reward_worker.py";

bool HasWorker(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kWorkerModule, ec);
}

}  // namespace

absl::StatusOr<std::string> FindPythonPackage(const std::string& exe) {
  std::error_code ec;
  const fs::path bin = fs::weakly_canonical(fs::path(exe), ec).parent_path();
  const fs::path candidates[] = {bin.parent_path() / "python",
                                 bin.parent_path() / "lib" / "rlmesh" / "python"};
  for (const fs::path& dir : candidates) {
    if (HasWorker(dir)) return dir.string();
  }
  return absl::NotFoundError(
      absl::StrCat("custom_reward_function.path needs the Python package rlmesh (", kWorkerModule,
                   ") in ", candidates[0].string(), " (the build: make build) or ",
                   candidates[1].string(), " (installed)"));
}

struct PythonRewardPool::Worker {
  std::string socket;
  std::unique_ptr<process::Subprocess> process;
  std::unique_ptr<v1::RewardService::Stub> stub;
};

// One process and the dispatcher thread that owns it. `mu` guards the pointer only: the
// dispatcher swaps it when it replaces the process, the destructor kills through it.
struct PythonRewardPool::Slot {
  absl::Mutex mu;
  std::unique_ptr<Worker> worker ABSL_GUARDED_BY(mu);
};

// The items of one ScoreBatch call. Jobs hold it by shared_ptr: a job finishing after its
// batch timed out writes into a live object that nobody reads any more.
struct PythonRewardPool::Batch {
  absl::Mutex mu;
  std::vector<std::optional<absl::StatusOr<ScoreResult>>> results ABSL_GUARDED_BY(mu);
  int done ABSL_GUARDED_BY(mu) = 0;

  void Finish(size_t index, absl::StatusOr<ScoreResult> result) {
    absl::MutexLock lock(&mu);
    results[index] = std::move(result);
    ++done;
  }
};

struct PythonRewardPool::Job {
  std::shared_ptr<Batch> batch;
  size_t index = 0;
  RewardItem item;
  absl::Time deadline;
};

absl::StatusOr<std::unique_ptr<PythonRewardPool>> PythonRewardPool::Create(
    const PythonRewardPoolOptions& options) {
  if (options.workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("config key rlmesh.reward.python_workers: expected an integer >= 1, got ",
                     options.workers));
  }
  if (::access(options.python.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("config key rlmesh.reward.python: ", options.python,
                     " is not an executable file (Debian: apt-get install python3 python3-grpcio "
                     "python3-protobuf)"));
  }
  if (!HasWorker(options.package_dir)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the Python package rlmesh is not in ", options.package_dir, " (no ", kWorkerModule, ")"));
  }
  std::string folder = (fs::temp_directory_path() / "rlmesh-reward-XXXXXX").string();
  if (::mkdtemp(folder.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot make a folder for the Python workers' "
                     "sockets in ",
                     fs::temp_directory_path().string()));
  }
  auto pool = std::unique_ptr<PythonRewardPool>(new PythonRewardPool(options, folder));
  // Every process is started on this thread (a child dies with the thread that forked it:
  // PR_SET_PDEATHSIG), then waited for; they load the file in parallel.
  std::vector<absl::StatusOr<std::unique_ptr<Worker>>> started;
  for (int i = 0; i < options.workers; ++i) started.push_back(pool->SpawnWorker(i));
  for (int i = 0; i < options.workers; ++i) {
    if (started[i].ok()) {
      if (absl::Status ready = pool->AwaitReady(**started[i]); !ready.ok()) started[i] = ready;
    }
  }
  for (int i = 0; i < options.workers; ++i) {
    if (!started[i].ok()) return started[i].status();
    auto slot = std::make_unique<Slot>();
    absl::MutexLock lock(&slot->mu);
    slot->worker = *std::move(started[i]);
    pool->slots_.push_back(std::move(slot));
  }
  for (int i = 0; i < options.workers; ++i) {
    pool->dispatchers_.emplace_back([p = pool.get(), i] { p->Dispatch(i); });
  }
  return pool;
}

PythonRewardPool::PythonRewardPool(const PythonRewardPoolOptions& options, std::string folder)
    : options_(options), folder_(std::move(folder)) {}

PythonRewardPool::~PythonRewardPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  // A dispatcher may be waiting on a call: killing its process ends the call at once.
  for (auto& slot : slots_) {
    absl::MutexLock lock(&slot->mu);
    if (slot->worker != nullptr) slot->worker->process->Signal(SIGKILL);
  }
  for (std::thread& t : dispatchers_) t.join();
  slots_.clear();
  std::error_code ec;
  fs::remove_all(folder_, ec);
}

PythonRewardPoolOptions PythonRewardPoolOptionsFrom(const config::RewardSettings& settings) {
  PythonRewardPoolOptions options;
  options.python = settings.python;
  options.reward_file = settings.reward_file;
  options.function = settings.reward_function;
  options.kwargs = settings.reward_kwargs;
  options.workers = static_cast<int>(settings.python_workers);
  return options;
}

std::string PythonRewardPool::where() const {
  return absl::StrCat("custom_reward_function ", options_.function, " of ", options_.reward_file);
}

ItemErrorKind PythonRewardPool::KindOf(const absl::Status& item_error) const {
  return KindOfLocalError(item_error);
}

int64_t PythonRewardPool::replaced() const {
  absl::MutexLock lock(&mu_);
  return replaced_;
}

absl::StatusOr<std::unique_ptr<PythonRewardPool::Worker>> PythonRewardPool::StartWorker(
    int index) const {
  ASSIGN_OR_RETURN(std::unique_ptr<Worker> worker, SpawnWorker(index));
  RETURN_IF_ERROR(AwaitReady(*worker));
  return worker;
}

absl::StatusOr<std::unique_ptr<PythonRewardPool::Worker>> PythonRewardPool::SpawnWorker(
    int index) const {
  const std::string socket = absl::StrCat(folder_, "/worker", index, ".sock");
  ::unlink(socket.c_str());
  process::SubprocessOptions spawn;
  spawn.argv = {options_.python,
                "-u",
                "-m",
                "rlmesh.reward_worker",
                "--reward-file",
                options_.reward_file,
                "--reward-name",
                options_.function,
                "--reward-kwargs",
                options_.kwargs,
                "--listen",
                absl::StrCat("unix:", socket)};
  const char* inherited = std::getenv("PYTHONPATH");
  spawn.extra_env = {absl::StrCat("PYTHONPATH", "=", options_.package_dir,
                                  inherited != nullptr && *inherited != '\0' ? ":" : "",
                                  inherited != nullptr ? inherited : "")};
  // What the reward file prints reaches this service's log, marked with the process.
  spawn.echo = true;
  spawn.echo_prefix = absl::StrCat("reward-python[", index, "]: ");
  auto worker = std::make_unique<Worker>();
  worker->socket = socket;
  ASSIGN_OR_RETURN(worker->process, process::Subprocess::Start(spawn));
  return worker;
}

absl::Status PythonRewardPool::AwaitReady(Worker& worker) const {
  absl::StatusOr<std::string> line = worker.process->WaitForLine(
      [](const std::string& l) {
        return absl::StartsWith(l, kReady) || absl::StartsWith(l, kError);
      },
      options_.start_timeout);
  if (line.ok() && absl::StartsWith(*line, kError)) {
    return absl::FailedPreconditionError(line->substr(sizeof(kError) - 1));
  }
  if (!line.ok()) {
    // It ended (a missing module, a crash) or hung while loading: its last lines say why.
    const std::vector<std::string> last = worker.process->LastLines(3);
    const std::optional<int> status = worker.process->ExitStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "the Python worker for custom_reward_function.path=", options_.reward_file, " ",
        status.has_value()
            ? process::Subprocess::DescribeWaitStatus(*status)
            : absl::StrCat("was not ready after ", absl::FormatDuration(options_.start_timeout)),
        last.empty() ? "" : absl::StrCat(": ", absl::StrJoin(last, " | ")),
        " (rlmesh.reward.python=", options_.python,
        " needs the grpcio and protobuf modules: Debian python3-grpcio, python3-protobuf)"));
  }
  worker.stub = v1::RewardService::NewStub(grpc::CreateChannel(absl::StrCat("unix:", worker.socket),
                                                               grpc::InsecureChannelCredentials()));
  return absl::OkStatus();
}

void PythonRewardPool::Dispatch(int index) {
  while (true) {
    std::unique_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PythonRewardPool* p) { return p->stopping_ || !p->queue_.empty(); }, this));
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    if (absl::Now() >= job->deadline) {
      job->batch->Finish(job->index,
                         absl::DeadlineExceededError(
                             "timeout: not started by the request deadline (every Python "
                             "worker was busy; rlmesh.reward.python_workers sets how many)"));
      continue;
    }
    // The item's outcome first, then the replacement: nobody waits for the new process.
    std::string replace_why;
    job->batch->Finish(job->index, ScoreOn(index, *job, &replace_why));
    if (!replace_why.empty()) Replace(index, replace_why);
  }
}

absl::StatusOr<ScoreResult> PythonRewardPool::ScoreOn(int index, const Job& job,
                                                      std::string* replace_why) {
  Slot& slot = *slots_[index];
  Worker* worker;
  {
    absl::MutexLock lock(&slot.mu);
    worker = slot.worker.get();
  }
  if (worker == nullptr) {
    // An earlier replacement failed: try again, so that a passing failure does not last.
    Replace(index, "");
    absl::MutexLock lock(&slot.mu);
    worker = slot.worker.get();
    if (worker == nullptr) {
      return absl::UnavailableError("no Python worker: it could not be restarted (see the log)");
    }
  }
  v1::ScoreRequest request;
  ToProto(job.item, request.add_items());
  request.set_timeout_seconds(std::max(0.0, absl::ToDoubleSeconds(job.deadline - absl::Now())));
  v1::ScoreResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(job.deadline));
  const grpc::Status status = worker->stub->Score(&context, request, &response);
  if (status.ok() && response.results_size() == 1) {
    const v1::RewardResult& r = response.results(0);
    if (!r.error().empty()) {
      return r.error_kind() == "invalid" ? absl::InvalidArgumentError(r.error())
                                         : absl::InternalError(r.error());
    }
    ScoreResult result;
    result.score = r.score();
    result.extra.insert(r.extra_values().begin(), r.extra_values().end());
    return result;
  }
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    *replace_why = "its call ran past the deadline";
    return absl::DeadlineExceededError(absl::StrCat(
        "timeout: ", options_.function,
        " did not return by the request deadline (rlmesh.reward.timeout_s); its Python worker "
        "was killed and replaced"));
  }
  // A process that died closed its socket a moment before it can be reaped: wait for that.
  const std::optional<int> ended = worker->process->Wait(absl::Seconds(2));
  const std::string why =
      ended.has_value()
          ? absl::StrCat("the Python worker ", process::Subprocess::DescribeWaitStatus(*ended),
                         " while scoring it")
          : absl::StrCat("the Python worker failed the call: ", status.error_message());
  *replace_why = why;
  return absl::InternalError(why);
}

void PythonRewardPool::Replace(int index, const std::string& why) {
  Slot& slot = *slots_[index];
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
  }
  std::unique_ptr<Worker> old;
  {
    absl::MutexLock lock(&slot.mu);
    old = std::move(slot.worker);
  }
  if (old != nullptr) old->process->Stop(SIGKILL, absl::Seconds(5));
  old.reset();
  if (!why.empty()) {
    rpc::Log("reward", "replacing Python worker %d: %s", index, why.c_str());
  }
  absl::StatusOr<std::unique_ptr<Worker>> fresh = StartWorker(index);
  if (!fresh.ok()) {
    rpc::Log("reward", "Python worker %d could not be restarted: %s", index,
             std::string(fresh.status().message()).c_str());
    return;
  }
  {
    absl::MutexLock lock(&slot.mu);
    slot.worker = *std::move(fresh);
  }
  {
    absl::MutexLock lock(&mu_);
    ++replaced_;
  }
  if (options_.on_replaced) options_.on_replaced();
}

absl::StatusOr<std::vector<absl::StatusOr<ScoreResult>>> PythonRewardPool::ScoreBatch(
    const std::vector<RewardItem>& items, absl::Time deadline) {
  auto batch = std::make_shared<Batch>();
  {
    absl::MutexLock lock(&batch->mu);
    batch->results.resize(items.size());
  }
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < items.size(); ++i) {
      auto job = std::make_unique<Job>();
      job->batch = batch;
      job->index = i;
      job->item = items[i];
      job->deadline = deadline;
      queue_.push_back(std::move(job));
    }
  }
  absl::MutexLock lock(&batch->mu);
  struct Args {
    const int* done;
    int total;
  } args{&batch->done, static_cast<int>(items.size())};
  batch->mu.AwaitWithDeadline(absl::Condition(
                                  +[](Args* a) { return *a->done >= a->total; }, &args),
                              deadline);
  std::vector<absl::StatusOr<ScoreResult>> results;
  results.reserve(items.size());
  for (auto& result : batch->results) {
    results.push_back(result.has_value() ? *result
                                         : absl::DeadlineExceededError(absl::StrCat(
                                               "timeout: ", options_.function,
                                               " did not return by the request deadline "
                                               "(rlmesh.reward.timeout_s)")));
  }
  return results;
}

}  // namespace rlmesh::reward
