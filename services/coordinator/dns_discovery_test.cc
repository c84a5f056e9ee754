// DnsDiscovery against a RolloutPool of fake replicas, with a scripted resolver: addresses
// that appear join (SYNCING, then READY after bring-up), ones that leave the answer are
// unregistered, a failed lookup changes nothing, and replicas registered otherwise stay.
#include "services/coordinator/dns_discovery.h"

#include <map>
#include <memory>

#include "gtest/gtest.h"
#include "services/coordinator/fakes.h"

namespace rlmesh::coordinator {
namespace {

class DnsDiscoveryTest : public ::testing::Test {
 protected:
  DnsDiscoveryTest()
      : pool_({}, [](const std::string&) {
          return std::make_unique<FakeRollout>(std::make_shared<FakeRollout::State>());
        }) {
    pool_.SetBringUp([](const std::string&, const std::string&) -> absl::StatusOr<v1::WeightVersion> {
      return v1::WeightVersion();
    });
  }

  std::map<std::string, v1::ReplicaState> Fleet() const {
    std::map<std::string, v1::ReplicaState> fleet;
    for (const auto& r : pool_.List()) fleet[r.replica_id()] = r.state();
    return fleet;
  }

  RolloutPool pool_;
  absl::StatusOr<std::vector<std::string>> answer_;
};

TEST_F(DnsDiscoveryTest, FollowsTheAnswer) {
  pool_.Register("10.0.0.99:50051", "static", 8, {});
  DnsDiscovery discovery({"rollout.ns.svc", 50051, absl::Seconds(1)}, &pool_,
                         [this](const std::string& name) {
                           EXPECT_EQ(name, "rollout.ns.svc");
                           return answer_;
                         });
  answer_ = std::vector<std::string>{"10.0.0.1", "10.0.0.2"};
  ASSERT_TRUE(discovery.RefreshOnce().ok());
  auto fleet = Fleet();
  ASSERT_EQ(fleet.size(), 3u);
  EXPECT_EQ(fleet.at("dns-10.0.0.1:50051"), v1::REPLICA_STATE_SYNCING);
  EXPECT_EQ(fleet.at("dns-10.0.0.2:50051"), v1::REPLICA_STATE_SYNCING);

  // Brought up at the step boundary; a second identical answer keeps them READY.
  pool_.SyncReplicas();
  ASSERT_TRUE(discovery.RefreshOnce().ok());
  fleet = Fleet();
  EXPECT_EQ(fleet.at("dns-10.0.0.1:50051"), v1::REPLICA_STATE_READY);
  EXPECT_EQ(fleet.at("dns-10.0.0.2:50051"), v1::REPLICA_STATE_READY);
  // The refresh keeps the replica's real capacity, learnt at bring-up (the fakes report 8).
  for (const auto& r : pool_.List()) {
    if (r.replica_id() == "dns-10.0.0.1:50051") {
      EXPECT_EQ(r.max_num_seqs(), 8);
    }
  }

  // A lookup failure keeps the fleet.
  answer_ = absl::UnavailableError("resolving rollout.ns.svc: Temporary failure");
  EXPECT_FALSE(discovery.RefreshOnce().ok());
  EXPECT_EQ(Fleet().size(), 3u);

  // Scale 2 -> 2 with one replaced: .1 leaves, .3 joins; the static replica stays.
  answer_ = std::vector<std::string>{"10.0.0.2", "10.0.0.3"};
  ASSERT_TRUE(discovery.RefreshOnce().ok());
  fleet = Fleet();
  EXPECT_EQ(fleet.count("dns-10.0.0.1:50051"), 0u);
  EXPECT_EQ(fleet.at("dns-10.0.0.2:50051"), v1::REPLICA_STATE_READY);
  EXPECT_EQ(fleet.at("dns-10.0.0.3:50051"), v1::REPLICA_STATE_SYNCING);
  EXPECT_EQ(fleet.count("static"), 1u);

  // Scaled to zero.
  answer_ = std::vector<std::string>{};
  ASSERT_TRUE(discovery.RefreshOnce().ok());
  EXPECT_EQ(Fleet().size(), 1u);
}

TEST(ResolveHostTest, ResolvesLocalhostAndNamesAnUnknownHost) {
  auto local = ResolveHost("localhost");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_FALSE(local->empty());
  auto missing = ResolveHost("no-such-host.invalid");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no-such-host.invalid"), std::string::npos);
}

}  // namespace
}  // namespace rlmesh::coordinator
