// Client helpers: backoff schedule, CallWithRetry's retry rule (only UNAVAILABLE), and
// WaitForServing against grpc++'s built-in health service on an in-process server.
#include "common/rpc/client.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <memory>
#include <vector>

#include "rlmesh/v1/reward.grpc.pb.h"
#include "rlmesh/v1/trainer.grpc.pb.h"

namespace rlmesh::rpc {
namespace {

TEST(BackoffTest, GrowsGeometricallyUpToTheCap) {
  const RetryPolicy policy{.max_attempts = 6,
                           .initial_backoff_seconds = 0.1,
                           .max_backoff_seconds = 0.5,
                           .multiplier = 2.0};
  EXPECT_DOUBLE_EQ(BackoffSeconds(policy, 1), 0.1);
  EXPECT_DOUBLE_EQ(BackoffSeconds(policy, 2), 0.2);
  EXPECT_DOUBLE_EQ(BackoffSeconds(policy, 3), 0.4);
  EXPECT_DOUBLE_EQ(BackoffSeconds(policy, 4), 0.5);
  EXPECT_DOUBLE_EQ(BackoffSeconds(policy, 9), 0.5);
}

TEST(CallWithRetryTest, RetriesUnavailableThenSucceeds) {
  const RetryPolicy policy{.max_attempts = 5,
                           .initial_backoff_seconds = 0.1,
                           .max_backoff_seconds = 5,
                           .multiplier = 3.0};
  int calls = 0;
  std::vector<double> sleeps;
  const grpc::Status status = CallWithRetry(
      policy,
      [&](grpc::ClientContext* ctx) {
        EXPECT_NE(ctx, nullptr);
        ++calls;
        return calls < 3 ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "down") : grpc::Status::OK;
      },
      [&](double s) { sleeps.push_back(s); });
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(calls, 3);
  ASSERT_EQ(sleeps.size(), 2u);
  EXPECT_DOUBLE_EQ(sleeps[0], 0.1);
  EXPECT_NEAR(sleeps[1], 0.3, 1e-12);
}

TEST(CallWithRetryTest, GivesUpAfterMaxAttempts) {
  int calls = 0;
  int sleeps = 0;
  const grpc::Status status = CallWithRetry(
      RetryPolicy{.max_attempts = 4},
      [&](grpc::ClientContext*) {
        ++calls;
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "still down");
      },
      [&](double) { ++sleeps; });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(status.error_message(), "still down");
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(sleeps, 3);
}

TEST(CallWithRetryTest, OtherErrorsAreNotRetried) {
  int calls = 0;
  const grpc::Status status = CallWithRetry(
      RetryPolicy{},
      [&](grpc::ClientContext*) {
        ++calls;
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "items: empty");
      },
      [&](double) { ADD_FAILURE() << "slept"; });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(calls, 1);
}

class WaitForServingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    health()->SetServingStatus(false);
    health()->SetServingStatus(kName, false);
  }
  void TearDown() override { server_->Shutdown(); }
  grpc::HealthCheckServiceInterface* health() { return server_->GetHealthCheckService(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  static constexpr char kName[] = "rlmesh.v1.RewardService";
  rlmesh::v1::RewardService::Service service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(WaitForServingTest, TimesOutWhileNotServingAndNamesTheStatus) {
  const absl::Status s = WaitForServing(CreateChannel(address()), kName, 0.3);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("NOT_SERVING"), std::string::npos) << s;
  EXPECT_NE(s.message().find(kName), std::string::npos) << s;
}

TEST_F(WaitForServingTest, ReturnsOnceTheServerTurnsServing) {
  auto waiter = std::async(std::launch::async,
                           [&] { return WaitForServing(CreateChannel(address()), kName, 60); });
  health()->SetServingStatus(kName, true);
  EXPECT_TRUE(waiter.get().ok());
  // The overall status is separate and still NOT_SERVING.
  EXPECT_EQ(WaitForServing(CreateChannel(address()), "", 0.2).code(),
            absl::StatusCode::kDeadlineExceeded);
  health()->SetServingStatus(true);
  auto channel = ConnectWhenServing(address(), "", 60);
  EXPECT_TRUE(channel.ok()) << channel.status();
}

TEST(ConnectWhenServingTest, NobodyListeningTimesOutNamingTheAddress) {
  // Bind a port and close it again: nothing listens there afterwards.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto channel = ConnectWhenServing(address, "", 0.3);
  ASSERT_FALSE(channel.ok());
  EXPECT_EQ(channel.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(channel.status().message().find(address), std::string::npos) << channel.status();
}

// A trainer whose every RPC fails with UNAVAILABLE the first time it is called.
class FlakyTrainer final : public rlmesh::v1::TrainerService::Service {
 public:
  grpc::Status GetStatus(grpc::ServerContext*, const rlmesh::v1::GetTrainerStatusRequest*,
                         rlmesh::v1::GetTrainerStatusResponse* resp) override {
    resp->set_global_step(11);
    return ++status_calls == 1 ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "busy")
                               : grpc::Status::OK;
  }
  grpc::Status TrainStep(grpc::ServerContext*, const rlmesh::v1::TrainStepRequest*,
                         rlmesh::v1::TrainStepResponse*) override {
    return ++train_calls == 1 ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "busy")
                              : grpc::Status::OK;
  }
  std::atomic<int> status_calls{0};
  std::atomic<int> train_calls{0};
};

TEST(ChannelRetryTest, RetriesIdempotentCallsOnlyOnUnavailable) {
  FlakyTrainer trainer;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&trainer);
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = rlmesh::v1::TrainerService::NewStub(
      CreateChannel("127.0.0.1:" + std::to_string(port),
                    {.retry = {.max_attempts = 3, .initial_backoff_seconds = 0.01}}));
  {
    grpc::ClientContext ctx;
    rlmesh::v1::GetTrainerStatusResponse resp;
    const grpc::Status s = stub->GetStatus(&ctx, {}, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.global_step(), 11);
    EXPECT_EQ(trainer.status_calls.load(), 2);
  }
  {
    // TrainStep is not idempotent: the UNAVAILABLE reaches the caller, the step ran once.
    grpc::ClientContext ctx;
    rlmesh::v1::TrainStepResponse resp;
    EXPECT_EQ(stub->TrainStep(&ctx, {}, &resp).error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(trainer.train_calls.load(), 1);
  }
  server->Shutdown();
}

// A reward service that only counts its calls.
class CountingReward final : public rlmesh::v1::RewardService::Service {
 public:
  grpc::Status Score(grpc::ServerContext*, const rlmesh::v1::ScoreRequest*,
                     rlmesh::v1::ScoreResponse*) override {
    ++calls;
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
};

// Two replicas behind one name (here an ipv4: target with both addresses, as DNS gives for a
// headless Service): once both are connected, calls alternate between them instead of all
// going to the first (gRPC's default pick_first sent 12 of 12 to one reference replica).
TEST(ChannelBalancingTest, CallsGoRoundRobinOverEveryAddress) {
  CountingReward a, b;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::vector<int> ports(2, 0);
  for (int i = 0; i < 2; ++i) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &ports[i]);
    builder.RegisterService(i == 0 ? &a : &b);
    servers.push_back(builder.BuildAndStart());
    ASSERT_NE(servers.back(), nullptr);
  }
  auto stub = rlmesh::v1::RewardService::NewStub(CreateChannel(
      "ipv4:127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" + std::to_string(ports[1])));
  auto call = [&] {
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    rlmesh::v1::ScoreResponse resp;
    return stub->Score(&ctx, {}, &resp).ok();
  };
  // Until both connections are up, calls go to whichever is.
  for (int i = 0; i < 10000 && (a.calls == 0 || b.calls == 0); ++i) ASSERT_TRUE(call());
  ASSERT_GT(a.calls.load(), 0);
  ASSERT_GT(b.calls.load(), 0);
  const int a0 = a.calls, b0 = b.calls;
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(call());
  EXPECT_EQ(a.calls - a0, 10);
  EXPECT_EQ(b.calls - b0, 10);
  for (auto& s : servers) s->Shutdown();
}

}  // namespace
}  // namespace rlmesh::rpc
