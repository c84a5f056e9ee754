// ServiceServer with a trivial RewardService on port 0: the announce line, health going
// NOT_SERVING -> SERVING, an RPC counted on /metrics (which promtool accepts), then a real
// SIGTERM: health NOT_SERVING during the drain, an in-flight RPC allowed to finish, and both
// ports closed afterwards.
#include "common/rpc/service_server.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <regex>
#include <string>

#include "absl/synchronization/notification.h"
#include "common/metrics/http_get.h"
#include "common/metrics/promtool.h"
#include "common/rpc/client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "rlmesh/v1/reward.grpc.pb.h"

namespace rlmesh::rpc {
namespace {

using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::rlmesh::v1::RewardService;
using ::rlmesh::v1::ScoreRequest;
using ::rlmesh::v1::ScoreResponse;

constexpr char kServiceName[] = "rlmesh.v1.RewardService";

// Scores each item with the length of its response. An item with id "slow" blocks the call
// until release_ is notified, to stand in for in-flight work during a drain.
class LengthReward final : public RewardService::Service {
 public:
  grpc::Status Score(grpc::ServerContext*, const ScoreRequest* req, ScoreResponse* resp) override {
    for (const auto& item : req->items()) {
      if (item.id() == "slow") {
        entered_.Notify();
        release_.WaitForNotification();
      }
      auto* r = resp->add_results();
      r->set_id(item.id());
      r->set_score(static_cast<double>(item.response().size()));
    }
    return grpc::Status::OK;
  }
  absl::Notification entered_;
  absl::Notification release_;
};

HealthCheckResponse::ServingStatus CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                               const std::string& service) {
  auto stub = ::grpc::health::v1::Health::NewStub(channel);
  HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::Status s = stub->Check(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.status();
}

grpc::Status CallScore(const std::shared_ptr<grpc::Channel>& channel, const std::string& id,
                       const std::string& response, ScoreResponse* out) {
  auto stub = RewardService::NewStub(channel);
  ScoreRequest req;
  auto* item = req.add_items();
  item->set_id(id);
  item->set_response(response);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return stub->Score(&ctx, req, out);
}

TEST(ServiceServerTest, HealthMetricsAndSigtermDrain) {
  LengthReward service;
  testing::internal::CaptureStdout();
  auto created = ServiceServer::Create(
      {.component = "testsvc", .shutdown_deadline_seconds = 30, .handle_signals = true},
      {{kServiceName, &service}});
  const std::string announced = testing::internal::GetCapturedStdout();
  ASSERT_TRUE(created.ok()) << created.status();
  ServiceServer& server = **created;

  // The one line that `rlmesh run` parses, with the real ports.
  std::smatch m;
  ASSERT_TRUE(std::regex_match(
      announced, m, std::regex(R"(testsvc: listening on 127\.0\.0\.1:(\d+) \(metrics :(\d+)\)\n)")))
      << announced;
  EXPECT_EQ(std::stoi(m[1]), server.port());
  EXPECT_EQ(std::stoi(m[2]), server.metrics_port());
  EXPECT_NE(server.port(), server.metrics_port());

  auto channel = CreateChannel(server.address());
  EXPECT_EQ(CheckHealth(channel, ""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(CheckHealth(channel, kServiceName), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(WaitForServing(channel, kServiceName, 0.2).code(), absl::StatusCode::kDeadlineExceeded);
  // /readyz on the metrics port (the HTTP probe when the gRPC port speaks TLS) agrees.
  auto readyz = metrics::HttpGet("127.0.0.1", server.metrics_port(), "/readyz");
  ASSERT_TRUE(readyz.ok()) << readyz.status();
  EXPECT_EQ(readyz->status_code, 503);

  server.SetServing(true);
  EXPECT_EQ(CheckHealth(channel, ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth(channel, kServiceName), HealthCheckResponse::SERVING);
  EXPECT_TRUE(WaitForServing(channel, kServiceName, 30).ok());
  readyz = metrics::HttpGet("127.0.0.1", server.metrics_port(), "/readyz");
  ASSERT_TRUE(readyz.ok()) << readyz.status();
  EXPECT_EQ(readyz->status_code, 200);

  ScoreResponse scored;
  ASSERT_TRUE(CallScore(channel, "a", "four", &scored).ok());
  EXPECT_EQ(scored.results(0).score(), 4.0);

  auto page = metrics::HttpGet("127.0.0.1", server.metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->status_code, 200);
  EXPECT_NE(page->body.find("rlmesh_testsvc_serving 1\n"), std::string::npos) << page->body;
  EXPECT_NE(page->body.find("rlmesh_testsvc_grpc_requests_total{code=\"OK\",method=\""
                            "rlmesh.v1.RewardService/Score\"} 1\n"),
            std::string::npos)
      << page->body;
  EXPECT_NE(page->body.find("rlmesh_testsvc_grpc_request_duration_seconds_count{method=\""
                            "rlmesh.v1.RewardService/Score\"} 1\n"),
            std::string::npos);
  // The health Watch streams WaitForServing opened (one cut by its deadline, one cancelled
  // once SERVING) are waits, not requests: no error and no latency of theirs is counted.
  EXPECT_EQ(page->body.find("grpc.health.v1.Health/Watch\"} 1"), std::string::npos) << page->body;
  EXPECT_EQ(page->body.find("code=\"UNKNOWN\""), std::string::npos) << page->body;
  auto checked = metrics::PromtoolCheckMetrics(page->body);
  if (checked.status().code() != absl::StatusCode::kNotFound) {
    EXPECT_TRUE(checked.ok()) << checked.status();
  } else {
    std::fprintf(stderr, "skipping promtool check: %s\n",
                 std::string(checked.status().message()).c_str());
  }

  // An RPC in flight when SIGTERM arrives.
  auto slow = std::async(std::launch::async, [&] {
    ScoreResponse out;
    grpc::Status s = CallScore(channel, "slow", "abc", &out);
    return std::make_pair(s, out);
  });
  service.entered_.WaitForNotification();

  int drains = 0;
  HealthCheckResponse::ServingStatus during_drain = HealthCheckResponse::UNKNOWN;
  server.SetDrainCallback([&] {
    ++drains;
    during_drain = CheckHealth(channel, kServiceName);
    service.release_.Notify();  // the in-flight work finishes
  });
  ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
  EXPECT_EQ(server.Wait(), SIGTERM);

  EXPECT_EQ(drains, 1);
  EXPECT_EQ(during_drain, HealthCheckResponse::NOT_SERVING);
  auto [slow_status, slow_out] = slow.get();
  EXPECT_TRUE(slow_status.ok()) << slow_status.error_message();
  EXPECT_EQ(slow_out.results(0).score(), 3.0);

  // Both ports are closed now.
  ScoreResponse after;
  EXPECT_EQ(
      CallScore(CreateChannel(server.address(), {.retry = {.max_attempts = 1}}), "b", "x", &after)
          .error_code(),
      grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(metrics::HttpGet("127.0.0.1", server.metrics_port(), "/metrics", 5).ok());
  // SetServing after shutdown is ignored rather than crashing.
  server.SetServing(true);
}

TEST(ServiceServerTest, ProgrammaticShutdownAndOneSignalOwner) {
  LengthReward service;
  auto first =
      ServiceServer::Create({.component = "one", .announce = false}, {{kServiceName, &service}});
  ASSERT_TRUE(first.ok()) << first.status();
  // Only one server per process may own SIGTERM/SIGINT.
  auto second =
      ServiceServer::Create({.component = "two", .announce = false}, {{kServiceName, &service}});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  auto quiet =
      ServiceServer::Create({.component = "three", .handle_signals = false, .announce = false},
                            {{kServiceName, &service}});
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  // Every method of the served services has its series at zero before any call.
  auto page = metrics::HttpGet("127.0.0.1", (*quiet)->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_NE(page->body.find("rlmesh_three_grpc_requests_total{code=\"OK\",method=\""
                            "rlmesh.v1.RewardService/Score\"} 0\n"),
            std::string::npos)
      << page->body;
  EXPECT_NE(page->body.find("rlmesh_three_grpc_request_duration_seconds_count{method=\""
                            "grpc.health.v1.Health/Check\"} 0\n"),
            std::string::npos)
      << page->body;

  int drains = 0;
  (*first)->SetDrainCallback([&] { ++drains; });
  (*first)->Shutdown();
  EXPECT_EQ((*first)->Wait(), 0);
  EXPECT_EQ(drains, 1);
  first->reset();
  // The signal slot is free again once the owner is gone.
  auto again =
      ServiceServer::Create({.component = "again", .announce = false}, {{kServiceName, &service}});
  EXPECT_TRUE(again.ok()) << again.status();
}

// A request above max_message_bytes (rlmesh.rpc.max_message_bytes) is refused with
// RESOURCE_EXHAUSTED before it is parsed, and the server goes on serving.
TEST(ServiceServerTest, AnOversizedRequestIsRefusedAndTheServerServesOn) {
  LengthReward service;
  auto server = ServiceServer::Create({.component = "small",
                                       .max_message_bytes = 1 << 20,
                                       .handle_signals = false,
                                       .announce = false},
                                      {{kServiceName, &service}});
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetServing(true);
  auto stub = rlmesh::v1::RewardService::NewStub(
      CreateChannel((*server)->address(), {.retry = {.max_attempts = 1}}));
  rlmesh::v1::ScoreRequest big;
  auto* item = big.add_items();
  item->set_id("a");
  item->set_data_source("x");
  item->set_response(std::string(2 << 20, 'x'));
  rlmesh::v1::ScoreResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub->Score(&context, big, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  item->set_response("xy");
  grpc::ClientContext again;
  status = stub->Score(&again, big, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  (*server)->Shutdown();
}

// A port another process holds: the message says why, and where the port is set.
TEST(ServiceServerTest, APortInUseSaysSoAndNamesTheKey) {
  LengthReward service;
  auto first =
      ServiceServer::Create({.component = "reward", .handle_signals = false, .announce = false},
                            {{kServiceName, &service}});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = ServiceServer::Create(
      {.component = "reward", .port = (*first)->port(), .handle_signals = false, .announce = false},
      {{kServiceName, &service}});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(),
            absl::StrCat("reward: cannot listen on 127.0.0.1:", (*first)->port(),
                         ": Address already in use (set --port or rlmesh.reward.port; 0 = any "
                         "free)"));
  auto metrics = ServiceServer::Create({.component = "reward",
                                        .metrics_port = (*first)->metrics_port(),
                                        .handle_signals = false,
                                        .announce = false},
                                       {{kServiceName, &service}});
  ASSERT_FALSE(metrics.ok());
  EXPECT_EQ(
      metrics.status().message(),
      absl::StrCat("reward: metrics server: cannot listen on 127.0.0.1:", (*first)->metrics_port(),
                   ": Address already in use (set --metrics_port or "
                   "rlmesh.reward.metrics_port; 0 = any free)"));
  (*first)->Shutdown();
}

TEST(ServiceServerTest, BadOptionsNameTheOption) {
  LengthReward service;
  auto bad = ServiceServer::Create({.component = "Bad-Name", .handle_signals = false},
                                   {{kServiceName, &service}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("component"), std::string::npos);
  bad = ServiceServer::Create({.port = 99999, .handle_signals = false}, {{kServiceName, &service}});
  EXPECT_NE(bad.status().message().find("port"), std::string::npos);
  bad = ServiceServer::Create({.handle_signals = false}, {{"", &service}});
  EXPECT_NE(bad.status().message().find("services"), std::string::npos);
}

}  // namespace
}  // namespace rlmesh::rpc
