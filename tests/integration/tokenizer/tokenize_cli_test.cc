// `rlmesh tokenize` end to end on a tiny tokenizer, where ids are byte values (0..255) and
// the special tokens are 256 <|endoftext|>, 257 <|im_start|>, 258 <|im_end|>.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/tokenizer/tiny.h"

namespace rlmesh::tokenizer {
namespace {

namespace fs = std::filesystem;

class TokenizeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // RLMESH_BUILD_DIR when set; otherwise the build folder this test binary sits in
    // (BUILD/tests/tokenize_cli_test).
    const char* build = std::getenv("RLMESH_BUILD_DIR");
    const fs::path build_dir = build != nullptr
                                   ? fs::path(build)
                                   : fs::canonical("/proc/self/exe").parent_path().parent_path();
    binary_ = build_dir / "bin" / "rlmesh";
    ASSERT_TRUE(fs::exists(binary_)) << binary_;
    // One folder per test: ctest runs the tests of this binary in parallel processes.
    dir_ = fs::path(testing::TempDir()) /
           (std::string("tokenize_cli_test_") +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(WriteTinyTokenizer(dir_.string(), {}).ok());
  }

  // Runs `rlmesh tokenize --model DIR args` with `input` on stdin; returns stdout and sets
  // `exit_code`.
  std::string Run(const std::string& args, const std::string& input, int& exit_code) {
    const fs::path in = dir_ / "stdin.txt", out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    std::ofstream(in, std::ios::binary) << input;
    const std::string command = "'" + binary_.string() + "' tokenize --model '" + dir_.string() +
                                "' " + args + " < '" + in.string() + "' > '" + out.string() +
                                "' 2> '" + err.string() + "'";
    const int status = std::system(command.c_str());
    exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::stringstream s;
    s << std::ifstream(out, std::ios::binary).rdbuf();
    std::stringstream e;
    e << std::ifstream(err, std::ios::binary).rdbuf();
    stderr_ = e.str();
    return s.str();
  }

  fs::path binary_, dir_;
  std::string stderr_;
};

TEST_F(TokenizeCliTest, EncodesLines) {
  int code = 0;
  EXPECT_EQ(Run("", "hi\n<|im_start|>x\n", code), "[104,105]\n[257,120]\n");
  EXPECT_EQ(code, 0) << stderr_;
}

TEST_F(TokenizeCliTest, EncodesJsonStrings) {
  int code = 0;
  EXPECT_EQ(Run("--jsonl", "\"a\\nb\"\n", code), "[97,10,98]\n");
  EXPECT_EQ(code, 0) << stderr_;
}

TEST_F(TokenizeCliTest, Decodes) {
  int code = 0;
  EXPECT_EQ(Run("--decode", "[104,105]\n[257,120,10]\n", code), "\"hi\"\n\"<|im_start|>x\\n\"\n");
  EXPECT_EQ(code, 0) << stderr_;
  EXPECT_EQ(Run("--decode --skip-special-tokens", "[257,120]\n", code), "\"x\"\n");
}

TEST_F(TokenizeCliTest, AppliesTheChatTemplate) {
  int code = 0;
  const std::string messages = R"([{"role":"user","content":"hi"}])"
                               "\n";
  // <|im_start|>user\nhi<|im_end|>\n then <|im_start|>assistant\n
  EXPECT_EQ(Run("--chat", messages, code),
            "[257,117,115,101,114,10,104,105,258,10,257,97,115,115,105,115,116,97,110,116,10]\n");
  EXPECT_EQ(code, 0) << stderr_;
  EXPECT_EQ(Run("--chat --no-generation-prompt", messages, code),
            "[257,117,115,101,114,10,104,105,258,10]\n");
}

TEST_F(TokenizeCliTest, ReportsTheBadLine) {
  int code = 0;
  Run("--decode", "[1]\n[999]\n", code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(stderr_.find("line 2"), std::string::npos) << stderr_;
  EXPECT_NE(stderr_.find("999"), std::string::npos) << stderr_;
  Run("--bogus", "", code);
  EXPECT_EQ(code, 2);
}

}  // namespace
}  // namespace rlmesh::tokenizer
