// CoordinatorRegistration against an in-process CoordinatorService: the ids it asks for at
// each heartbeat, and what it does when the coordinator refuses one (ALREADY_EXISTS): an id
// the coordinator assigned is exchanged for a new one, a configured id is asked for again.
#include "services/rollout/registration.h"

#include <grpcpp/grpcpp.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rlmesh/v1/coordinator.grpc.pb.h"

namespace rlmesh::rollout {
namespace {

using ::testing::ElementsAre;

// Assigns "rollout-K" to a request without an id; refuses the ids in `taken`.
class FakeCoordinator final : public v1::CoordinatorService::Service {
 public:
  grpc::Status RegisterReplica(grpc::ServerContext*, const v1::RegisterReplicaRequest* request,
                               v1::RegisterReplicaResponse* response) override {
    absl::MutexLock lock(&mu);
    asked.push_back(request->replica_id());
    for (const std::string& id : taken) {
      if (request->replica_id() == id) {
        return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                            absl::StrCat("replica_id: \"", id, "\" is the live replica at x:1"));
      }
    }
    response->set_replica_id(request->replica_id().empty() ? absl::StrCat("rollout-", next++)
                                                           : request->replica_id());
    return grpc::Status::OK;
  }
  grpc::Status UnregisterReplica(grpc::ServerContext*, const v1::UnregisterReplicaRequest* request,
                                 v1::UnregisterReplicaResponse*) override {
    absl::MutexLock lock(&mu);
    unregistered.push_back(request->replica_id());
    return grpc::Status::OK;
  }

  absl::Mutex mu;
  std::vector<std::string> asked ABSL_GUARDED_BY(mu);
  std::vector<std::string> taken ABSL_GUARDED_BY(mu);
  std::vector<std::string> unregistered ABSL_GUARDED_BY(mu);
  int next ABSL_GUARDED_BY(mu) = 0;
};

class RegistrationTest : public ::testing::Test {
 protected:
  RegistrationTest() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&coordinator_);
    server_ = builder.BuildAndStart();
  }
  ~RegistrationTest() override { server_->Shutdown(); }

  RegistrationOptions Options(const std::string& replica_id) {
    RegistrationOptions options;
    options.coordinator = absl::StrCat("127.0.0.1:", port_);
    options.address = "127.0.0.1:7";
    options.replica_id = replica_id;
    options.heartbeat = absl::Milliseconds(5);
    options.on_registered = [this](const std::string& id) {
      absl::MutexLock lock(&mu_);
      if (registered_as_.empty() || registered_as_.back() != id) registered_as_.push_back(id);
    };
    return options;
  }

  // Waits until the coordinator has been asked `count` times (no sleep: on the mutex).
  void AwaitAsked(size_t count) {
    std::pair<FakeCoordinator*, size_t> wanted(&coordinator_, count);
    absl::MutexLock lock(&coordinator_.mu);
    coordinator_.mu.Await(absl::Condition(
        +[](std::pair<FakeCoordinator*, size_t>* c)
             ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->first->asked.size() >= c->second; },
        &wanted));
  }

  FakeCoordinator coordinator_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::vector<std::string> registered_as_ ABSL_GUARDED_BY(mu_);
};

TEST_F(RegistrationTest, AnAssignedIdGivenToAnotherReplicaIsExchangedForANewOne) {
  CoordinatorRegistration registration(Options(""));
  registration.Start();
  AwaitAsked(3);      // "", then rollout-0 at each heartbeat
  size_t before = 0;  // requests answered before the id was taken
  {
    absl::MutexLock lock(&coordinator_.mu);
    coordinator_.taken = {"rollout-0"};  // as a restarted coordinator that gave it away
    before = coordinator_.asked.size();
  }
  AwaitAsked(before + 4);
  registration.Stop();
  absl::MutexLock lock(&coordinator_.mu);
  // Once refused, rollout-0 is asked for no more: a new id, then that one at each heartbeat.
  const std::vector<std::string>& asked = coordinator_.asked;
  ASSERT_GE(asked.size(), before + 4);
  EXPECT_EQ(asked[0], "");
  size_t refused = before;
  while (refused < asked.size() && asked[refused] != "rollout-0") ++refused;
  ASSERT_LT(refused + 2, asked.size());
  EXPECT_EQ(asked[refused + 1], "");
  for (size_t k = refused + 2; k < asked.size(); ++k) EXPECT_EQ(asked[k], "rollout-1") << k;
  EXPECT_THAT(coordinator_.unregistered, ElementsAre("rollout-1"));
  absl::MutexLock own(&mu_);
  EXPECT_THAT(registered_as_, ElementsAre("rollout-0", "rollout-1"));
}

TEST_F(RegistrationTest, AConfiguredIdIsAskedForAgainAndNeverUnregisteredWhileRefused) {
  {
    absl::MutexLock lock(&coordinator_.mu);
    coordinator_.taken = {"mine"};
  }
  CoordinatorRegistration registration(Options("mine"));
  registration.Start();
  AwaitAsked(3);
  registration.Stop();
  absl::MutexLock lock(&coordinator_.mu);
  for (const std::string& id : coordinator_.asked) EXPECT_EQ(id, "mine");
  // It never held the id, so it does not remove the replica that does.
  EXPECT_TRUE(coordinator_.unregistered.empty());
  absl::MutexLock own(&mu_);
  EXPECT_TRUE(registered_as_.empty());
}

}  // namespace
}  // namespace rlmesh::rollout
