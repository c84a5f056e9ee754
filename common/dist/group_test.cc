#include "common/dist/group.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "common/dist/local_group.h"

namespace rlmesh::dist {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::unique_ptr<Group>> JoinAll(int world_size, double timeout_s = 20) {
  auto groups = JoinLocalGroup(world_size, timeout_s);
  EXPECT_TRUE(groups.ok()) << groups.status();
  return groups.ok() ? std::move(groups).value() : std::vector<std::unique_ptr<Group>>();
}

template <typename F>
void OnEveryRank(std::vector<std::unique_ptr<Group>>& groups, F f) {
  dist::OnEveryRank(static_cast<int>(groups.size()), [&](int r) { f(r, *groups[r]); });
}

TEST(GroupTest, AllReduceSumsEveryDtypeAndShapeInPlace) {
  auto groups = JoinAll(3);
  ASSERT_EQ(groups.size(), 3u);
  std::vector<torch::Tensor> floats(3), doubles(3), bf16(3);
  OnEveryRank(groups, [&](int r, Group& g) {
    floats[r] = torch::full({2, 3}, static_cast<float>(r + 1));
    doubles[r] = torch::tensor({1.0 * r, 10.0 * r}, torch::kFloat64);
    bf16[r] = torch::full({4}, 0.5 * (r + 1)).to(torch::kBFloat16);
    EXPECT_TRUE(g.AllReduceSum({floats[r], doubles[r], bf16[r]}, "test").ok());
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(torch::equal(floats[r], torch::full({2, 3}, 6.0f))) << r;
    EXPECT_TRUE(torch::equal(doubles[r], torch::tensor({3.0, 30.0}, torch::kFloat64))) << r;
    EXPECT_EQ(bf16[r].scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(bf16[r], torch::full({4}, 3.0).to(torch::kBFloat16))) << r;
  }
}

TEST(GroupTest, AllGatherAndReduceScatterMoveShardsAndCountTheRingVolume) {
  auto groups = JoinAll(3);
  ASSERT_EQ(groups.size(), 3u);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    std::vector<torch::Tensor> gathered(3), mine(3);
    std::vector<int64_t> before(3), after(3);
    OnEveryRank(groups, [&](int r, Group& g) {
      before[r] = g.bytes_communicated();
      const auto shard = torch::arange(4 * r, 4 * r + 4, torch::kFloat32).to(dtype);
      gathered[r] = torch::empty({12}, dtype);
      ASSERT_TRUE(g.AllGather(shard, gathered[r], "gather").ok());
      // Rank r contributes (r + 1) x [0 .. 11]: the sums are 6 x [0 .. 11].
      const auto full = (torch::arange(12, torch::kFloat32) * (r + 1)).to(dtype);
      mine[r] = torch::empty({4}, dtype);
      ASSERT_TRUE(g.ReduceScatterSum(full, mine[r], "scatter").ok());
      after[r] = g.bytes_communicated();
    });
    for (int r = 0; r < 3; ++r) {
      EXPECT_TRUE(torch::equal(gathered[r], torch::arange(12, torch::kFloat32).to(dtype))) << r;
      EXPECT_TRUE(
          torch::equal(mine[r], (torch::arange(4 * r, 4 * r + 4, torch::kFloat32) * 6).to(dtype)))
          << r << " " << mine[r];
      // 2/3 of the full buffer each way (bfloat16 is reduced in float32).
      const int64_t size = dtype == torch::kFloat32 ? 4 : 2;
      EXPECT_EQ(after[r] - before[r], 12 * size * 2 / 3 + 12 * 4 * 2 / 3) << r;
    }
  }
  OnEveryRank(groups, [&](int, Group& g) {
    auto status = g.AllGather(torch::zeros({4}), torch::zeros({11}), "a bad gather");
    EXPECT_THAT(status.message(), HasSubstr("a bad gather: 11 elements are not 3 shards of 4"));
  });
}

// A mesh of 6 ranks in shard groups of 3 ({0,1,2}, {3,4,5}), replicated twice ({0,3},
// {1,4}, {2,5}): each scope's collectives reach exactly its ranks.
TEST(GroupTest, AMeshScopesCollectivesToShardGroupsAndReplicas) {
  auto groups = JoinAll(6);
  ASSERT_EQ(groups.size(), 6u);
  std::vector<torch::Tensor> gathered(6), mine(6), across(6), world(6);
  std::vector<int64_t> bytes(6);
  OnEveryRank(groups, [&](int r, Group& g) {
    ASSERT_TRUE(g.FormMesh(3).ok());
    EXPECT_EQ(g.shard_size(), 3);
    EXPECT_EQ(g.shard_rank(), r % 3);
    EXPECT_EQ(g.replicas(), 2);
    EXPECT_EQ(g.replica(), r / 3);
    const int64_t before = g.bytes_communicated();
    gathered[r] = torch::empty({3});
    ASSERT_TRUE(g.AllGather(torch::full({1}, 1.0f * r), gathered[r], "gather", Scope::kShard).ok());
    const auto full = torch::arange(3, torch::kFloat32) + 10 * r;
    mine[r] = torch::empty({1});
    ASSERT_TRUE(g.ReduceScatterSum(full, mine[r], "scatter", Scope::kShard).ok());
    across[r] = torch::full({1}, 1.0f * r);
    ASSERT_TRUE(g.AllReduceSum({across[r]}, "replicas", Scope::kReplicate).ok());
    bytes[r] = g.bytes_communicated() - before;
    world[r] = torch::full({1}, 1.0f * r);
    ASSERT_TRUE(g.AllReduceSum({world[r]}, "world").ok());
    // The same size again is a no-op; another is refused.
    EXPECT_TRUE(g.FormMesh(3).ok());
    EXPECT_THAT(g.FormMesh(2).message(), HasSubstr("already formed with shard groups of 3"));
  });
  for (int r = 0; r < 6; ++r) {
    const float first = 3.0f * (r / 3);  // the first rank of r's shard group
    EXPECT_TRUE(torch::equal(gathered[r], torch::tensor({first, first + 1, first + 2}))) << r;
    // Shard rank i keeps element i of the sum over its group: 3 i + 10 (3 first + 3).
    EXPECT_FLOAT_EQ(mine[r].item<float>(), 3.0f * (r % 3) + 10 * (3 * first + 3)) << r;
    EXPECT_FLOAT_EQ(across[r].item<float>(), (r % 3) * 2 + 3) << r;
    EXPECT_FLOAT_EQ(world[r].item<float>(), 15) << r;
    // Ring volumes over 3 ranks (gather, scatter) and 2 (all-reduce, two passes).
    EXPECT_EQ(bytes[r], 12 * 2 / 3 + 12 * 2 / 3 + 2 * 4 * 1 / 2) << r;
  }
  auto four = JoinAll(4);
  ASSERT_EQ(four.size(), 4u);
  EXPECT_THAT(four[0]->FormMesh(3).message(),
              HasSubstr("shard groups of 3 ranks do not divide a group of 4 ranks"));
}

TEST(GroupTest, CommandsArriveInOrderAndAFailureNamesItsRank) {
  auto groups = JoinAll(3);
  ASSERT_EQ(groups.size(), 3u);
  std::vector<std::vector<std::string>> seen(3);
  std::vector<absl::Status> finished(3);
  OnEveryRank(groups, [&](int r, Group& g) {
    for (int i = 0; i < 3; ++i) {
      if (r == 0) {
        ASSERT_TRUE(g.Post("op" + std::to_string(i), std::string("pay\0load", 8)).ok());
        seen[r].push_back("op" + std::to_string(i));
      } else {
        auto c = g.Next();
        ASSERT_TRUE(c.ok()) << c.status();
        EXPECT_EQ(c->payload, std::string("pay\0load", 8));
        EXPECT_EQ(c->sequence, i + 1);
        seen[r].push_back(c->op);
      }
      // The second command fails on rank 2 only.
      const absl::Status local = (i == 1 && r == 2)
                                     ? absl::InvalidArgumentError("input_ids: bad on this rank")
                                     : absl::OkStatus();
      const absl::Status s = g.Finish(local);
      if (i == 1)
        finished[r] = s;
      else
        EXPECT_TRUE(s.ok()) << s;
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(seen[r], (std::vector<std::string>{"op0", "op1", "op2"})) << r;
    EXPECT_EQ(finished[r].code(), absl::StatusCode::kInvalidArgument) << r;
    EXPECT_EQ(finished[r].message(), "trainer rank 2: input_ids: bad on this rank") << r;
  }
}

// The last rank leaves (its sockets close and its heartbeat stops); the others reduce.
std::vector<absl::Status> ReduceWithoutTheLastRank(std::vector<std::unique_ptr<Group>>& groups) {
  const int rest = static_cast<int>(groups.size()) - 1;
  groups.back().reset();
  std::vector<absl::Status> results(static_cast<size_t>(rest));
  std::vector<std::thread> threads;
  for (int r = 0; r < rest; ++r) {
    threads.emplace_back(
        [&, r] { results[r] = groups[r]->AllReduceSum({torch::ones({8})}, "reducing gradients"); });
  }
  for (auto& t : threads) t.join();
  return results;
}

TEST(GroupTest, ARankThatLeavesIsNamedAndTheGroupStaysBroken) {
  auto groups = JoinAll(3, /*timeout_s=*/10);
  ASSERT_EQ(groups.size(), 3u);
  const std::vector<absl::Status> results = ReduceWithoutTheLastRank(groups);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(results[r].ok()) << r;
    EXPECT_THAT(results[r].message(), HasSubstr("reducing gradients failed")) << r;
    EXPECT_THAT(results[r].message(), HasSubstr("trainer rank 2 is not responding")) << r;
    // Broken from now on, with the same message.
    EXPECT_EQ(groups[r]->AllReduceSum({torch::ones({1})}, "again"), results[r]);
  }
}

// A rank stopped in the middle of a request to the group's store wedges that store's server
// (it serves one request at a time). The heartbeats have servers of their own, so the
// failure still names the rank that left, not rank 0.
TEST(GroupTest, AWedgedStoreDoesNotHideWhoStoppedAnswering) {
  auto groups = JoinAll(3, /*timeout_s=*/10);
  ASSERT_EQ(groups.size(), 3u);
  const int port = groups[0]->port();
  // Half a request: a command byte and nothing after it.
  const int wedge = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(wedge, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(wedge, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const char half = 0;
  ASSERT_EQ(write(wedge, &half, 1), 1);
  {
    // The store no longer answers anyone (its client would wait for good: asked from a
    // thread that is left behind, and that ends once the wedge is gone).
    auto answered = std::make_shared<std::promise<bool>>();
    std::future<bool> answer = answered->get_future();
    std::thread([port, answered] {
      try {
        c10d::TCPStoreOptions o = StoreOptions();
        o.port = static_cast<uint16_t>(port);
        o.isServer = false;
        o.waitWorkers = false;
        c10d::TCPStore client("127.0.0.1", o);
        client.add("probe", 1);
        answered->set_value(true);
      } catch (const std::exception&) {
        answered->set_value(false);
      }
    }).detach();
    EXPECT_EQ(answer.wait_for(std::chrono::seconds(1)), std::future_status::timeout)
        << "the store was not wedged; this test shows nothing";
  }
  const std::vector<absl::Status> results = ReduceWithoutTheLastRank(groups);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(results[r].ok()) << r;
    EXPECT_THAT(results[r].message(), HasSubstr("trainer rank 2 is not responding")) << r;
    EXPECT_THAT(results[r].message(), Not(HasSubstr("rank 0 is"))) << r;
  }
  close(wedge);
}

TEST(GroupTest, RanksOtherThanZeroLearnThatRankZeroIsGone) {
  auto groups = JoinAll(2);
  ASSERT_EQ(groups.size(), 2u);
  groups[0].reset();  // the store goes with it
  auto next = groups[1]->Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(next.status().message(), HasSubstr("lost rank 0"));
}

TEST(GroupTest, BadRanksAreRefused) {
  GroupOptions o;
  o.rank = 2;
  o.world_size = 2;
  EXPECT_THAT(Group::Join(o).status().message(), HasSubstr("rank 2 of world size 2"));
  o.rank = 1;
  EXPECT_THAT(Group::Join(o).status().message(), HasSubstr("port must be given"));
}

TEST(GroupTest, AWorldOfOneNeedsNoPeers) {
  auto groups = JoinAll(1);
  ASSERT_EQ(groups.size(), 1u);
  auto t = torch::ones({3});
  ASSERT_TRUE(groups[0]->AllReduceSum({t}, "x").ok());
  EXPECT_TRUE(torch::equal(t, torch::ones({3})));
  EXPECT_TRUE(groups[0]->Post("op", "").ok());
  EXPECT_TRUE(groups[0]->Finish(absl::OkStatus()).ok());
}

TEST(GroupTest, ABackendOtherThanGlooOrNcclIsRefused) {
  GroupOptions o;
  o.backend = "mpi";
  const auto joined = Group::Join(o);
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(joined.status().message(), HasSubstr("backend \"mpi\": expected gloo or nccl"));
}

// Both ways a machine can lack NCCL collectives: a build without NCCL (FailedPrecondition) or
// no GPU (Unavailable, CUDA's reason). Every rank is refused, none waits for the others.
TEST(GroupTest, BackendNcclWithoutAGpuIsRefusedAtJoinSayingWhy) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a GPU";
  const auto groups = JoinLocalGroup(2, 20, "nccl");
  ASSERT_FALSE(groups.ok());
  EXPECT_THAT(groups.status().code(), ::testing::AnyOf(absl::StatusCode::kFailedPrecondition,
                                                       absl::StatusCode::kUnavailable));
  EXPECT_THAT(groups.status().message(), HasSubstr("trainer rank 0: backend nccl: "));
}

// The GPU cases run on a machine with a CUDA LibTorch (tests/gpu/run.sh's project stage).
TEST(GroupTest, NcclBackendOnOneGpuTakesCudaTensorsAndRefusesOthers) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto groups = JoinLocalGroup(1, 60, "nccl");
  ASSERT_TRUE(groups.ok()) << groups.status();
  Group& g = *(*groups)[0];
  EXPECT_TRUE(g.device_collectives());
  const torch::Device gpu(torch::kCUDA, 0);
  auto on_gpu = torch::arange(6, torch::kFloat32).to(gpu);
  auto on_cpu = torch::ones({2}, torch::kFloat64);
  ASSERT_TRUE(g.AllReduceSum({on_gpu, on_cpu}, "mixed").ok());
  EXPECT_TRUE(torch::equal(on_gpu.cpu(), torch::arange(6, torch::kFloat32)));
  const auto shard = torch::arange(4, torch::kFloat32).to(torch::kBFloat16).to(gpu);
  auto full = torch::empty({4}, shard.options());
  ASSERT_TRUE(g.AllGather(shard, full, "gather").ok());
  EXPECT_TRUE(torch::equal(full.cpu(), shard.cpu()));
  EXPECT_THAT(g.AllGather(shard, torch::empty({4}, torch::kBFloat16), "mixed devices").message(),
              HasSubstr("one device"));
  if (torch::cuda::device_count() > 1) {
    EXPECT_THAT(
        g.AllReduceSum({torch::ones({2}, torch::Device(torch::kCUDA, 1))}, "other gpu").message(),
        HasSubstr("CUDA tensors on cuda:0"));
  }
}

// Backend gloo on CUDA tensors: through host copies, so ranks that share one GPU form a group.
TEST(GroupTest, GlooBackendTakesCudaTensorsThroughHostMemory) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto groups = JoinAll(2);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_FALSE(groups[0]->device_collectives());
  const torch::Device gpu(torch::kCUDA, 0);
  std::vector<torch::Tensor> sums(2), gathered(2), mine(2);
  OnEveryRank(groups, [&](int r, Group& g) {
    sums[r] = torch::full({5}, 0.5 * (r + 1)).to(torch::kBFloat16).to(gpu);
    ASSERT_TRUE(g.AllReduceSum({sums[r]}, "sum").ok());
    const auto shard = torch::arange(3 * r, 3 * r + 3, torch::kFloat32).to(gpu);
    gathered[r] = torch::empty({6}, shard.options());
    ASSERT_TRUE(g.AllGather(shard, gathered[r], "gather").ok());
    const auto full = (torch::arange(6, torch::kFloat32) * (r + 1)).to(gpu);
    mine[r] = torch::empty({3}, full.options());
    ASSERT_TRUE(g.ReduceScatterSum(full, mine[r], "scatter").ok());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(sums[r].is_cuda());
    EXPECT_TRUE(torch::equal(sums[r].cpu(), torch::full({5}, 1.5).to(torch::kBFloat16))) << r;
    EXPECT_TRUE(torch::equal(gathered[r].cpu(), torch::arange(6, torch::kFloat32))) << r;
    EXPECT_TRUE(torch::equal(mine[r].cpu(), torch::arange(3 * r, 3 * r + 3, torch::kFloat32) * 3))
        << r;
  }
}

TEST(GroupTest, NcclBackendAcrossTwoGpusSumsGathersAndScattersOnTheDevice) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  auto joined = JoinLocalGroup(2, 10, "nccl");
  ASSERT_TRUE(joined.ok()) << joined.status();
  auto& groups = *joined;
  std::vector<torch::Tensor> floats(2), bf16(2), doubles(2), gathered(2), mine(2);
  OnEveryRank(groups, [&](int r, Group& g) {
    const torch::Device gpu(torch::kCUDA, r);
    floats[r] = torch::full({2, 3}, static_cast<float>(r + 1), gpu);
    bf16[r] = torch::full({4}, 0.5 * (r + 1)).to(torch::kBFloat16).to(gpu);
    doubles[r] = torch::tensor({1.0 * r, 10.0 * r}, torch::kFloat64);  // on the CPU: Gloo
    ASSERT_TRUE(g.AllReduceSum({floats[r], bf16[r], doubles[r]}, "sum").ok());
    const auto shard = torch::arange(4 * r, 4 * r + 4, torch::kFloat32).to(gpu);
    gathered[r] = torch::empty({8}, shard.options());
    ASSERT_TRUE(g.AllGather(shard, gathered[r], "gather").ok());
    const auto full = (torch::arange(8, torch::kFloat32) * (r + 1)).to(torch::kBFloat16).to(gpu);
    mine[r] = torch::empty({4}, full.options());
    ASSERT_TRUE(g.ReduceScatterSum(full, mine[r], "scatter").ok());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(torch::equal(floats[r].cpu(), torch::full({2, 3}, 3.0f))) << r;
    EXPECT_EQ(bf16[r].scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(bf16[r].cpu(), torch::full({4}, 1.5).to(torch::kBFloat16))) << r;
    EXPECT_TRUE(torch::equal(doubles[r], torch::tensor({1.0, 10.0}, torch::kFloat64))) << r;
    EXPECT_TRUE(torch::equal(gathered[r].cpu(), torch::arange(8, torch::kFloat32))) << r;
    EXPECT_TRUE(torch::equal(
        mine[r].cpu(), (torch::arange(4 * r, 4 * r + 4, torch::kFloat32) * 3).to(torch::kBFloat16)))
        << r;
  }
  // A rank that stops calling: the other's collective times out and the group stays broken.
  groups[1].reset();
  auto t = torch::ones({3}, torch::Device(torch::kCUDA, 0));
  const absl::Status s = groups[0]->AllReduceSum({t}, "after rank 1 left");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("after rank 1 left"));
  EXPECT_EQ(groups[0]->AllReduceSum({t}, "again").code(), s.code());
}

}  // namespace
}  // namespace rlmesh::dist
