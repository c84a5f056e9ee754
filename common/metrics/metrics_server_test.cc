// MetricsServer over a real loopback socket: status line, content type, a counter's value,
// 404 for other paths, a fresh port per server, clean Stop(), and promtool's verdict.
#include "common/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "common/metrics/http_get.h"
#include "common/metrics/process_metrics.h"
#include "common/metrics/promtool.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"

namespace rlmesh::metrics {
namespace {

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = std::make_shared<prometheus::Registry>();
    auto& requests = prometheus::BuildCounter()
                         .Name("rlmesh_test_requests_total")
                         .Help("Requests handled by the test.")
                         .Register(*registry_);
    requests.Add({{"rpc", "Generate"}}).Increment(3);
    requests.Add({{"rpc", "Abort"}}).Increment();
    prometheus::BuildGauge()
        .Name("rlmesh_test_queue_depth")
        .Help("Sequences waiting.")
        .Register(*registry_)
        .Add({})
        .Set(7);
    auto& hist = prometheus::BuildHistogram()
                     .Name("rlmesh_test_step_seconds")
                     .Help("Step time.")
                     .Register(*registry_)
                     .Add({}, prometheus::Histogram::BucketBoundaries{0.1, 1, 10});
    hist.Observe(0.5);
    hist.Observe(20);
    auto server = MetricsServer::Create({.host = "127.0.0.1", .port = 0}, registry_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, ServesTextFormatWithCurrentValues) {
  ASSERT_GT(server_->port(), 0);
  auto got = HttpGet("127.0.0.1", server_->port(), "/metrics");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status_line, "HTTP/1.1 200 OK");
  EXPECT_TRUE(got->headers["content-type"].starts_with("text/plain; version=0.0.4"))
      << got->headers["content-type"];
  EXPECT_NE(got->body.find("# TYPE rlmesh_test_requests_total counter"), std::string::npos);
  EXPECT_NE(got->body.find("rlmesh_test_requests_total{rpc=\"Generate\"} 3\n"), std::string::npos)
      << got->body;
  EXPECT_NE(got->body.find("rlmesh_test_queue_depth 7\n"), std::string::npos);
  // Histogram buckets are cumulative: 0.5 falls in le=1 and le=10, 20 only in +Inf.
  EXPECT_NE(got->body.find("rlmesh_test_step_seconds_bucket{le=\"1\"} 1\n"), std::string::npos);
  EXPECT_NE(got->body.find("rlmesh_test_step_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);

  // The page reflects the registry at scrape time.
  prometheus::BuildCounter()
      .Name("rlmesh_test_requests_total")
      .Register(*registry_)
      .Add({{"rpc", "Generate"}})
      .Increment(2);
  got = HttpGet("127.0.0.1", server_->port(), "/metrics?x=1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NE(got->body.find("rlmesh_test_requests_total{rpc=\"Generate\"} 5\n"), std::string::npos);
}

TEST_F(MetricsServerTest, OtherPathsAre404) {
  for (const char* path : {"/", "/metric", "/metrics/x", "/healthz"}) {
    auto got = HttpGet("127.0.0.1", server_->port(), path);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->status_code, 404) << path;
  }
}

TEST_F(MetricsServerTest, ReadyzFollowsSetReady) {
  auto got = HttpGet("127.0.0.1", server_->port(), "/readyz");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status_code, 503);
  server_->SetReady(true);
  got = HttpGet("127.0.0.1", server_->port(), "/readyz");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status_code, 200);
  EXPECT_EQ(got->body, "ready\n");
  server_->SetReady(false);
  got = HttpGet("127.0.0.1", server_->port(), "/readyz");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status_code, 503);
}

TEST_F(MetricsServerTest, MalformedRequestIs400AndServerKeepsServing) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string junk = "hello\r\n\r\n";
  ASSERT_EQ(::send(fd, junk.data(), junk.size(), 0), static_cast<ssize_t>(junk.size()));
  char buf[64] = {};
  ASSERT_GT(::recv(fd, buf, sizeof(buf) - 1, MSG_WAITALL), 12);
  EXPECT_EQ(std::string(buf, 12), "HTTP/1.1 400");
  ::close(fd);
  auto got = HttpGet("127.0.0.1", server_->port(), "/metrics");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status_code, 200);
}

TEST_F(MetricsServerTest, StopClosesThePortAndIsIdempotent) {
  const int port = server_->port();
  server_->Stop();
  server_->Stop();
  auto got = HttpGet("127.0.0.1", port, "/metrics", 2.0);
  EXPECT_FALSE(got.ok());
}

TEST_F(MetricsServerTest, TwoServersGetDifferentPortsAndABusyPortIsAnError) {
  auto other = MetricsServer::Create({.host = "127.0.0.1", .port = 0}, registry_);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE((*other)->port(), server_->port());
  auto clash = MetricsServer::Create({.host = "127.0.0.1", .port = server_->port()}, registry_);
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(clash.status().message().find(std::to_string(server_->port())), std::string::npos);
}

TEST(MetricsServerCreateTest, AcceptsHostNames) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto server = MetricsServer::Create({.host = "localhost"}, registry);
  ASSERT_TRUE(server.ok()) << server.status();
  auto got = HttpGet("127.0.0.1", (*server)->port(), "/metrics");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status_code, 200);
}

TEST(MetricsServerCreateTest, RejectsBadOptions) {
  auto registry = std::make_shared<prometheus::Registry>();
  EXPECT_EQ(MetricsServer::Create({.host = "localhost:1"}, registry).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Create({.host = "no-such-host.invalid"}, registry).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Create({.port = 70000}, registry).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Create({}, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MetricsServerTest, PromtoolAcceptsTheOutput) {
  auto got = HttpGet("127.0.0.1", server_->port(), "/metrics");
  ASSERT_TRUE(got.ok()) << got.status();
  auto checked = PromtoolCheckMetrics(got->body);
  if (checked.status().code() == absl::StatusCode::kNotFound) {
    GTEST_SKIP() << checked.status().message();
  }
  EXPECT_TRUE(checked.ok()) << checked.status();
}

TEST(PromtoolTest, RejectsACounterWithoutTotalSuffix) {
  auto checked = PromtoolCheckMetrics(
      "# HELP rlmesh_bad_requests Bad name.\n# TYPE rlmesh_bad_requests counter\n"
      "rlmesh_bad_requests 1\n");
  if (checked.status().code() == absl::StatusCode::kNotFound) {
    GTEST_SKIP() << checked.status().message();
  }
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(checked.status().message().find("_total"), std::string::npos)
      << checked.status().message();
}

// The capacity given (rlmesh.device_memory_gb) is the one served, and the utilization divides
// by the threads given (rlmesh.num_threads): twice as many threads, at most half the share.
TEST(ProcessMetricsTest, TheCapacityAndThreadsGivenAreTheOnesUsed) {
  auto served = [](prometheus::Registry& registry, const std::string& name) {
    for (const auto& family : registry.Collect()) {
      if (family.name == name && !family.metric.empty()) return family.metric[0].gauge.value;
    }
    return -1.0;
  };
  prometheus::Registry registry;
  ProcessMetrics metrics(registry, {.period = absl::Hours(1),
                                    .device_memory_capacity_bytes = 3.0 * (1ull << 30),
                                    .threads = 1000});
  EXPECT_EQ(served(registry, "rlmesh_process_device_memory_capacity_bytes"), 3.0 * (1ull << 30));
  // This process cannot keep 1000 threads busy: well under 1 of them.
  volatile double sink = 0;
  for (int i = 0; i < 20000000; ++i) sink = sink + i;
  metrics.Update();
  EXPECT_LT(served(registry, "rlmesh_process_device_utilization_ratio"), 0.01);

  prometheus::Registry detected;
  ProcessMetrics detect(detected, {.period = absl::Hours(1)});
  EXPECT_GT(served(detected, "rlmesh_process_device_memory_capacity_bytes"), 3.0 * (1ull << 30));
}

}  // namespace
}  // namespace rlmesh::metrics
