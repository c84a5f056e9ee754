// The reason MetricsServer exists: prometheus-cpp's civetweb exposer cannot start its threads
// once LibTorch and OpenBLAS are loaded (their static TLS leaves no room in civetweb's
// 100 KiB thread stacks). This runs a BLAS-backed matmul first, so LibTorch and OpenBLAS are
// loaded and initialised, and then starts a full ServiceServer: gRPC, health and /metrics must
// all work in that process.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/metrics/http_get.h"
#include "common/rpc/client.h"
#include "common/rpc/service_server.h"
#include "rlmesh/v1/reward.grpc.pb.h"

namespace rlmesh::rpc {
namespace {

TEST(TorchCoexistenceTest, ServiceServerRunsAfterLibTorchAndBlasAreLoaded) {
  // [[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]].
  const torch::Tensor a = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).reshape({2, 2});
  const torch::Tensor b = torch::tensor({5.0f, 6.0f, 7.0f, 8.0f}).reshape({2, 2});
  const torch::Tensor c = torch::mm(a, b);
  ASSERT_FLOAT_EQ(c[1][1].item<float>(), 50.0f);

  rlmesh::v1::RewardService::Service reward;
  auto server =
      ServiceServer::Create({.component = "torchsvc", .handle_signals = false, .announce = false},
                            {{"rlmesh.v1.RewardService", &reward}});
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetServing(true);
  EXPECT_TRUE(WaitForServing(CreateChannel((*server)->address()), "", 30).ok());
  auto page = metrics::HttpGet("127.0.0.1", (*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->status_code, 200);
  EXPECT_NE(page->body.find("rlmesh_torchsvc_serving 1\n"), std::string::npos);
}

}  // namespace
}  // namespace rlmesh::rpc
