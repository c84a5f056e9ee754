// Two replicas of the KL reference behind one address, as a headless Service gives them: the
// real service binaries started one by one on loopback, the references on 127.0.0.1 and
// 127.0.0.2 at the same port and the coordinator dialing "ipv4:127.0.0.1:P,127.0.0.2:P". The
// warm-up's policy must reach both over the trainer's data plane, the coordinator's round robin
// must give both log-prob calls, and no step may find a reference on other weights (which a
// replica left on the base model would cause: rlmesh/reference_reanchored).
#include <signal.h>
#include <sys/wait.h>

#include <regex>

#include "absl/strings/str_cat.h"
#include "common/metrics/http_get.h"
#include "tests/e2e/run_helpers.h"

namespace rlmesh::e2e {
namespace {

struct Started {
  std::unique_ptr<process::Subprocess> process;
  std::string address;  // host:port of its gRPC server
  int metrics_port = 0;
  std::string log;
};

// rlmesh-<component> on `host`:`port` (0 = any free), with the quickstart config and `extra`.
Started StartService(const std::string& dir, const std::string& component, const std::string& name,
                     const std::string& host, int port, const std::vector<std::string>& extra) {
  process::SubprocessOptions options;
  options.argv = {BinDir() + "/rlmesh-" + component,
                  "--config",
                  SourceDir() + "/deploy/configs/quickstart.yaml",
                  "--host",
                  host,
                  "--port",
                  std::to_string(port),
                  "--metrics_port",
                  "0"};
  options.argv.insert(options.argv.end(), extra.begin(), extra.end());
  options.log_path = dir + "/" + name + ".log";
  options.keep_lines = 2000;
  Started started;
  started.log = options.log_path;
  auto p = process::Subprocess::Start(options);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return started;
  started.process = *std::move(p);
  auto line = started.process->WaitForLine(
      [](const std::string& l) { return l.find("listening on") != std::string::npos; },
      absl::Minutes(5));
  EXPECT_TRUE(line.ok()) << name << ": " << line.status() << "; see " << options.log_path;
  std::smatch m;
  if (line.ok() &&
      std::regex_search(*line, m, std::regex(R"(listening on (\S+) \(metrics :(\d+)\))"))) {
    started.address = m[1];
    started.metrics_port = std::stoi(m[2]);
  }
  return started;
}

// The value of an unlabelled counter in a /metrics page; -1 when absent.
double CounterValue(const std::string& page, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(page, m, std::regex("\n" + name + " ([0-9.e+]+)"))) return -1;
  return std::stod(m[1]);
}

TEST(ReferenceReplicasTest, EveryReplicaTakesTheWarmedUpPolicyAndServesCalls) {
  const std::string dir = MakeTempDir("reference_replicas");
  const std::string model = MakeTinyModel(dir);
  const std::vector<std::string> common = {"actor_rollout_ref.model.path=" + model};
  Started reward = StartService(dir, "reward", "reward", "127.0.0.1", 0, common);
  Started trainer = StartService(dir, "trainer", "trainer", "127.0.0.1", 0, common);
  Started rollout = StartService(dir, "rollout", "rollout", "127.0.0.1", 0, common);
  Started first = StartService(dir, "reference", "reference-a", "127.0.0.1", 0, common);
  ASSERT_FALSE(first.address.empty());
  const int port = std::stoi(first.address.substr(first.address.rfind(':') + 1));
  Started second = StartService(dir, "reference", "reference-b", "127.0.0.2", port, common);
  ASSERT_FALSE(second.address.empty()) << "127.0.0.2:" << port << " is taken";
  ASSERT_FALSE(reward.address.empty() || trainer.address.empty() || rollout.address.empty());

  const int steps = 4;
  const std::string references = absl::StrCat("ipv4:", first.address, ",", second.address);
  std::vector<std::string> run = {"rlmesh.reward.address=" + reward.address,
                                  "rlmesh.reference.address=" + references,
                                  "rlmesh.trainer.address=" + trainer.address,
                                  "rlmesh.rollout.addresses=[" + rollout.address + "]",
                                  "rlmesh.run_dir=" + dir + "/run",
                                  "trainer.default_local_dir=" + dir + "/checkpoints",
                                  absl::StrCat("trainer.total_training_steps=", steps),
                                  "trainer.save_freq=-1",
                                  "trainer.test_freq=-1",
                                  "trainer.val_before_train=false",
                                  "rlmesh.warmup.sft_steps=3"};
  run.insert(run.end(), common.begin(), common.end());
  Started coordinator = StartService(dir, "coordinator", "coordinator", "127.0.0.1", 0, run);
  ASSERT_NE(coordinator.process, nullptr);
  auto status = coordinator.process->Wait(absl::Minutes(10));
  ASSERT_TRUE(status.has_value()) << "the coordinator did not finish; see " << dir
                                  << "/coordinator.log";
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << process::Subprocess::DescribeWaitStatus(*status) << "; see " << dir << "/coordinator.log";

  // Both replicas anchored to the same version, sent by the trainer.
  const std::regex anchored(
      R"(now anchoring the KL term to weight version (\d+) from the trainer)");
  std::vector<std::string> versions;
  for (const auto* reference : {&first, &second}) {
    std::smatch m;
    const std::string log = ReadAll(reference->log);
    ASSERT_TRUE(std::regex_search(log, m, anchored)) << reference->address << ":\n" << log;
    versions.push_back(m[1]);
  }
  EXPECT_EQ(versions[0], versions[1]);
  EXPECT_NE(versions[0], "0");
  // Both served log-prob calls (gRPC's round robin over the listed addresses).
  for (const auto* reference : {&first, &second}) {
    const std::string host = reference->address.substr(0, reference->address.rfind(':'));
    auto page = metrics::HttpGet(host, reference->metrics_port, "/metrics");
    ASSERT_TRUE(page.ok()) << reference->address << ": " << page.status();
    EXPECT_GT(CounterValue(page->body, "rlmesh_reference_sequences_total"), 0)
        << reference->address;
  }
  // No step met a replica on other weights.
  auto records = ReadMetrics(dir + "/run/metrics.jsonl");
  ASSERT_EQ(records.size(), static_cast<size_t>(steps));
  for (const auto& [step, record] : records) {
    EXPECT_EQ(record["rlmesh/reference_reanchored"].get<double>(), 0) << "step " << step;
    EXPECT_TRUE(record.contains("actor/kl_loss")) << "step " << step;
  }
  for (Started* s : {&reward, &trainer, &rollout, &first, &second}) {
    s->process->Stop(SIGTERM, absl::Seconds(30));
  }
}

}  // namespace
}  // namespace rlmesh::e2e
