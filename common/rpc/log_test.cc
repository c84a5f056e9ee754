// Log lines: "<UTC ISO-8601 time with milliseconds> <component>: <message>\n".
#include "common/rpc/log.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace rlmesh::rpc {
namespace {

TEST(LogTest, LineHasTimeComponentAndOneNewline) {
  const std::string line = FormatLogLine("rollout", "weights v3 applied");
  EXPECT_TRUE(std::regex_match(
      line, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z rollout: weights v3 applied\n)")))
      << line;
  EXPECT_TRUE(FormatLogLine("x", "ends\n").ends_with(": ends\n"));
}

TEST(LogTest, LogWritesOneFormattedLineToStderr) {
  testing::internal::CaptureStderr();
  Log("trainer", "step %d of %d, loss %.2f", 3, 10, 0.125);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(err.ends_with(" trainer: step 3 of 10, loss 0.12\n") ||
              err.ends_with(" trainer: step 3 of 10, loss 0.13\n"))
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1);
}

TEST(LogTest, LongMessagesAreNotTruncated) {
  const std::string big(5000, 'x');
  testing::internal::CaptureStderr();
  Log("coordinator", "%s", big.c_str());
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(big + "\n"), std::string::npos);
}

}  // namespace
}  // namespace rlmesh::rpc
