#include "common/process/subprocess.h"

#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace rlmesh::process {
namespace {

std::unique_ptr<Subprocess> StartShell(const std::string& script, const std::string& log = "") {
  SubprocessOptions options;
  options.argv = {"/bin/sh", "-c", script};
  options.log_path = log;
  auto p = Subprocess::Start(options);
  EXPECT_TRUE(p.ok()) << p.status();
  return std::move(p).value();
}

TEST(SubprocessTest, FindsLineAndReportsExitCode) {
  auto p = StartShell("echo starting; echo 'svc: listening on 127.0.0.1:4242'; exit 3");
  auto line = p->WaitForLine(
      [](const std::string& l) { return l.find("listening on") != std::string::npos; },
      absl::Seconds(30));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(*line, "svc: listening on 127.0.0.1:4242");
  auto status = p->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 3);
  EXPECT_EQ(Subprocess::DescribeWaitStatus(*status), "exited with code 3");
  EXPECT_EQ(p->LastLines(1), std::vector<std::string>{"svc: listening on 127.0.0.1:4242"});
}

TEST(SubprocessTest, CapturesStderrAndWritesLog) {
  std::string log = testing::TempDir() + "/subprocess_test.log";
  std::remove(log.c_str());
  auto p = StartShell("echo out; echo err 1>&2", log);
  ASSERT_TRUE(p->Wait(absl::Seconds(30)).has_value());
  auto lines = p->LastLines(10);
  ASSERT_EQ(lines.size(), 2u);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("out\n"), std::string::npos);
  EXPECT_NE(text.str().find("err\n"), std::string::npos);
}

TEST(SubprocessTest, WaitForLineFailsWhenProcessEnds) {
  auto p = StartShell("echo nothing useful");
  auto line = p->WaitForLine([](const std::string& l) { return l == "ready"; }, absl::Seconds(30));
  EXPECT_EQ(line.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(line.status().message().find("sh ended"), std::string::npos);
}

TEST(SubprocessTest, StopSendsSignal) {
  auto p = StartShell("echo up; exec sleep 60");
  ASSERT_TRUE(p->WaitForLine([](const std::string& l) { return l == "up"; }, absl::Seconds(30)).ok());
  auto line = p->WaitForLine([](const std::string& l) { return l == "never"; },
                             absl::Milliseconds(50));
  EXPECT_EQ(line.status().code(), absl::StatusCode::kDeadlineExceeded);
  int status = p->Stop(SIGTERM, absl::Seconds(30));
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_NE(Subprocess::DescribeWaitStatus(status).find("killed by signal 15"), std::string::npos);
}

TEST(SubprocessTest, MissingProgramExits127) {
  SubprocessOptions options;
  options.argv = {"/nonexistent/program"};
  auto p = Subprocess::Start(options);
  ASSERT_TRUE(p.ok());
  auto status = (*p)->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(WEXITSTATUS(*status), 127);
}

}  // namespace
}  // namespace rlmesh::process
