#include "services/coordinator/run_log.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace rlmesh::coordinator {
namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class RunLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string path = testing::TempDir() + "/rlmesh_run_log_XXXXXX";
    ASSERT_NE(mkdtemp(path.data()), nullptr);
    options_.run_dir = path + "/run";  // created by the log
    options_.console = false;
  }
  RunLogOptions options_;
};

TEST_F(RunLogTest, AppendsOneRecordPerCallWithNonFiniteValuesAsNull) {
  auto created = RunLog::Create(options_);
  ASSERT_TRUE(created.ok()) << created.status();
  RunLog& log = **created;
  ASSERT_TRUE(log.Append(1, {{"critic/score/mean", 0.5}, {"actor/kl_loss", std::nan("")}}).ok());
  ASSERT_TRUE(log.Append(2, {{"critic/score/mean", 0.75}}).ok());
  const auto lines = Lines(log.metrics_path());
  ASSERT_EQ(lines.size(), 2u);
  const auto first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first["step"], 1);
  EXPECT_EQ(first["critic/score/mean"], 0.5);
  EXPECT_TRUE(first["actor/kl_loss"].is_null());
  EXPECT_EQ(nlohmann::json::parse(lines[1])["critic/score/mean"], 0.75);
}

TEST_F(RunLogTest, TruncateKeepsTheStepsUpToTheCheckpointAndDropsBrokenLines) {
  auto created = RunLog::Create(options_);
  ASSERT_TRUE(created.ok()) << created.status();
  RunLog& log = **created;
  for (int64_t step = 1; step <= 4; ++step) ASSERT_TRUE(log.Append(step, {{"x", 1.0}}).ok());
  {
    std::ofstream out(log.metrics_path(), std::ios::app);
    out << "{\"step\": 2, \"x\"\n"
        << "{\"step\": \"3\"}\n";  // cut short; a non-number step
  }
  log.Truncate(2);
  const auto lines = Lines(log.metrics_path());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["step"], 1);
  EXPECT_EQ(nlohmann::json::parse(lines[1])["step"], 2);
  log.Truncate(-1);
  EXPECT_TRUE(Lines(log.metrics_path()).empty()) << "a fresh start keeps nothing";
}

TEST_F(RunLogTest, WithoutTheFileLoggerNothingIsWritten) {
  options_.jsonl = false;
  options_.val_generations = 2;
  auto created = RunLog::Create(options_);
  ASSERT_TRUE(created.ok()) << created.status();
  RunLog& log = **created;
  ASSERT_TRUE(log.Append(1, {{"x", 1.0}}).ok());
  ASSERT_TRUE(log.LogValGenerations(1, {{"in", "out", 1.0}}).ok());
  EXPECT_FALSE(std::filesystem::exists(log.metrics_path()));
  EXPECT_FALSE(std::filesystem::exists(options_.run_dir + "/val_generations.jsonl"));
}

TEST_F(RunLogTest, ValidationGenerationsLogAtMostTheAskedNumberOfSamples) {
  options_.val_generations = 2;
  auto created = RunLog::Create(options_);
  ASSERT_TRUE(created.ok()) << created.status();
  RunLog& log = **created;
  std::vector<ValidationSample> samples = {{"a", "1", 0.0}, {"b", "2", 1.0}, {"c", "3", 0.5}};
  ASSERT_TRUE(log.LogValGenerations(5, samples).ok());
  const auto lines = Lines(options_.run_dir + "/val_generations.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  const auto record = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(record["step"], 5);
  ASSERT_EQ(record["samples"].size(), 2u);
  for (const auto& sample : record["samples"]) {
    const std::string input = sample["input"];
    // Each logged sample is one of the given ones, whole.
    const auto it = std::find_if(samples.begin(), samples.end(),
                                 [&](const ValidationSample& s) { return s.input == input; });
    ASSERT_NE(it, samples.end());
    EXPECT_EQ(sample["output"], it->output);
    EXPECT_EQ(sample["score"], it->score);
  }
}

TEST(FormatDurationTest, HoursMinutesSeconds) {
  EXPECT_EQ(FormatDuration(42.4), "42s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(3720), "1h02m");
  EXPECT_EQ(FormatDuration(-1), "?");
  EXPECT_EQ(FormatDuration(std::nan("")), "?");
}

}  // namespace
}  // namespace rlmesh::coordinator
