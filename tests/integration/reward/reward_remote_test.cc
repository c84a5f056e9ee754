// Starts two rlmesh-reward processes on free ports: B with the built-in scorers, and A with
// B as its custom remote (rlmesh.reward.custom_address), then scores through A over gRPC.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>
#include <string>

#include "absl/time/time.h"
#include "common/metrics/http_get.h"
#include "common/metrics/promtool.h"
#include "common/process/subprocess.h"
#include "common/rpc/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rlmesh/v1/reward.grpc.pb.h"

namespace rlmesh {
namespace {

using ::testing::HasSubstr;

struct RunningReward {
  std::unique_ptr<process::Subprocess> process;
  int port = 0;
  int metrics_port = 0;
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

std::string BinaryPath() {
  // RLMESH_BUILD_DIR when set, else the build this test belongs to.
  const char* build = std::getenv("RLMESH_BUILD_DIR");
  return std::string(build != nullptr ? build : RLMESH_TEST_BUILD_DIR) + "/bin/rlmesh-reward";
}

// Starts rlmesh-reward with `args` and reads its ports from the "listening on" line.
RunningReward StartReward(const std::string& name, std::vector<std::string> args) {
  process::SubprocessOptions options;
  options.argv = {BinaryPath(), "--port", "0", "--metrics_port", "0"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.echo = true;
  options.echo_prefix = "[" + name + "] ";
  RunningReward reward;
  auto process = process::Subprocess::Start(options);
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return reward;
  reward.process = *std::move(process);
  auto line = reward.process->WaitForLine(
      [](const std::string& l) { return l.find("listening on") != std::string::npos; },
      absl::Seconds(120));
  EXPECT_TRUE(line.ok()) << line.status();
  if (!line.ok()) return reward;
  std::smatch match;
  const std::regex pattern(R"(listening on [0-9.]+:([0-9]+) \(metrics :([0-9]+)\))");
  EXPECT_TRUE(std::regex_search(*line, match, pattern)) << *line;
  reward.port = std::stoi(match[1]);
  reward.metrics_port = std::stoi(match[2]);
  return reward;
}

v1::RewardItem* AddItem(v1::ScoreRequest& request, const std::string& id,
                        const std::string& data_source, const std::string& response,
                        const std::string& truth) {
  v1::RewardItem* item = request.add_items();
  item->set_id(id);
  item->set_data_source(data_source);
  item->set_response(response);
  item->set_ground_truth(truth);
  return item;
}

grpc::Status Score(v1::RewardService::Stub& stub, const v1::ScoreRequest& request,
                   v1::ScoreResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return stub.Score(&context, request, response);
}

std::string FetchMetrics(const RunningReward& reward) {
  auto page = metrics::HttpGet("127.0.0.1", reward.metrics_port, "/metrics");
  EXPECT_TRUE(page.ok()) << page.status();
  if (!page.ok()) return "";
  EXPECT_EQ(page->status_code, 200);
  return page->body;
}

void ExpectPromtoolAccepts(const std::string& text) {
  auto checked = metrics::PromtoolCheckMetrics(text);
  if (checked.status().code() == absl::StatusCode::kNotFound) return;  // no promtool here
  EXPECT_TRUE(checked.ok()) << checked.status() << "\n" << text;
}

TEST(RewardRemoteTest, ItemsAreScoredThroughTheRemoteAndBadRequestsAreRejected) {
  RunningReward backend = StartReward("reward-B", {});
  ASSERT_NE(backend.port, 0);
  const std::string config_path = testing::TempDir() + "/reward_front.yaml";
  {
    std::ofstream config(config_path);
    config << "rlmesh:\n  reward:\n    custom_address: \"" << backend.address()
           << "\"\n    timeout_s: 20\n";
  }
  RunningReward front = StartReward("reward-A", {"--config", config_path});
  ASSERT_NE(front.port, 0);

  auto channel = rpc::ConnectWhenServing(front.address(), "", 60);
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = v1::RewardService::NewStub(*channel);

  v1::ScoreRequest request;
  AddItem(request, "p0/0", "openai/gsm8k", "3 + 4 = 7\n#### 7", "7");
  AddItem(request, "p0/1", "openai/gsm8k", "#### 8", "7");
  AddItem(request, "p1/0", "lighteval/MATH", "so $\\boxed{\\dfrac{1}{2}}$", "0.5");
  AddItem(request, "p2/0", "rlmesh/reverse_digits", "4312", "4321");
  AddItem(request, "p3/0", "someone/else", "x", "x");
  v1::ScoreResponse response;
  grpc::Status status = Score(*stub, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.results_size(), 5);
  EXPECT_EQ(response.results(0).score(), 1.0);
  EXPECT_EQ(response.results(1).score(), 0.0);
  EXPECT_EQ(response.results(2).score(), 1.0);
  EXPECT_EQ(response.results(3).score(), 0.5);
  EXPECT_EQ(response.results(4).score(), 0.0);
  // B has no scorer for it either; its error reaches the caller with B's address.
  EXPECT_THAT(response.results(4).error(), HasSubstr("custom scorer at " + backend.address()));
  EXPECT_THAT(response.results(4).error(), HasSubstr("someone/else"));

  // The scoring happened in B: its counters saw the items, and A counted them as well.
  const std::string backend_metrics = FetchMetrics(backend);
  EXPECT_THAT(backend_metrics,
              HasSubstr("rlmesh_reward_items_total{data_source=\"openai/gsm8k\",outcome=\"ok\"} 2"));
  EXPECT_THAT(backend_metrics, HasSubstr(
      "rlmesh_reward_items_total{data_source=\"lighteval/MATH\",outcome=\"ok\"} 1"));
  EXPECT_THAT(backend_metrics, HasSubstr("rlmesh_reward_errors_total{kind=\"unknown_data_source\"} 1"));
  const std::string front_metrics = FetchMetrics(front);
  EXPECT_THAT(front_metrics, HasSubstr("rlmesh_reward_errors_total{kind=\"remote\"} 1"));

  // Malformed requests: INVALID_ARGUMENT naming the field; A keeps serving.
  v1::ScoreRequest empty;
  status = Score(*stub, empty, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("items"));
  v1::ScoreRequest no_id;
  AddItem(no_id, "", "openai/gsm8k", "#### 1", "1");
  status = Score(*stub, no_id, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("items[0].id"));
  v1::ScoreRequest negative_timeout;
  AddItem(negative_timeout, "a", "openai/gsm8k", "#### 1", "1");
  negative_timeout.set_timeout_seconds(-2);
  status = Score(*stub, negative_timeout, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("timeout_seconds"));

  v1::ScoreRequest again;
  AddItem(again, "z", "openai/gsm8k", "#### 1", "1");
  response.Clear();
  ASSERT_TRUE(Score(*stub, again, &response).ok());
  EXPECT_EQ(response.results(0).score(), 1.0);

  ExpectPromtoolAccepts(FetchMetrics(front));
  ExpectPromtoolAccepts(FetchMetrics(backend));

  // With B gone, forwarded items fail one by one with the reason; A still answers.
  const int backend_exit = backend.process->Stop(SIGTERM, absl::Seconds(30));
  EXPECT_TRUE(WIFEXITED(backend_exit) && WEXITSTATUS(backend_exit) == 0)
      << process::Subprocess::DescribeWaitStatus(backend_exit);
  v1::ScoreRequest orphaned;
  AddItem(orphaned, "o", "openai/gsm8k", "#### 1", "1");
  orphaned.set_timeout_seconds(10);
  response.Clear();
  status = Score(*stub, orphaned, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_THAT(response.results(0).error(), HasSubstr("custom scorer at " + backend.address()));

  const int front_exit = front.process->Stop(SIGTERM, absl::Seconds(30));
  EXPECT_TRUE(WIFEXITED(front_exit) && WEXITSTATUS(front_exit) == 0)
      << process::Subprocess::DescribeWaitStatus(front_exit);
}

}  // namespace
}  // namespace rlmesh
