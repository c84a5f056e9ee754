// `rlmesh logprobs` and `rlmesh generate` on the tiny quickstart model, with --device and
// --dtype: the CPU float32 path by default and with its flags spelled out, bfloat16 close to it
// but not the same numbers (the flag acts), CUDA refused with a message where there is none,
// and unknown values refused by flag name; generate's decode speed line. The GPU script
// (tests/gpu/run.sh) runs the same commands on CUDA.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/run_helpers.h"

namespace rlmesh::e2e {
namespace {

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

class LogprobsCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTempDir("logprobs_cli"));
    model_ = new std::string(MakeTinyModel(*dir_));
    std::ofstream(*dir_ + "/ids.jsonl") << "[1,5,9,14,3,7,2]\n[4,4,8]\n[12,40,33,21,9,1,6,17,2]\n";
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete model_;
  }

  // `rlmesh <what> --model MODEL flags`, stdin from ids.jsonl.
  static Outcome Run(const std::string& flags, const std::string& what = "logprobs") {
    const std::string out = *dir_ + "/out.txt", err = *dir_ + "/err.txt";
    const std::string command = "'" + BinDir() + "/rlmesh' " + what + " --model '" + *model_ +
                                "' " + flags + " < '" + *dir_ + "/ids.jsonl' > '" + out + "' 2> '" +
                                err + "'";
    const int status = std::system(command.c_str());
    Outcome o;
    o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    o.out = ReadAll(out);
    o.err = ReadAll(err);
    return o;
  }

  static std::vector<std::vector<double>> Parse(const std::string& out) {
    std::vector<std::vector<double>> rows;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      rows.push_back(nlohmann::json::parse(line).get<std::vector<double>>());
    }
    return rows;
  }

  static std::string* dir_;
  static std::string* model_;
};

std::string* LogprobsCliTest::dir_ = nullptr;
std::string* LogprobsCliTest::model_ = nullptr;

TEST_F(LogprobsCliTest, Bfloat16IsCloseToFloat32AndTheDefaultIsCpuFloat32) {
  const Outcome plain = Run("");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const Outcome spelled = Run("--device cpu --dtype float32");
  ASSERT_EQ(spelled.exit_code, 0) << spelled.err;
  EXPECT_EQ(plain.out, spelled.out);
  const Outcome bf16 = Run("--dtype bfloat16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  const auto f = Parse(plain.out), b = Parse(bf16.out);
  ASSERT_EQ(f.size(), 3u);
  ASSERT_EQ(b.size(), f.size());
  double most = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(b[i].size(), f[i].size()) << "line " << i;
    for (size_t j = 0; j < f[i].size(); ++j) {
      EXPECT_LT(f[i][j], 0) << "a log-prob";
      most = std::max(most, std::abs(b[i][j] - f[i][j]));
    }
  }
  // bfloat16 keeps 8 bits of mantissa: close, and not the float32 numbers.
  EXPECT_LT(most, 0.1);
  EXPECT_GT(most, 0);
}

TEST_F(LogprobsCliTest, CudaWithoutAGpuAndUnknownValuesAreRefused) {
  const Outcome cuda = Run("--device cuda");
  if (cuda.exit_code == 0) GTEST_SKIP() << "this machine has CUDA: tests/gpu/run.sh covers it";
  EXPECT_EQ(cuda.exit_code, 1);
  // Why, in one line: a LibTorch without CUDA (Debian's here), or no GPU visible.
  EXPECT_NE(cuda.err.find("rlmesh logprobs: --device cuda: this "), std::string::npos) << cuda.err;
  EXPECT_TRUE(cuda.err.find("has no CUDA") != std::string::npos ||
              cuda.err.find("sees no CUDA device") != std::string::npos)
      << cuda.err;
  EXPECT_EQ(std::count(cuda.err.begin(), cuda.err.end(), '\n'), 1) << cuda.err;
  const Outcome half = Run("--dtype float16");
  EXPECT_EQ(half.exit_code, 2);
  EXPECT_NE(
      half.err.find("rlmesh logprobs: --dtype: expected float32 or bfloat16, got \"float16\""),
      std::string::npos)
      << half.err;
  const Outcome tpu = Run("--device tpu");
  EXPECT_EQ(tpu.exit_code, 2);
  EXPECT_NE(tpu.err.find("--device: expected cpu or cuda"), std::string::npos) << tpu.err;
}

TEST_F(LogprobsCliTest, GenerateTakesTheSameFlagsAndSaysItsSpeed) {
  const std::string greedy = "--prompt 12= --n 4 --temperature 0 --max-new-tokens 6 --json";
  const Outcome f32 = Run(greedy, "generate");
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  std::istringstream lines(f32.out);
  int samples = 0;
  for (std::string line; std::getline(lines, line); ++samples) {
    EXPECT_FALSE(nlohmann::json::parse(line)["token_ids"].empty());
  }
  EXPECT_EQ(samples, 4);
  EXPECT_NE(f32.err.find("rlmesh generate: 4 samples, "), std::string::npos) << f32.err;
  EXPECT_NE(f32.err.find(" tokens/s"), std::string::npos) << f32.err;
  const Outcome bf16 = Run(greedy + " --dtype bfloat16", "generate");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  const Outcome cuda = Run(greedy + " --device cuda", "generate");
  if (cuda.exit_code != 0) {
    EXPECT_EQ(cuda.exit_code, 1);
    EXPECT_NE(cuda.err.find("rlmesh generate: --device cuda: this "), std::string::npos)
        << cuda.err;
  }
  const Outcome half = Run(greedy + " --dtype float16", "generate");
  EXPECT_EQ(half.exit_code, 2);
  EXPECT_NE(half.err.find("rlmesh generate: --dtype: expected float32 or bfloat16"),
            std::string::npos)
      << half.err;
}

}  // namespace
}  // namespace rlmesh::e2e
