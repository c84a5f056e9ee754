// The fault suite, end to end: `rlmesh run` with two rollout replicas, and faults injected
// into the real processes while they train. A replica frozen with SIGSTOP is suspended within
// seconds and the other takes its samples; once it runs again it is re-admitted. A replica
// killed with SIGKILL is started again by `rlmesh run` and serves again. A reward service
// frozen for a few seconds costs the step only the wait. In every case every step has all of
// its 32 prompts x 8 samples, each exactly once (the coordinator's books: rollout/samples),
// and the run ends with status 0. Test settings: keepalive pings every 1 s with a 1 s answer
// deadline, heartbeats every 1 s.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <regex>

#include "absl/strings/str_cat.h"
#include "common/rpc/client.h"
#include "rlmesh/v1/rollout.grpc.pb.h"
#include "tests/e2e/run_helpers.h"

namespace rlmesh::e2e {
namespace {

std::vector<std::string> FaultRun(const std::string& dir, const std::string& model, int steps) {
  return {"run",
          SourceDir() + "/deploy/configs/quickstart.yaml",
          "actor_rollout_ref.model.path=" + model,
          "rlmesh.run_dir=" + dir + "/run",
          "trainer.default_local_dir=" + dir + "/checkpoints",
          absl::StrCat("trainer.total_training_steps=", steps),
          "trainer.save_freq=-1",
          "trainer.test_freq=-1",
          "trainer.val_before_train=false",
          "rlmesh.warmup.sft_steps=2",
          "rlmesh.rollout.replicas=2",
          "rlmesh.rpc.keepalive_s=1",
          "rlmesh.rpc.keepalive_timeout_s=1",
          "rlmesh.rollout.heartbeat_s=1"};
}

// The "listening on HOST:PORT" address in a service's log under the run folder.
std::string ServiceAddress(const std::string& log) {
  std::ifstream in(log);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, std::regex(R"(listening on (\S+) )"))) return m[1];
  }
  return "";
}

bool WaitForLine(process::Subprocess& run, const std::string& text, absl::Duration timeout) {
  return run
      .WaitForLine([&](const std::string& l) { return l.find(text) != std::string::npos; }, timeout)
      .ok();
}

// Blocks until the replica at `address` has sequences in its engine (it is generating).
bool WaitUntilGenerating(const std::string& address, process::Subprocess& run) {
  auto stub = v1::RolloutService::NewStub(rpc::CreateChannel(address));
  const absl::Time deadline = absl::Now() + absl::Minutes(3);
  while (absl::Now() < deadline && !run.ExitStatus().has_value()) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetRolloutStatusResponse status;
    if (stub->GetStatus(&context, {}, &status).ok() &&
        status.running_sequences() + status.queue_depth() > 0) {
      return true;
    }
  }
  return false;
}

// Every step 1..steps has 256 samples, each once; returns the records.
std::map<int64_t, nlohmann::json> ExpectExactBooks(const std::string& dir, int steps) {
  auto records = ReadMetrics(dir + "/run/metrics.jsonl");
  for (int64_t s = 1; s <= steps; ++s) {
    EXPECT_EQ(records.count(s), 1u) << "step " << s << " missing";
    if (records.count(s) == 0) continue;
    EXPECT_EQ(records[s]["rollout/samples"].get<double>(), 256) << "step " << s;
  }
  return records;
}

// The last step metrics.jsonl has a record of; 0 before the first.
int64_t LastStep(const std::string& dir) {
  auto records = ReadMetrics(dir + "/run/metrics.jsonl");
  return records.empty() ? 0 : records.rbegin()->first;
}

void ExpectCleanExit(process::Subprocess& run, const std::string& dir) {
  auto exit = run.Wait(absl::Minutes(10));
  ASSERT_TRUE(exit.has_value()) << "rlmesh run did not finish; see " << dir << "/run.log";
  ASSERT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0)
      << process::Subprocess::DescribeWaitStatus(*exit) << "; see " << dir << "/run.log";
}

// A fault run in a new folder named after `name`, past its second step.
struct Running {
  std::string dir;
  std::unique_ptr<process::Subprocess> run;
};
Running StartPastStep2(const std::string& name, int steps, const std::vector<std::string>& extra) {
  Running r;
  r.dir = MakeTempDir(name);
  auto args = FaultRun(r.dir, MakeTinyModel(r.dir), steps);
  args.insert(args.end(), extra.begin(), extra.end());
  r.run = StartRlmesh(args, r.dir + "/run.log");
  EXPECT_TRUE(WaitForLine(*r.run, "step 2/", absl::Minutes(5))) << "see " << r.dir << "/run.log";
  return r;
}

pid_t Replica1Pid(const std::string& dir) {
  return ServicePid("rollout", dir + "/run", "rlmesh.rollout.replica_id=rollout-1");
}

TEST(FaultTest, AFrozenReplicaIsSuspendedInSecondsAndReadmittedWhenItRunsAgain) {
  const int steps = 40;  // room to re-admit it on a loaded machine
  auto [dir, run] = StartPastStep2("fault_freeze", steps, {});
  const pid_t pid = Replica1Pid(dir);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(WaitUntilGenerating(ServiceAddress(dir + "/run/logs/rollout-1.log"), *run));

  const int64_t before = LastStep(dir);
  ::kill(pid, SIGSTOP);
  const absl::Time frozen = absl::Now();
  const bool suspended = WaitForLine(*run, "replica rollout-1 lost", absl::Seconds(60));
  const double detect_s = absl::ToDoubleSeconds(absl::Now() - frozen);
  std::printf("frozen replica suspended after %.2f s\n", detect_s);
  // Steps go on without it: the one it was frozen in, and a whole one more.
  bool went_on = false;
  for (const absl::Time end = absl::Now() + absl::Minutes(2);
       suspended && !went_on && absl::Now() < end;) {
    went_on = LastStep(dir) >= before + 2;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ::kill(pid, SIGCONT);
  ASSERT_TRUE(suspended) << "see " << dir << "/run.log";
  EXPECT_LT(detect_s, 10.0);
  EXPECT_TRUE(went_on) << "no step finished while rollout-1 was frozen";
  EXPECT_TRUE(WaitForLine(*run, "replica rollout-1 answers again", absl::Minutes(1)))
      << "see " << dir << "/run.log";
  ExpectCleanExit(*run, dir);

  auto records = ExpectExactBooks(dir, steps);
  // Whether its samples were re-dispatched depends on where in the step the freeze fell (in
  // its share, or after it, in the weight publish); either way the books are exact.
  double lost = 0;
  for (auto& [step, r] : records) lost += r.value("rollout/replicas_lost", 0.0);
  EXPECT_GE(lost, 1);
  EXPECT_EQ(records[steps]["rollout/replicas_used"].get<double>(), 2)
      << "rollout-1 was not re-admitted";
}

// SIGKILL of rollout-1 while it generates; `rlmesh run` starts it again and the run ends
// with every step's 256 samples, each once, recorded in `records`.
void KillReplicaWhileItGenerates(const std::string& name, int steps, std::vector<std::string> extra,
                                 std::map<int64_t, nlohmann::json>* records) {
  extra.push_back("rlmesh.rollout.max_restarts=2");
  auto [dir, run] = StartPastStep2(name, steps, extra);
  const pid_t pid = Replica1Pid(dir);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(WaitUntilGenerating(ServiceAddress(dir + "/run/logs/rollout-1.log"), *run));
  ::kill(pid, SIGKILL);
  EXPECT_TRUE(WaitForLine(*run, "starting rollout-1 again in 1 s (restart 1", absl::Seconds(30)))
      << "see " << dir << "/run.log";
  EXPECT_TRUE(WaitForLine(*run, "rollout-1 started again", absl::Seconds(30)));
  // A new process (once it has exec'd, its command line is the replica's), before the run ends.
  pid_t again = 0;
  for (const absl::Time end = absl::Now() + absl::Seconds(30);
       (again == 0 || again == pid) && absl::Now() < end;) {
    again = Replica1Pid(dir);
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GT(again, 0);
  EXPECT_NE(again, pid);
  ExpectCleanExit(*run, dir);

  // Ready twice: at the start, and once started again.
  int ready = 0;
  for (const auto& line : run->LastLines(2000)) {
    ready += line.find("replica rollout-1 ready") != std::string::npos;
  }
  EXPECT_EQ(ready, 2) << "see " << dir << "/run.log";
  *records = ExpectExactBooks(dir, steps);
  EXPECT_EQ((*records)[steps]["rollout/replicas_used"].get<double>(), 2)
      << "the restarted rollout-1 serves no samples";
}

TEST(FaultTest, AKilledReplicaIsStartedAgainWhileTheRunGoesOn) {
  // Long enough for the restarted replica to load and serve on a loaded machine.
  std::map<int64_t, nlohmann::json> records;
  KillReplicaWhileItGenerates("fault_kill", 60, {}, &records);
}

// The same with generation one step ahead (rlmesh.max_staleness=1): the replica dies while
// generating the next step's samples during an update; its samples are generated again by
// the other replica on the same weights, so no prompt is lost and the bound holds.
TEST(FaultTest, AKilledReplicaLosesNoPromptWhenGenerationRunsAhead) {
  std::map<int64_t, nlohmann::json> records;
  KillReplicaWhileItGenerates("fault_kill_async", 60, {"rlmesh.max_staleness=1"}, &records);
  ASSERT_FALSE(records.empty());
  for (auto& [step, m] : records) {
    EXPECT_LE(m["rlmesh/staleness/max"].get<double>(), 1) << "step " << step;
    EXPECT_EQ(m["rlmesh/samples_dropped_stale"].get<double>(), 0) << "step " << step;
  }
}

// With partial rollouts the replicas also take new weights in the middle of a generation: a
// replica killed then loses no prompt either, and no sample is older than the bound.
TEST(FaultTest, AKilledReplicaLosesNoPromptWithPartialRollouts) {
  std::map<int64_t, nlohmann::json> records;
  KillReplicaWhileItGenerates("fault_kill_partial", 60,
                              {"rlmesh.max_staleness=1", "rlmesh.partial_rollout=true"}, &records);
  ASSERT_FALSE(records.empty());
  for (auto& [step, m] : records) {
    EXPECT_LE(m["rlmesh/staleness/max"].get<double>(), 1) << "step " << step;
    EXPECT_EQ(m["rlmesh/samples_dropped_stale"].get<double>(), 0) << "step " << step;
  }
}

TEST(FaultTest, AFrozenRewardServiceCostsTheStepOnlyTheWait) {
  const int steps = 16;
  auto [dir, run] = StartPastStep2("fault_reward", steps, {"rlmesh.reward.timeout_s=2"});
  const pid_t pid = ServicePid("reward", dir + "/run", "rlmesh.reward.timeout_s=2");
  ASSERT_GT(pid, 0);
  // Longer than one Score attempt may take (2 s + 1 s): the call is retried, then answered.
  ::kill(pid, SIGSTOP);
  absl::SleepFor(absl::Seconds(5));
  ::kill(pid, SIGCONT);
  ExpectCleanExit(*run, dir);
  ExpectExactBooks(dir, steps);
}

// A reward service killed for good stops the run, which says where it can go on from: the
// newest checkpoint, and the key that resumes from it.
TEST(FaultTest, ARunStoppedByADeadServiceNamesTheCheckpointToGoOnFrom) {
  auto [dir, run] =
      StartPastStep2("fault_dead_reward", 16, {"trainer.save_freq=1", "rlmesh.reward.timeout_s=2"});
  const pid_t pid = ServicePid("reward", dir + "/run", "rlmesh.reward.timeout_s=2");
  ASSERT_GT(pid, 0);
  ::kill(pid, SIGKILL);
  auto exit = run->Wait(absl::Minutes(5));
  ASSERT_TRUE(exit.has_value()) << "see " << dir << "/run.log";
  EXPECT_FALSE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0);
  std::ifstream in(dir + "/run.log");
  std::stringstream log;
  log << in.rdbuf();
  const std::regex said("rlmesh run: the newest checkpoint is " + dir +
                        "/checkpoints/global_step_([0-9]+): run again with "
                        "trainer.resume_mode=auto to go on from it");
  std::smatch m;
  const std::string text = log.str();
  ASSERT_TRUE(std::regex_search(text, m, said)) << text;
  EXPECT_GE(std::stoi(m[1].str()), 2) << "save_freq 1: steps 1 and 2 were saved";
}

}  // namespace
}  // namespace rlmesh::e2e
