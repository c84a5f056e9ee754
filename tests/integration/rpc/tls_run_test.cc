// `rlmesh run` of the quickstart (two GRPO steps) with rlmesh.tls on: every service serves
// mutual TLS (its announce line says so) and the coordinator, the trainer's weight publishing
// and the health waits all dial over it, to a completed run. And plaintext on a non-loopback
// host without rlmesh.tls.insecure_plaintext stops the run at start-up naming the keys.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/e2e/run_helpers.h"

namespace rlmesh::e2e {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> ShortRun(const std::string& dir, const std::string& model) {
  return {"run",
          SourceDir() + "/deploy/configs/quickstart.yaml",
          "actor_rollout_ref.model.path=" + model,
          "rlmesh.run_dir=" + dir + "/run",
          "trainer.default_local_dir=" + dir + "/checkpoints",
          "trainer.total_training_steps=2",
          "trainer.test_freq=-1",
          "trainer.save_freq=-1",
          "rlmesh.warmup.sft_steps=2"};
}

TEST(TlsRunTest, QuickstartRunsOverMutualTls) {
  const std::string dir = MakeTempDir("tls_run");
  const std::string model = MakeTinyModel(dir);
  // One certificate for every process, as server and as client, naming 127.0.0.1.
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string make = absl::StrCat(
      "cd ", dir, " && openssl req -x509 ", key,
      " -keyout ca.key -out ca.crt -days 2 -subj /CN=ca && openssl req ", key,
      " -keyout tls.key -out tls.csr -subj /CN=rlmesh && printf "
      "'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > san.ext && "
      "openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt "
      "-days 2 -extfile san.ext > openssl.log 2>&1");
  ASSERT_EQ(std::system(make.c_str()), 0) << make;

  auto args = ShortRun(dir, model);
  for (const std::string& kv :
       {std::string("rlmesh.tls.enabled=true"), "rlmesh.tls.cert_file=" + dir + "/tls.crt",
        "rlmesh.tls.key_file=" + dir + "/tls.key", "rlmesh.tls.ca_file=" + dir + "/ca.crt"}) {
    args.push_back(kv);
  }
  const int status = RunRlmesh(args, dir + "/run.log", absl::Minutes(5));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << process::Subprocess::DescribeWaitStatus(status) << "; see " << dir << "/run.log";
  EXPECT_EQ(ReadMetrics(dir + "/run/metrics.jsonl").count(2), 1u) << "no step 2 in metrics.jsonl";
  for (const char* service : {"coordinator", "reward", "reference", "trainer", "rollout-0"}) {
    const std::string log = ReadFile(dir + "/run/logs/" + service + ".log");
    EXPECT_NE(log.find(") mtls"), std::string::npos) << service << " did not serve mTLS:\n" << log;
  }
}

TEST(TlsRunTest, PlaintextOffLoopbackStopsTheRunNamingTheKeys) {
  const std::string dir = MakeTempDir("tls_plain");
  const std::string model = MakeTinyModel(dir);
  auto args = ShortRun(dir, model);
  args.push_back("rlmesh.host=0.0.0.0");
  const int status = RunRlmesh(args, dir + "/run.log", absl::Minutes(5));
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << dir << "/run.log";
  // The launcher's own checks refuse the config before any service starts.
  const std::string logs = ReadFile(dir + "/run.log");
  EXPECT_NE(logs.find("rlmesh.tls.insecure_plaintext"), std::string::npos) << logs;
  EXPECT_FALSE(std::filesystem::exists(dir + "/run/logs/trainer.log"));
}

}  // namespace
}  // namespace rlmesh::e2e
