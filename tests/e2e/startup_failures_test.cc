// End to end: `rlmesh run` and the service binaries refuse a broken config or model folder
// before they start anything, with the message `rlmesh dry-run` prints, and a service that
// dies while the run starts up is reported at once with its exit status and last log lines
// (no waiting for a peer that is already dead). Each case runs the real binaries; the wait
// for each is bounded by a minute, far below the ten- and twenty-minute start-up budgets a
// silent launcher would spend.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "tests/e2e/run_helpers.h"

namespace rlmesh::e2e {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

struct Outcome {
  int status = 0;
  std::string output;
  double seconds = 0;
};

class StartupFailuresTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTempDir("startup"));
    good_model_ = new std::string(MakeTinyModel(*dir_));
  }
  static void TearDownTestSuite() {
    delete good_model_;
    delete dir_;
  }

  // A copy of the tiny model that the case may break.
  std::string CopyModel(const std::string& name) {
    const std::string copy = *dir_ + "/" + name;
    fs::remove_all(copy);
    fs::copy(*good_model_, copy, fs::copy_options::recursive);
    return copy;
  }

  // `program` (rlmesh or a service binary) with `args`; its output and how long it took.
  Outcome Run(const std::string& program, const std::vector<std::string>& args,
              const std::string& name) {
    process::SubprocessOptions options;
    options.argv = {BinDir() + "/" + program};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.log_path = *dir_ + "/" + name + ".log";
    auto p = process::Subprocess::Start(options);
    EXPECT_TRUE(p.ok()) << p.status();
    const absl::Time start = absl::Now();
    std::optional<int> status = (*p)->Wait(absl::Minutes(1));
    Outcome out;
    out.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (!status.has_value()) {
      ADD_FAILURE() << program << " was still running after a minute; see " << options.log_path;
      status = (*p)->Stop(SIGKILL, absl::Seconds(5));
    }
    out.status = *status;
    out.output = ReadAll(options.log_path);
    std::printf("%s: %s after %.2f s\n", name.c_str(),
                process::Subprocess::DescribeWaitStatus(out.status).c_str(), out.seconds);
    return out;
  }

  Outcome RlmeshRun(const std::string& model, const std::string& name,
                    std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"run",
                                     SourceDir() + "/deploy/configs/quickstart.yaml",
                                     "actor_rollout_ref.model.path=" + model,
                                     "rlmesh.run_dir=" + *dir_ + "/" + name + "_run",
                                     "trainer.default_local_dir=" + *dir_ + "/" + name + "_ckpt",
                                     "trainer.total_training_steps=2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return Run("rlmesh", args, name);
  }

  static bool Failed(const Outcome& o) {
    return !(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0);
  }

  static std::string* dir_;
  static std::string* good_model_;
};

std::string* StartupFailuresTest::dir_ = nullptr;
std::string* StartupFailuresTest::good_model_ = nullptr;

TEST_F(StartupFailuresTest, DryRunErrorStopsRlmeshRunBeforeAnyServiceStarts) {
  const Outcome o =
      RlmeshRun(*good_model_, "mini_batch", {"actor_rollout_ref.actor.ppo_mini_batch_size=7"});
  EXPECT_TRUE(Failed(o));
  // The same words `rlmesh dry-run` prints for this config.
  const Outcome dry = Run("rlmesh",
                          {"dry-run", "--brief", SourceDir() + "/deploy/configs/quickstart.yaml",
                           "actor_rollout_ref.model.path=" + *good_model_,
                           "actor_rollout_ref.actor.ppo_mini_batch_size=7"},
                          "mini_batch_dry_run");
  std::smatch error;
  const std::string dry_output = dry.output;
  ASSERT_TRUE(std::regex_search(dry_output, error, std::regex("error: [^\n]*"))) << dry_output;
  EXPECT_THAT(error.str(), HasSubstr("actor_rollout_ref.actor.ppo_mini_batch_size x n = 7 x 8"));
  EXPECT_THAT(o.output, HasSubstr(error.str()));
  // Nothing was started: no service wrote a log.
  EXPECT_FALSE(fs::exists(*dir_ + "/mini_batch_run/logs/trainer.log"));
}

// Ranks on several nodes are the Helm chart's (one per pod); rlmesh run says so and starts
// nothing.
TEST_F(StartupFailuresTest, TrainerRanksOnSeveralNodesAreRefusedByRlmeshRun) {
  const Outcome o = RlmeshRun(*good_model_, "nnodes", {"trainer.nnodes=2"});
  EXPECT_TRUE(Failed(o));
  EXPECT_THAT(o.output, HasSubstr("trainer.nnodes = 2: rlmesh run starts every trainer rank on "
                                  "this machine"));
  EXPECT_FALSE(fs::exists(*dir_ + "/nnodes_run/logs/trainer.log"));
}

// Two runs in one folder would interleave metrics.jsonl and overwrite each other's logs: the
// second is refused while the first holds the folder's lock (held here as a run holds it).
TEST_F(StartupFailuresTest, ASecondRunInTheSameRunDirIsRefused) {
  const std::string run_dir = *dir_ + "/locked_run";
  fs::create_directories(run_dir);
  const int fd = ::open((run_dir + "/.rlmesh-run.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const Outcome o = RlmeshRun(*good_model_, "locked");
  ::close(fd);
  EXPECT_TRUE(Failed(o));
  EXPECT_THAT(o.output, HasSubstr("another rlmesh run is using rlmesh.run_dir " + run_dir));
  EXPECT_FALSE(fs::exists(run_dir + "/logs/trainer.log"));
}

TEST_F(StartupFailuresTest, TruncatedSafetensorsIsNamed) {
  const std::string model = CopyModel("truncated");
  const std::string weights = model + "/model.safetensors";
  fs::resize_file(weights, fs::file_size(weights) / 2);
  const Outcome o = RlmeshRun(model, "truncated");
  EXPECT_TRUE(Failed(o));
  EXPECT_THAT(o.output, HasSubstr(weights));
  EXPECT_THAT(o.output, HasSubstr("truncated"));
}

TEST_F(StartupFailuresTest, WrongHiddenSizeInConfigJsonIsNamed) {
  const std::string model = CopyModel("hidden_size");
  std::string config = ReadAll(model + "/config.json");
  const std::string from = "\"hidden_size\": 128";
  ASSERT_NE(config.find(from), std::string::npos) << config;
  config.replace(config.find(from), from.size(), "\"hidden_size\": 256");
  WriteAll(model + "/config.json", config);
  const Outcome o = RlmeshRun(model, "hidden_size");
  EXPECT_TRUE(Failed(o));
  EXPECT_THAT(o.output, HasSubstr(", 256] from config.json"));
}

TEST_F(StartupFailuresTest, InvalidConfigJsonIsNamed) {
  const std::string model = CopyModel("bad_json");
  WriteAll(model + "/config.json", "{\"hidden_size\": 128,");
  const Outcome o = RlmeshRun(model, "bad_json");
  EXPECT_TRUE(Failed(o));
  EXPECT_THAT(o.output, HasSubstr(model + "/config.json: not valid JSON"));
}

TEST_F(StartupFailuresTest, ServiceBinaryRefusesABrokenModelFolderOnItsOwn) {
  const std::string model = CopyModel("service_truncated");
  const std::string weights = model + "/model.safetensors";
  fs::resize_file(weights, fs::file_size(weights) - 100);
  for (const char* service : {"rlmesh-trainer", "rlmesh-rollout", "rlmesh-reference"}) {
    const Outcome o = Run(service,
                          {"--config", SourceDir() + "/deploy/configs/quickstart.yaml", "--port",
                           "0", "--metrics_port", "0", "actor_rollout_ref.model.path=" + model},
                          absl::StrCat("service_", service));
    EXPECT_TRUE(Failed(o)) << service;
    EXPECT_THAT(o.output, HasSubstr(weights)) << service;
    // It stopped before serving anything.
    EXPECT_THAT(o.output, Not(HasSubstr("listening on"))) << service;
  }
}

TEST_F(StartupFailuresTest, AServiceThatDiesDuringStartUpIsReportedAtOnce) {
  // The folder passes the launcher's checks (a tokenizer.json is there) but the coordinator
  // cannot parse it: the launcher reports the coordinator's death with its log lines.
  const std::string model = CopyModel("bad_tokenizer");
  WriteAll(model + "/tokenizer.json", "{\"model\": ");
  const Outcome o = RlmeshRun(model, "bad_tokenizer");
  EXPECT_TRUE(Failed(o));
  EXPECT_THAT(o.output, HasSubstr("rlmesh run: coordinator exited with code 1"));
  EXPECT_THAT(o.output, HasSubstr("tokenizer"));
}

}  // namespace
}  // namespace rlmesh::e2e
