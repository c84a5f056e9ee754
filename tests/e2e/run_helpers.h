// Helpers of the end-to-end tests: run the real `rlmesh` binaries from the build folder as
// child processes and read what a run leaves behind (metrics.jsonl).
#pragma once

#include <sys/types.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"

namespace rlmesh::e2e {

inline std::string BinDir() { return std::string(RLMESH_TEST_BUILD_DIR) + "/bin"; }

inline std::string SourceDir() { return RLMESH_TEST_SOURCE_DIR; }

// The whole of a text file; "" when it cannot be read.
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline std::string MakeTempDir(const std::string& name) {
  std::string path = testing::TempDir() + "/rlmesh_" + name + "_XXXXXX";
  char* made = mkdtemp(path.data());
  EXPECT_NE(made, nullptr);
  return path;
}

inline std::unique_ptr<process::Subprocess> StartRlmesh(const std::vector<std::string>& args,
                                                        const std::string& log) {
  process::SubprocessOptions options;
  options.argv = {BinDir() + "/rlmesh"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.log_path = log;
  options.keep_lines = 2000;
  auto p = process::Subprocess::Start(options);
  EXPECT_TRUE(p.ok()) << p.status();
  return std::move(p).value();
}

// Runs `rlmesh args...` to its end; returns its wait status. Output goes to `log`.
inline int RunRlmesh(const std::vector<std::string>& args, const std::string& log,
                     absl::Duration timeout = absl::Minutes(15)) {
  auto p = StartRlmesh(args, log);
  auto status = p->Wait(timeout);
  if (!status.has_value()) {
    ADD_FAILURE() << "rlmesh " << args[0] << " did not finish in time";
    return p->Stop(SIGKILL, absl::Seconds(5));
  }
  return *status;
}

// The tiny quickstart model, made once per test in `dir`/`name`; `extra` flags of
// make-tiny-model come last (a later flag wins: "--seed 5", "--num-labels 1" for a reward
// model with the same tokenizer).
inline std::string MakeTinyModel(const std::string& dir, const std::string& name = "model",
                                 const std::vector<std::string>& extra = {}) {
  const std::string model = dir + "/" + name;
  std::vector<std::string> args = {"make-tiny-model",
                                   "--arch",
                                   "llama",
                                   "--out",
                                   model,
                                   "--hidden",
                                   "128",
                                   "--layers",
                                   "2",
                                   "--heads",
                                   "4",
                                   "--kv-heads",
                                   "4",
                                   "--intermediate",
                                   "352",
                                   "--max-position",
                                   "64",
                                   "--seed",
                                   "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  const std::string log = dir + "/make-tiny-model-" + name + ".log";
  EXPECT_EQ(RunRlmesh(args, log), 0) << "make-tiny-model failed; see " << log;
  return model;
}

// step -> record of metrics.jsonl (validation records are merged into their step's record).
inline std::map<int64_t, nlohmann::json> ReadMetrics(const std::string& path) {
  std::map<int64_t, nlohmann::json> records;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line, nullptr, false);
    if (!record.is_object() || !record.contains("step")) continue;
    auto& merged = records[record["step"].get<int64_t>()];
    if (merged.is_null()) merged = nlohmann::json::object();
    merged.update(record);
  }
  return records;
}

// Every metric of steps 1..steps of `unbroken` is in `resumed` with the same value, but the
// timings and throughput, and the rollout/trainer probability gap, which is float rounding of
// the replica's batched forward (its batch composition depends on how fast prompts arrive):
// everything the update depends on (tokens, scores, old/ref log-probs, losses) is exact.
inline void ExpectSameSteps(std::map<int64_t, nlohmann::json>& unbroken,
                            std::map<int64_t, nlohmann::json>& resumed, int64_t steps) {
  for (int64_t s = 1; s <= steps; ++s) {
    ASSERT_EQ(unbroken.count(s), 1u) << s;
    ASSERT_EQ(resumed.count(s), 1u) << "step " << s << " missing after the resume";
    for (const auto& [key, value] : unbroken[s].items()) {
      if (key.rfind("timing", 0) == 0 || key.rfind("perf/", 0) == 0) continue;
      ASSERT_TRUE(resumed[s].contains(key)) << "step " << s << " " << key;
      if (key.rfind("training/rollout_probs_diff", 0) == 0) {
        EXPECT_NEAR(resumed[s][key].get<double>(), value.get<double>(), 1e-6) << s << " " << key;
        continue;
      }
      EXPECT_EQ(resumed[s][key], value) << "step " << s << " " << key;
    }
  }
}

// The pid of the rlmesh-<component> process of the run in `run_dir` whose command line holds
// `arg` (such as "rlmesh.trainer.rank=1" or "rlmesh.rollout.replica_id=rollout-1"); 0 if none.
inline pid_t ServicePid(const std::string& component, const std::string& run_dir,
                        const std::string& arg) {
  const std::string binary = "/rlmesh-" + component;
  const std::string want_dir = "rlmesh.run_dir=" + run_dir;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::ifstream in(entry.path() / "cmdline");
    std::stringstream text;
    text << in.rdbuf();
    bool is_component = false, has_arg = false, has_dir = false;
    for (absl::string_view a : absl::StrSplit(text.str(), '\0')) {
      is_component = is_component || absl::EndsWith(a, binary);
      has_arg = has_arg || a == arg;
      has_dir = has_dir || a == want_dir;
    }
    if (is_component && has_arg && has_dir) return pid;
  }
  return 0;
}

}  // namespace rlmesh::e2e
