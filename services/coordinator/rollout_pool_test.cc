#include "services/coordinator/rollout_pool.h"

#include "gtest/gtest.h"
#include "services/coordinator/fakes.h"

namespace rlmesh::coordinator {
namespace {

class RolloutPoolTest : public ::testing::Test {
 protected:
  RolloutPoolTest() {
    RolloutPoolOptions options;
    options.no_replica_timeout = absl::Milliseconds(10);
    Rebuild(options);
  }

  void Rebuild(const RolloutPoolOptions& options) {
    pool_ = std::make_unique<RolloutPool>(options, [this](const std::string& address) {
      auto& state = states_[address];
      if (!state) state = std::make_shared<FakeRollout::State>();
      return std::make_unique<FakeRollout>(state);
    });
    pool_->SetBringUp([this](const std::string&,
                             const std::string& address) -> absl::StatusOr<v1::WeightVersion> {
      auto& state = states_.at(address);
      absl::MutexLock lock(&state->mu);
      state->version = state->sample_version = current_;
      ++bring_ups_;
      v1::WeightVersion version;
      version.set_version(current_);
      return version;
    });
  }

  std::shared_ptr<FakeRollout::State> Add(const std::string& address) {
    auto state = std::make_shared<FakeRollout::State>();
    states_[address] = state;
    pool_->Register(address, "", 8, {});
    return state;
  }

  static std::vector<PromptToGenerate> Prompts(int count) {
    std::vector<PromptToGenerate> prompts;
    for (int p = 0; p < count; ++p) prompts.push_back({"p" + std::to_string(p), {1, 2, 3}});
    return prompts;
  }

  static v1::SamplingParams Params(int n) {
    v1::SamplingParams params;
    params.set_n(n);
    return params;
  }

  // Every group has n samples, sample i carries index i: each produced exactly once.
  static void ExpectComplete(const std::vector<GeneratedGroup>& groups, int prompts, int n) {
    ASSERT_EQ(groups.size(), static_cast<size_t>(prompts));
    for (const auto& group : groups) {
      ASSERT_EQ(group.samples.size(), static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(group.samples[i].token_ids_size(), 2);
        EXPECT_EQ(group.samples[i].token_ids(1), i) << group.prompt_id;
        EXPECT_FALSE(group.replica_ids[i].empty());
      }
    }
  }

  uint64_t current_ = 0;
  int bring_ups_ = 0;
  std::map<std::string, std::shared_ptr<FakeRollout::State>> states_;
  std::unique_ptr<RolloutPool> pool_;
};

// RegisterReplica's checks: a port that cannot be dialled, or a negative slot count, is
// refused naming the field (they were registered, and the replica lost at once).
TEST(RolloutPoolRegistrationTest, AnAddressWithoutADiallablePortIsRefused) {
  EXPECT_TRUE(RolloutPool::CheckRegistration("10.0.0.7:50051", 0).ok());
  EXPECT_TRUE(RolloutPool::CheckRegistration("[::1]:50051", 8).ok());
  for (const char* bad : {"", "host", ":50051", "host:", "host:0", "host:99999", "host:5x"}) {
    const absl::Status status = RolloutPool::CheckRegistration(bad, 8);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("address: expected \"host:port\" with a port in 1..65535"),
              std::string::npos)
        << status;
  }
  const absl::Status negative = RolloutPool::CheckRegistration("host:1", -5);
  EXPECT_EQ(negative.message(), "max_num_seqs: expected >= 0 (0 = not said), got -5");
}

TEST_F(RolloutPoolTest, OneReplicaServesEverySampleOnce) {
  Add("a:1");
  auto groups = pool_->Generate(Prompts(5), Params(4), "step1");
  ASSERT_TRUE(groups.ok()) << groups.status();
  ExpectComplete(*groups, 5, 4);
  EXPECT_EQ(states_["a:1"]->samples, 20);
  EXPECT_EQ(pool_->counters().samples_received, 20);
  EXPECT_EQ(pool_->counters().samples_redispatched, 0);
}

TEST_F(RolloutPoolTest, SpreadsPromptsOverEqualReplicas) {
  Add("a:1");
  Add("b:1");
  auto groups = pool_->Generate(Prompts(4), Params(2), "step1");
  ASSERT_TRUE(groups.ok()) << groups.status();
  ExpectComplete(*groups, 4, 2);
  EXPECT_EQ(states_["a:1"]->samples, 4);
  EXPECT_EQ(states_["b:1"]->samples, 4);
}

TEST_F(RolloutPoolTest, FailedReplicaSamplesAreRedispatchedNotDuplicated) {
  auto a = Add("a:1");
  Add("b:1");
  a->fail_after = 3;  // a returns 3 of its 8 samples, then dies
  auto groups = pool_->Generate(Prompts(4), Params(4), "step1");
  ASSERT_TRUE(groups.ok()) << groups.status();
  ExpectComplete(*groups, 4, 4);
  EXPECT_EQ(pool_->counters().samples_received, 16);
  EXPECT_EQ(pool_->counters().samples_redispatched, 5);
  EXPECT_EQ(pool_->counters().replicas_lost, 1);
  int from_a = 0;
  for (const auto& group : *groups) {
    for (const auto& id : group.replica_ids) from_a += id == "rollout-0";
  }
  EXPECT_EQ(from_a, 3);
  auto replicas = pool_->List();
  EXPECT_EQ(replicas[0].state(), v1::REPLICA_STATE_LOST);
  EXPECT_EQ(replicas[1].state(), v1::REPLICA_STATE_READY);
}

TEST_F(RolloutPoolTest, StaleSamplesAreRejectedAndRegenerated) {
  current_ = 3;
  v1::WeightVersion v3;
  v3.set_version(3);
  pool_->SetCurrentVersion(v3);
  auto a = Add("a:1");
  pool_->SyncReplicas();
  ASSERT_EQ(bring_ups_, 1);
  // a now claims version 3 but stamps its samples with version 2 for a while.
  {
    absl::MutexLock lock(&a->mu);
    a->sample_version = 2;
  }
  auto b = Add("b:1");
  pool_->SyncReplicas();
  {
    absl::MutexLock lock(&b->mu);
    b->sample_version = 3;
  }
  a->fail_after = -1;
  auto groups = pool_->Generate(Prompts(2), Params(2), "step1");
  ASSERT_TRUE(groups.ok()) << groups.status();
  ExpectComplete(*groups, 2, 2);
  for (const auto& group : *groups) {
    for (const auto& sample : group.samples) EXPECT_EQ(sample.weight_version(), 3u);
  }
  EXPECT_GT(pool_->counters().samples_rejected, 0);
}

// Partial rollouts: a sample that started on the expected version and finished on a newer one
// (a publish while it ran) is kept; otherwise it is out of step and its replica gets no work.
TEST_F(RolloutPoolTest, SamplesFinishedOnNewerWeightsAreKeptOnlyWithPartialRollouts) {
  for (const bool partial : {false, true}) {
    SCOPED_TRACE(partial ? "partial rollouts" : "every token at the expected version");
    RolloutPoolOptions options;
    options.no_replica_timeout = absl::Milliseconds(10);
    options.newer_weights_allowed = partial;
    Rebuild(options);
    current_ = 3;
    v1::WeightVersion v3;
    v3.set_version(3);
    pool_->SetCurrentVersion(v3);
    auto a = Add("a:1");
    pool_->SyncReplicas();
    {
      absl::MutexLock lock(&a->mu);
      a->span = 1;  // every sample: version 3 to version 4
    }
    auto groups = pool_->Generate(Prompts(2), Params(2), "step");
    if (partial) {
      ASSERT_TRUE(groups.ok()) << groups.status();
      ExpectComplete(*groups, 2, 2);
      for (const auto& group : *groups) {
        for (const auto& sample : group.samples) {
          EXPECT_EQ(sample.weight_version(), 3u);
          EXPECT_EQ(sample.last_weight_version(), 4u);
        }
      }
      EXPECT_EQ(pool_->counters().samples_rejected, 0);
    } else {
      EXPECT_FALSE(groups.ok());
      EXPECT_EQ(pool_->counters().samples_rejected, 4);
      EXPECT_EQ(pool_->counters().replicas_lost, 1);
    }
  }
}

TEST_F(RolloutPoolTest, NoReadyReplicaFailsWithCount) {
  auto groups = pool_->Generate(Prompts(2), Params(3), "step1");
  ASSERT_FALSE(groups.ok());
  EXPECT_EQ(groups.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(groups.status().message().find("6 samples"), std::string::npos) << groups.status();
}

// An id a live replica answers under is not taken by a registration from another address
// (two replicas given one rlmesh.rollout.replica_id, or a stray client); once the holder stops
// answering, or answers under another id, the id moves. New ids skip the ids replicas chose.
TEST_F(RolloutPoolTest, ALiveReplicasIdIsNotTakenFromAnotherAddress) {
  auto a = std::make_shared<FakeRollout::State>();
  a->replica_id = "r1";
  states_["a:1"] = a;
  ASSERT_EQ(pool_->RegisterReplica("a:1", "r1", 8, {}).value_or(""), "r1");
  absl::StatusOr<std::string> taken = pool_->RegisterReplica("b:2", "r1", 8, {});
  ASSERT_EQ(taken.status().code(), absl::StatusCode::kAlreadyExists) << taken.status();
  EXPECT_EQ(taken.status().message(),
            "replica_id: \"r1\" is the live replica at a:1, which still answers as it; b:2 "
            "needs an id of its own (rlmesh.rollout.replica_id), or none for the coordinator to "
            "assign one");
  ASSERT_EQ(pool_->List().size(), 1u);
  EXPECT_EQ(pool_->List()[0].address(), "a:1");
  // The holder's heartbeat from its own address is the refresh it always was.
  EXPECT_EQ(pool_->RegisterReplica("a:1", "r1", 8, {}).value_or(""), "r1");

  // A holder that answers under another id (restarted, not registered yet) gives it up ...
  a->replica_id = "";
  EXPECT_EQ(pool_->RegisterReplica("b:2", "r1", 8, {}).value_or(""), "r1");
  ASSERT_EQ(pool_->List().size(), 1u);
  EXPECT_EQ(pool_->List()[0].address(), "b:2");
  // ... as does one that does not answer (a restarted pod's old address).
  states_["b:2"]->reachable = false;
  EXPECT_EQ(pool_->RegisterReplica("c:3", "r1", 8, {}).value_or(""), "r1");
  EXPECT_EQ(pool_->List()[0].address(), "c:3");

  // A replica that chose "rollout-0" keeps it: the next assigned id is another.
  ASSERT_EQ(pool_->RegisterReplica("d:4", "rollout-0", 8, {}).value_or(""), "rollout-0");
  EXPECT_EQ(pool_->RegisterReplica("e:5", "", 8, {}).value_or(""), "rollout-1");
  EXPECT_EQ(pool_->List().size(), 3u);
}

TEST_F(RolloutPoolTest, LostReplicaComesBackAfterProbeAndSync) {
  auto a = Add("a:1");
  a->fail_after = 0;
  Add("b:1");
  ASSERT_TRUE(pool_->Generate(Prompts(2), Params(1), "step1").ok());
  EXPECT_EQ(pool_->List()[0].state(), v1::REPLICA_STATE_LOST);
  a->fail_after = -1;
  current_ = 1;
  v1::WeightVersion v1;
  v1.set_version(1);
  pool_->SetCurrentVersion(v1);
  pool_->SyncReplicas();
  for (const auto& info : pool_->List()) {
    EXPECT_EQ(info.state(), v1::REPLICA_STATE_READY) << info.replica_id();
    EXPECT_EQ(info.weight_version().version(), 1u);
  }
}

// A full replica (RESOURCE_EXHAUSTED) is waited for, not lost: its samples are sent again,
// without counting against max_dispatches_per_sample, and come back exactly once.
TEST_F(RolloutPoolTest, AFullReplicaIsWaitedForAndItsRefusalsDoNotCountAsDispatches) {
  RolloutPoolOptions options;
  options.no_replica_timeout = absl::Minutes(1);  // also bounds the wait for a full fleet
  Rebuild(options);
  auto a = Add("a:1");
  pool_->SyncReplicas();
  a->full_calls = 5;  // more rounds than max_dispatches_per_sample (4)
  auto groups = pool_->Generate(Prompts(3), Params(2), "step1");
  ASSERT_TRUE(groups.ok()) << groups.status();
  ExpectComplete(*groups, 3, 2);
  EXPECT_EQ(a->calls, 6);
  EXPECT_EQ(pool_->counters().requests_refused, 5);
  EXPECT_EQ(pool_->counters().replicas_lost, 0);
  EXPECT_EQ(pool_->List()[0].state(), v1::REPLICA_STATE_READY);
}

// The heartbeat (run here by hand, as its thread would) takes an unanswering replica out of
// the rotation without any call to it failing, and brings it back once it answers.
TEST_F(RolloutPoolTest, HeartbeatSuspendsAFrozenReplicaAndReadmitsItWhenItAnswers) {
  RolloutPoolOptions options;
  options.no_replica_timeout = absl::Milliseconds(10);
  options.heartbeat = absl::Seconds(1);
  Rebuild(options);
  auto a = Add("a:1");
  auto b = Add("b:1");
  pool_->SyncReplicas();
  a->reachable = false;
  pool_->Heartbeat();
  EXPECT_EQ(pool_->List()[0].state(), v1::REPLICA_STATE_LOST);
  EXPECT_EQ(pool_->List()[1].state(), v1::REPLICA_STATE_READY);
  EXPECT_EQ(pool_->counters().replicas_lost, 1);
  auto groups = pool_->Generate(Prompts(4), Params(2), "step1");
  ASSERT_TRUE(groups.ok()) << groups.status();
  ExpectComplete(*groups, 4, 2);
  EXPECT_EQ(a->calls, 0);
  EXPECT_EQ(b->samples, 8);
  // Still unanswering: stays LOST, counted once.
  pool_->Heartbeat();
  EXPECT_EQ(pool_->List()[0].state(), v1::REPLICA_STATE_LOST);
  EXPECT_EQ(pool_->counters().replicas_lost, 1);
  // It answers again: SYNCING at once, and the next Generate re-admits it.
  a->reachable = true;
  pool_->Heartbeat();
  EXPECT_EQ(pool_->List()[0].state(), v1::REPLICA_STATE_SYNCING);
  groups = pool_->Generate(Prompts(4), Params(2), "step2");
  ASSERT_TRUE(groups.ok()) << groups.status();
  ExpectComplete(*groups, 4, 2);
  EXPECT_EQ(pool_->List()[0].state(), v1::REPLICA_STATE_READY);
  EXPECT_GT(a->samples, 0);
}

// With a heartbeat, a dead replica costs a step boundary nothing, and leaves the pool once it
// has not answered for evict_after.
TEST_F(RolloutPoolTest, AReplicaThatStaysDeadLeavesThePool) {
  RolloutPoolOptions options;
  options.no_replica_timeout = absl::Milliseconds(10);
  options.heartbeat = absl::Seconds(1);
  options.evict_after = absl::ZeroDuration();
  Rebuild(options);
  auto a = Add("a:1");
  Add("b:1");
  pool_->SyncReplicas();
  a->reachable = false;
  pool_->Heartbeat();
  ASSERT_EQ(pool_->List()[0].state(), v1::REPLICA_STATE_LOST);
  const int probes = a->status_calls;
  pool_->SyncReplicas();
  EXPECT_EQ(a->status_calls, probes);  // the boundary does not probe it
  pool_->Heartbeat();
  ASSERT_EQ(pool_->List().size(), 1u);
  EXPECT_EQ(pool_->List()[0].replica_id(), "rollout-1");
  EXPECT_EQ(pool_->counters().replicas_evicted, 1);
  // Registering again brings it back as a new member.
  a->reachable = true;
  pool_->Register("a:1", "", 8, {});
  pool_->SyncReplicas();
  EXPECT_EQ(pool_->List().size(), 2u);
}

TEST_F(RolloutPoolTest, DuplicatePromptIdsAreRejected) {
  Add("a:1");
  auto prompts = Prompts(2);
  prompts[1].prompt_id = prompts[0].prompt_id;
  auto groups = pool_->Generate(prompts, Params(1), "step1");
  EXPECT_EQ(groups.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rlmesh::coordinator
