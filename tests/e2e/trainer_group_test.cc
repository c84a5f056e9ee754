// End to end: `rlmesh run` with a trainer group of two ranks (trainer.n_gpus_per_node=2), the
// real binaries over loopback. A rank killed mid-run stops the run at once naming it, and
// trainer.resume_mode=auto then reproduces the unbroken run step for step; a rank that stalls
// fails its step within actor_rollout_ref.nccl_timeout, named by the ranks still there. A
// reference group of two ranks (rlmesh.reference.world_size=2) scores as one reference does.
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/run_helpers.h"

namespace rlmesh::e2e {
namespace {

std::vector<std::string> GroupRun(const std::string& dir, const std::string& model, int steps) {
  return {"run",
          SourceDir() + "/deploy/configs/quickstart.yaml",
          "actor_rollout_ref.model.path=" + model,
          "rlmesh.run_dir=" + dir + "/run",
          "trainer.default_local_dir=" + dir + "/checkpoints",
          absl::StrCat("trainer.total_training_steps=", steps),
          "trainer.n_gpus_per_node=2",
          "trainer.test_freq=-1",
          "rlmesh.warmup.sft_steps=4"};
}

// The pid of the `component` (trainer or reference) process of `rank` that `rlmesh run`
// started for `run_dir`; 0 if none.
pid_t RankPid(const std::string& component, const std::string& run_dir, int rank) {
  return ServicePid(component, run_dir, absl::StrCat("rlmesh.", component, ".rank=", rank));
}

pid_t TrainerRankPid(const std::string& run_dir, int rank) {
  return RankPid("trainer", run_dir, rank);
}

TEST(TrainerGroupRunTest, AKilledRankStopsTheRunNamingItAndAutoResumeReproducesTheUnbrokenRun) {
  const std::string dir = MakeTempDir("trainer_group_kill");
  const std::string model = MakeTinyModel(dir);
  const int steps = 4;
  auto args = [&](const std::string& name) {
    auto a = GroupRun(dir + "/" + name, model, steps);
    a.push_back("trainer.save_freq=1");
    a.push_back("trainer.resume_mode=auto");
    return a;
  };
  int status = RunRlmesh(args("unbroken"), dir + "/unbroken.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << dir << "/unbroken.log";
  EXPECT_TRUE(std::filesystem::exists(dir + "/unbroken/run/logs/trainer-1.log"));

  auto run = StartRlmesh(args("broken"), dir + "/broken1.log");
  auto line = run->WaitForLine([](const std::string& l) { return l.rfind("step 2/", 0) == 0; },
                               absl::Minutes(10));
  ASSERT_TRUE(line.ok()) << line.status();
  const pid_t rank1 = TrainerRankPid(dir + "/broken/run", 1);
  ASSERT_GT(rank1, 0) << "trainer rank 1 not found";
  ASSERT_EQ(kill(rank1, SIGKILL), 0);
  const absl::Time killed = absl::Now();
  auto exit = run->Wait(absl::Minutes(2));
  ASSERT_TRUE(exit.has_value()) << "rlmesh run went on without trainer rank 1";
  const double seconds = absl::ToDoubleSeconds(absl::Now() - killed);
  EXPECT_FALSE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0);
  const std::string log = ReadAll(dir + "/broken1.log");
  EXPECT_NE(log.find("trainer-1 killed by signal 9"), std::string::npos) << log;
  std::printf("rlmesh run stopped %.1f s after trainer rank 1 was killed\n", seconds);

  status = RunRlmesh(args("broken"), dir + "/broken2.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << dir << "/broken2.log";
  auto unbroken = ReadMetrics(dir + "/unbroken/run/metrics.jsonl");
  auto resumed = ReadMetrics(dir + "/broken/run/metrics.jsonl");
  for (int64_t s = 1; s <= steps; ++s) {
    // Two ranks, each a forward/backward per mini-batch of the quickstart's 4.
    EXPECT_EQ(unbroken[s]["rlmesh/micro_batches/update_actor"].get<double>(), 8) << s;
  }
  ExpectSameSteps(unbroken, resumed, steps);
}

TEST(TrainerGroupRunTest, AStalledRankFailsTheStepWithinTheTimeoutNamedByRankZero) {
  const std::string dir = MakeTempDir("trainer_group_stall");
  const std::string model = MakeTinyModel(dir);
  auto a = GroupRun(dir, model, 20);
  a.push_back("trainer.save_freq=-1");
  a.push_back("actor_rollout_ref.nccl_timeout=5");
  auto run = StartRlmesh(a, dir + "/run.log");
  auto line = run->WaitForLine([](const std::string& l) { return l.rfind("step 2/", 0) == 0; },
                               absl::Minutes(10));
  ASSERT_TRUE(line.ok()) << line.status();
  const pid_t rank1 = TrainerRankPid(dir + "/run", 1);
  ASSERT_GT(rank1, 0) << "trainer rank 1 not found";
  ASSERT_EQ(kill(rank1, SIGSTOP), 0);
  const absl::Time stalled = absl::Now();
  auto failed = run->WaitForLine(
      [](const std::string& l) {
        return l.find("trainer rank 1 is not responding") != std::string::npos;
      },
      absl::Minutes(2));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - stalled);
  kill(rank1, SIGCONT);  // so that it can take the launcher's SIGTERM
  ASSERT_TRUE(failed.ok()) << failed.status() << "; see " << dir << "/run.log";
  std::printf("the step failed %.1f s after trainer rank 1 stalled (timeout 5 s): %s\n", seconds,
              failed->c_str());
  EXPECT_LT(seconds, 60);
  auto exit = run->Wait(absl::Minutes(2));
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0);
}

// Two reference processes, each holding half of the frozen weights, anchor the KL loss as one
// does: the same samples get the same KL to float rounding, and the warmed-up policy reaches
// both ranks' shards inline from the trainer.
TEST(ReferenceGroupRunTest, TwoReferenceRanksScoreAsOneReference) {
  const std::string dir = MakeTempDir("reference_group");
  const std::string model = MakeTinyModel(dir);
  auto args = [&](const std::string& name, int ranks) {
    return std::vector<std::string>{"run",
                                    SourceDir() + "/deploy/configs/quickstart.yaml",
                                    "actor_rollout_ref.model.path=" + model,
                                    "rlmesh.run_dir=" + dir + "/" + name,
                                    "trainer.default_local_dir=" + dir + "/" + name + "/ckpt",
                                    "trainer.total_training_steps=1",
                                    "trainer.save_freq=-1",
                                    "trainer.test_freq=-1",
                                    "trainer.val_before_train=false",
                                    "rlmesh.warmup.sft_steps=3",
                                    absl::StrCat("rlmesh.reference.world_size=", ranks)};
  };
  int status = RunRlmesh(args("one", 1), dir + "/one.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << dir << "/one.log";
  status = RunRlmesh(args("two", 2), dir + "/two.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << dir << "/two.log";
  EXPECT_TRUE(std::filesystem::exists(dir + "/two/logs/reference-1.log"));
  const std::string reference_log = ReadAll(dir + "/two/logs/reference.log");
  EXPECT_NE(reference_log.find("rank 0 of 2 hosts the group"), std::string::npos);
  EXPECT_NE(reference_log.find("from the trainer (inline)"), std::string::npos) << reference_log;

  auto one = ReadMetrics(dir + "/one/metrics.jsonl");
  auto two = ReadMetrics(dir + "/two/metrics.jsonl");
  ASSERT_EQ(one.count(1), 1u);
  ASSERT_EQ(two.count(1), 1u);
  // Generation comes before the reference: the same samples in both runs.
  EXPECT_EQ(one[1]["critic/score/mean"], two[1]["critic/score/mean"]);
  EXPECT_EQ(one[1]["response_length/mean"], two[1]["response_length/mean"]);
  // After the first of the step's four mini-batches the policy has moved off the reference.
  const double kl_one = one[1]["actor/kl_loss"].get<double>();
  const double kl_two = two[1]["actor/kl_loss"].get<double>();
  EXPECT_GT(kl_one, 0);
  EXPECT_NEAR(kl_two, kl_one, 1e-4 * kl_one);
  // The quickstart's reference micro-batch holds the whole batch: one forward, or one per rank
  // over its half.
  EXPECT_EQ(one[1]["rlmesh/micro_batches/ref"].get<double>(), 1);
  EXPECT_EQ(two[1]["rlmesh/micro_batches/ref"].get<double>(), 2);
}

// A reference rank that stalls fails the step's reference call within the timeout, with a
// message naming it (a collective of the reference group, not the trainer's).
TEST(ReferenceGroupRunTest, AStalledReferenceRankFailsTheStepNamingIt) {
  const std::string dir = MakeTempDir("reference_group_stall");
  const std::string model = MakeTinyModel(dir);
  auto run = StartRlmesh(
      {"run", SourceDir() + "/deploy/configs/quickstart.yaml",
       "actor_rollout_ref.model.path=" + model, "rlmesh.run_dir=" + dir + "/run",
       "trainer.default_local_dir=" + dir + "/checkpoints", "trainer.total_training_steps=2000",
       "trainer.save_freq=-1", "trainer.test_freq=-1", "rlmesh.warmup.sft_steps=2",
       "rlmesh.reference.world_size=2", "actor_rollout_ref.nccl_timeout=5"},
      dir + "/run.log");
  auto line = run->WaitForLine([](const std::string& l) { return l.rfind("step 2/", 0) == 0; },
                               absl::Minutes(10));
  ASSERT_TRUE(line.ok()) << line.status();
  const pid_t rank1 = RankPid("reference", dir + "/run", 1);
  ASSERT_GT(rank1, 0) << "reference rank 1 not found";
  ASSERT_EQ(kill(rank1, SIGSTOP), 0);
  auto failed = run->WaitForLine(
      [](const std::string& l) {
        return l.find("ReferenceService.ComputeLogProbs") != std::string::npos &&
               l.find("reference rank 1 is not responding") != std::string::npos;
      },
      absl::Minutes(2));
  kill(rank1, SIGCONT);  // so that it can take the launcher's SIGTERM
  ASSERT_TRUE(failed.ok()) << failed.status() << "; see " << dir << "/run.log";
  auto exit = run->Wait(absl::Minutes(2));
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0);
}

}  // namespace
}  // namespace rlmesh::e2e
