// Elastic rollout membership, end to end: `rlmesh run` starts with one rollout replica; two
// more rlmesh-rollout processes join while it trains (rlmesh.rollout.register_with); one of
// them is killed with SIGKILL while it is generating. Every step must complete with every
// prompt's n samples exactly once, the added replicas must serve samples (at the current
// weight version: the coordinator rejects any other), and the dead one's samples must be
// re-dispatched. A third process given joiner-b's replica_id is refused while joiner-b answers
// under it, so it neither replaces joiner-b nor is given work.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <regex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/rpc/client.h"
#include "rlmesh/v1/rollout.grpc.pb.h"
#include "tests/e2e/run_helpers.h"

namespace rlmesh::e2e {
namespace {

std::unique_ptr<process::Subprocess> StartReplica(const std::string& dir, const std::string& model,
                                                  const std::string& coordinator,
                                                  const std::string& name,
                                                  const std::string& log_name = "") {
  process::SubprocessOptions options;
  options.argv = {BinDir() + "/rlmesh-rollout",
                  "--config",
                  SourceDir() + "/deploy/configs/quickstart.yaml",
                  "--port",
                  "0",
                  "--metrics_port",
                  "0",
                  "actor_rollout_ref.model.path=" + model,
                  "rlmesh.rollout.register_with=" + coordinator,
                  "rlmesh.rollout.replica_id=" + name};
  options.log_path = dir + "/" + (log_name.empty() ? name : log_name) + ".log";
  options.keep_lines = 2000;
  auto p = process::Subprocess::Start(options);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

std::string ListeningAddress(process::Subprocess& p) {
  auto line = p.WaitForLine(
      [](const std::string& l) { return l.find("listening on") != std::string::npos; },
      absl::Minutes(3));
  EXPECT_TRUE(line.ok()) << line.status();
  std::smatch m;
  if (!line.ok() || !std::regex_search(*line, m, std::regex(R"(listening on (\S+) )"))) return "";
  return m[1];
}

TEST(ElasticityTest, ReplicasJoinAndOneDiesWhileTraining) {
  const std::string dir = MakeTempDir("elastic");
  const std::string model = MakeTinyModel(dir);
  const int steps = 24;
  auto run = StartRlmesh({"run", SourceDir() + "/deploy/configs/quickstart.yaml",
                          "actor_rollout_ref.model.path=" + model, "rlmesh.run_dir=" + dir + "/run",
                          "trainer.default_local_dir=" + dir + "/checkpoints",
                          absl::StrCat("trainer.total_training_steps=", steps),
                          "trainer.save_freq=-1", "trainer.test_freq=-1",
                          "trainer.val_before_train=false", "rlmesh.warmup.sft_steps=5"},
                         dir + "/run.log");
  auto coordinator_line = run->WaitForLine(
      [](const std::string& l) { return l.rfind("coordinator: listening on", 0) == 0; },
      absl::Minutes(5));
  ASSERT_TRUE(coordinator_line.ok()) << coordinator_line.status();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(*coordinator_line, m, std::regex(R"(listening on (\S+) )")));
  const std::string coordinator = m[1];
  ASSERT_TRUE(run->WaitForLine([](const std::string& l) { return l.rfind("step 2/", 0) == 0; },
                               absl::Minutes(5))
                  .ok());

  // Two replicas join.
  auto joiner_a = StartReplica(dir, model, coordinator, "joiner-a");
  auto joiner_b = StartReplica(dir, model, coordinator, "joiner-b");
  ASSERT_NE(joiner_a, nullptr);
  ASSERT_NE(joiner_b, nullptr);
  const std::string address_b = ListeningAddress(*joiner_b);
  ASSERT_FALSE(address_b.empty());
  for (const char* id : {"joiner-a", "joiner-b"}) {
    auto ready = run->WaitForLine(
        [id](const std::string& l) {
          return l.find(absl::StrCat("replica ", id, " ready")) != std::string::npos;
        },
        absl::Minutes(5));
    ASSERT_TRUE(ready.ok()) << id << ": " << ready.status() << "; see " << dir << "/run.log";
  }

  // joiner-b reports the id it registered as; a process asking for the same id is refused
  // (ALREADY_EXISTS) while joiner-b answers under it, instead of taking joiner-b's place.
  auto stub = v1::RolloutService::NewStub(rpc::CreateChannel(address_b));
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetRolloutStatusResponse status;
    ASSERT_TRUE(stub->GetStatus(&context, {}, &status).ok());
    EXPECT_EQ(status.replica_id(), "joiner-b");
  }
  auto twin = StartReplica(dir, model, coordinator, "joiner-b", "joiner-b-twin");
  ASSERT_NE(twin, nullptr);
  const std::string refusal =
      absl::StrCat("failed (ALREADY_EXISTS: replica_id: \"joiner-b\" is the live replica at ",
                   address_b, ", which still answers as it; ");
  auto refused = twin->WaitForLine(
      [&refusal](const std::string& l) { return l.find(refusal) != std::string::npos; },
      absl::Minutes(3));
  ASSERT_TRUE(refused.ok()) << refused.status() << "; see " << dir << "/joiner-b-twin.log";
  const std::string twin_address = ListeningAddress(*twin);
  twin->Stop(SIGTERM, absl::Seconds(20));
  for (const std::string& line : run->LastLines(2000)) {
    EXPECT_EQ(line.find(absl::StrCat("replica joiner-b at ", twin_address)), std::string::npos)
        << line;
  }

  // Once a finished step has used all three replicas (its record in metrics.jsonl says so),
  // kill joiner-b in the middle of a later share: its GetStatus shows sequences in its engine.
  // The two joiners may become ready at different step boundaries, so joiner-b having served
  // a step does not by itself mean a step used all three; only the coordinator's books do.
  bool all_three = false, killed = false;
  const absl::Time deadline = absl::Now() + absl::Minutes(5);
  while (!killed && absl::Now() < deadline && !run->ExitStatus().has_value()) {
    if (!all_three) {
      for (auto& [step, record] : ReadMetrics(dir + "/run/metrics.jsonl")) {
        if (record.contains("rollout/replicas_used") &&
            record["rollout/replicas_used"].get<double>() == 3) {
          all_three = true;
        }
      }
      if (!all_three) {
        absl::SleepFor(absl::Milliseconds(50));
        continue;
      }
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetRolloutStatusResponse status;
    if (!stub->GetStatus(&context, {}, &status).ok()) continue;
    if (status.running_sequences() + status.queue_depth() > 0) {
      joiner_b->Stop(SIGKILL, absl::Seconds(1));
      killed = true;
    }
  }
  ASSERT_TRUE(all_three) << "no step used both joiners and the first replica; see " << dir
                         << "/run.log";
  ASSERT_TRUE(killed) << "joiner-b was never seen generating after a step used all three";

  auto exit = run->Wait(absl::Minutes(10));
  ASSERT_TRUE(exit.has_value()) << "rlmesh run did not finish";
  ASSERT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0)
      << process::Subprocess::DescribeWaitStatus(*exit) << "; see " << dir << "/run.log";
  joiner_a->Stop(SIGTERM, absl::Seconds(20));

  auto records = ReadMetrics(dir + "/run/metrics.jsonl");
  int max_replicas = 0;
  double lost = 0, redispatched = 0;
  for (int64_t s = 1; s <= steps; ++s) {
    ASSERT_EQ(records.count(s), 1u) << "step " << s << " missing";
    const auto& r = records[s];
    // 32 prompts x n 8, each sample exactly once (the pool fails a step with a hole and
    // rejects duplicates and samples of another weight version).
    EXPECT_EQ(r["rollout/samples"].get<double>(), 256) << "step " << s;
    max_replicas = std::max(max_replicas, static_cast<int>(r["rollout/replicas_used"].get<double>()));
    lost += r["rollout/replicas_lost"].get<double>();
    redispatched += r["rollout/samples_redispatched"].get<double>();
  }
  EXPECT_EQ(records[1]["rollout/replicas_used"].get<double>(), 1);
  EXPECT_EQ(max_replicas, 3) << "no step used both joiners and the first replica";
  EXPECT_GE(lost, 1);
  EXPECT_GT(redispatched, 0);
}

}  // namespace
}  // namespace rlmesh::e2e
