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

  // A dual-stack answer: each pod once, by its IPv4 address.
  answer_ = std::vector<std::string>{"10.0.0.2", "10.0.0.3", "[fd00::2]", "[fd00::3]"};
  ASSERT_TRUE(discovery.RefreshOnce().ok());
  fleet = Fleet();
  EXPECT_EQ(fleet.size(), 3u);
  EXPECT_EQ(fleet.count("dns-[fd00::2]:50051"), 0u);

  // Scaled to zero.
  answer_ = std::vector<std::string>{};
  ASSERT_TRUE(discovery.RefreshOnce().ok());
  EXPECT_EQ(Fleet().size(), 1u);
}

TEST(ReplicaAddressesTest, ListsResolvesOrKeepsTheTarget) {
  std::vector<std::string> asked;
  Resolver resolver = [&asked](const std::string& name)
      -> absl::StatusOr<std::vector<std::string>> {
    asked.push_back(name);
    if (name == "ref.ns.svc") return std::vector<std::string>{"10.0.0.7", "10.0.0.9", "[fd00::7]"};
    if (name == "one") return std::vector<std::string>{"10.0.0.3", "[fd00::3]"};
    if (name == "v6only") return std::vector<std::string>{"[fd00::1]", "[fd00::2]"};
    if (name == "empty") return std::vector<std::string>{};
    return absl::UnavailableError("resolving " + name + ": Name or service not known");
  };
  using V = std::vector<std::string>;
  // Lists: every entry once, in order.
  EXPECT_EQ(*ReplicaAddresses("ipv4:127.0.0.1:7001,127.0.0.2:7001,127.0.0.1:7001", resolver),
            (V{"127.0.0.1:7001", "127.0.0.2:7001"}));
  EXPECT_EQ(*ReplicaAddresses("ipv6:[::1]:7001,[::2]:7001", resolver),
            (V{"[::1]:7001", "[::2]:7001"}));
  EXPECT_EQ(ReplicaAddresses("ipv4:", resolver).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Names: the IPv4 answers with the port; IPv6 only when there is no IPv4 answer.
  EXPECT_EQ(*ReplicaAddresses("ref.ns.svc:50053", resolver),
            (V{"10.0.0.7:50053", "10.0.0.9:50053"}));
  EXPECT_EQ(*ReplicaAddresses("dns:///ref.ns.svc:50053", resolver),
            (V{"10.0.0.7:50053", "10.0.0.9:50053"}));
  EXPECT_EQ(*ReplicaAddresses("dns://8.8.8.8/ref.ns.svc:50053", resolver),
            (V{"10.0.0.7:50053", "10.0.0.9:50053"}));
  EXPECT_EQ(*ReplicaAddresses("v6only:9", resolver), (V{"[fd00::1]:9", "[fd00::2]:9"}));
  // One server (one IPv4 answer beside its IPv6 one): the target itself, so TLS checks the
  // name it was dialed by.
  EXPECT_EQ(*ReplicaAddresses("one:50053", resolver), (V{"one:50053"}));
  // Literals, no port, unix sockets: unchanged, without a lookup.
  asked.clear();
  for (const std::string target :
       {"10.1.2.3:50053", "[fd00::5]:50053", "fd00::5", "unix:/run/ref.sock", "ref"}) {
    EXPECT_EQ(*ReplicaAddresses(target, resolver), V{target});
  }
  EXPECT_TRUE(asked.empty());
  // Failures say what.
  auto unknown = ReplicaAddresses("nowhere:1", resolver);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(unknown.status().message().find("nowhere"), std::string::npos);
  EXPECT_EQ(ReplicaAddresses("empty:1", resolver).status().code(), absl::StatusCode::kUnavailable);
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
