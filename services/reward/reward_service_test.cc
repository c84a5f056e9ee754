#include "services/reward/reward_service.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "services/reward/scorers/test_items.h"

namespace rlmesh::reward {
namespace {

// Expires the deadline once `expected` tasks are done, whatever the clock says.
class ExpireAfterWaiter : public BatchWaiter {
 public:
  explicit ExpireAfterWaiter(int expected) : expected_(expected) {}
  void Wait(absl::Mutex& mu, const int& done, int /*total*/, absl::Time /*deadline*/) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    struct Args {
      const int* done;
      int expected;
    } args{&done, expected_};
    mu.Await(absl::Condition(+[](Args* a) { return *a->done >= a->expected; }, &args));
  }

 private:
  const int expected_;
};

// A remote scorer that answers from a table: response "ok" scores 0.5, anything else is an
// item error; `fail_call` makes the whole call fail.
class FakeRemote : public RemoteScorer {
 public:
  absl::StatusOr<std::vector<absl::StatusOr<ScoreResult>>> ScoreBatch(
      const std::vector<RewardItem>& items, absl::Time /*deadline*/) override {
    calls.fetch_add(1);
    if (fail_call) return absl::UnavailableError("connection refused");
    std::vector<absl::StatusOr<ScoreResult>> results;
    for (const RewardItem& item : items) {
      if (item.response == "ok") {
        ScoreResult r;
        r.score = 0.5;
        r.extra["remote"] = 1.0;
        results.push_back(r);
      } else {
        results.push_back(absl::UnknownError("cannot parse response"));
      }
    }
    return results;
  }
  std::string address() const override { return "fake:1"; }

  bool fail_call = false;
  std::atomic<int> calls{0};
};

class ThrowingScorer : public Scorer {
 public:
  absl::StatusOr<ScoreResult> Score(const RewardItem&) const override {
    throw std::runtime_error("bad regex state");
  }
};

class NanScorer : public Scorer {
 public:
  absl::StatusOr<ScoreResult> Score(const RewardItem&) const override {
    ScoreResult r;
    r.score = std::nan("");
    return r;
  }
};

// Blocks every call until `release` is notified; counts the calls that started.
class BlockingScorer : public Scorer {
 public:
  absl::StatusOr<ScoreResult> Score(const RewardItem&) const override {
    started.Notify();
    release.WaitForNotification();
    ScoreResult r;
    r.score = 1.0;
    return r;
  }
  mutable absl::Notification started;
  mutable absl::Notification release;
};

// The built-in registry plus the test scorers under "test/throw", "test/nan", "test/block".
std::unique_ptr<ScorerRegistry> TestRegistry(BlockingScorer** blocking = nullptr) {
  auto registry = ScorerRegistry::Create({});
  EXPECT_TRUE(registry.ok());
  EXPECT_TRUE((*registry)->Register("test/throw", std::make_unique<ThrowingScorer>()).ok());
  EXPECT_TRUE((*registry)->Register("test/nan", std::make_unique<NanScorer>()).ok());
  auto block = std::make_unique<BlockingScorer>();
  if (blocking != nullptr) *blocking = block.get();
  EXPECT_TRUE((*registry)->Register("test/block", std::move(block)).ok());
  return *std::move(registry);
}

std::vector<RewardItem> Items(std::initializer_list<RewardItem> items) { return items; }

absl::Time Far() { return absl::Now() + absl::Hours(1); }

TEST(RewardServiceTest, ScoresEachItemWithTheScorerOfItsDataSource) {
  auto service = RewardService::Create(RewardServiceOptions{}, nullptr);
  ASSERT_TRUE(service.ok()) << service.status();
  auto outcomes = (*service)->ScoreBatch(
      Items({Item("#### 1,234", "1234", "openai/gsm8k", "a"),
             Item("\\boxed{\\frac12}", "0.5", "lighteval/MATH", "b"),
             Item("4312", "4321", "rlmesh/reverse_digits", "c"),
             Item("x", "y", "exact_match", "d")}),
      Far());
  ASSERT_EQ(outcomes.size(), 4u);
  for (const auto& o : outcomes) ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(outcomes[0].result.score, 1.0);
  EXPECT_EQ(outcomes[1].result.score, 1.0);
  EXPECT_EQ(outcomes[2].result.score, 0.5);
  EXPECT_EQ(outcomes[3].result.score, 0.0);
  EXPECT_EQ(outcomes[0].result.extra.at("acc"), 1.0);
}

// A request that asks for the reward model is scored by it alone, whatever the data sources
// (verl: the model's score replaces the rule score); other requests keep the scorers. Without
// a reward model such a request fails every item, kind invalid.
TEST(RewardServiceTest, RequestsForTheRewardModelGoToItAlone) {
  auto model = std::make_unique<FakeRemote>();
  FakeRemote* calls = model.get();
  auto service =
      RewardService::Create(RewardServiceOptions{}, nullptr, nullptr, nullptr, std::move(model));
  ASSERT_TRUE(service.ok()) << service.status();
  EXPECT_TRUE((*service)->has_reward_model());
  const auto items = Items({Item("ok", "1234", "openai/gsm8k", "a"),
                            Item("ok", "x", "codecontests", "b"), Item("no", "x", "exact_match", "c")});
  auto outcomes = (*service)->ScoreBatch(items, Far(), /*use_reward_model=*/true);
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[0].result.score, 0.5);  // not the GSM8K rule's 0
  EXPECT_EQ(outcomes[1].result.score, 0.5);  // no rule scorer for it, and none needed
  EXPECT_EQ(outcomes[2].error_kind, ItemErrorKind::kRemote);
  EXPECT_EQ(calls->calls.load(), 1);
  outcomes = (*service)->ScoreBatch(items, Far());
  EXPECT_EQ(outcomes[0].result.score, 0.0);  // the rule, wrong answer
  EXPECT_EQ(outcomes[1].error_kind, ItemErrorKind::kUnknownDataSource);
  EXPECT_EQ(calls->calls.load(), 1);

  auto plain = RewardService::Create(RewardServiceOptions{}, nullptr);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)->has_reward_model());
  outcomes = (*plain)->ScoreBatch(items, Far(), /*use_reward_model=*/true);
  for (const auto& o : outcomes) {
    EXPECT_EQ(o.error_kind, ItemErrorKind::kInvalid);
    EXPECT_NE(o.status.message().find("reward_model.enable"), std::string::npos);
  }
}

TEST(RewardServiceTest, UnknownDataSourceFailsOnlyThatItem) {
  auto service = RewardService::Create(RewardServiceOptions{}, nullptr);
  ASSERT_TRUE(service.ok());
  auto outcomes = (*service)->ScoreBatch(
      Items({Item("#### 3", "3", "openai/gsm8k", "a"), Item("3", "3", "codecontests", "b")}),
      Far());
  EXPECT_TRUE(outcomes[0].status.ok());
  EXPECT_EQ(outcomes[1].status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(outcomes[1].error_kind, ItemErrorKind::kUnknownDataSource);
  EXPECT_NE(outcomes[1].status.message().find("codecontests"), std::string::npos);
}

TEST(RewardServiceTest, ScorerErrorsFailOnlyTheirItem) {
  auto service = RewardService::Create(RewardServiceOptions{}, nullptr);
  ASSERT_TRUE(service.ok());
  // An empty ground truth is an INVALID_ARGUMENT from the gsm8k scorer.
  auto outcomes = (*service)->ScoreBatch(
      Items({Item("#### 3", "", "openai/gsm8k", "a"), Item("#### 3", "3", "openai/gsm8k", "b")}),
      Far());
  EXPECT_EQ(outcomes[0].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(outcomes[0].error_kind, ItemErrorKind::kInvalid);
  EXPECT_TRUE(outcomes[1].status.ok());
  EXPECT_EQ(outcomes[1].result.score, 1.0);
}

TEST(RewardServiceTest, ThrowingOrNanScorerFailsOnlyItsItem) {
  auto service = RewardService::Create(RewardServiceOptions{}, nullptr, nullptr, TestRegistry());
  ASSERT_TRUE(service.ok());
  auto outcomes = (*service)->ScoreBatch(
      Items({Item("#### 3", "3", "openai/gsm8k", "a"), Item("r", "t", "test/throw", "b"),
             Item("r", "t", "test/nan", "c"), Item("21", "21", "rlmesh/reverse_digits", "d")}),
      Far());
  EXPECT_TRUE(outcomes[0].status.ok());
  EXPECT_EQ(outcomes[1].status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(outcomes[1].error_kind, ItemErrorKind::kException);
  EXPECT_NE(outcomes[1].status.message().find("bad regex state"), std::string::npos);
  EXPECT_NE(outcomes[1].status.message().find("test/throw"), std::string::npos);
  EXPECT_EQ(outcomes[2].error_kind, ItemErrorKind::kException);
  EXPECT_NE(outcomes[2].status.message().find("non-finite"), std::string::npos);
  EXPECT_TRUE(outcomes[3].status.ok());
  EXPECT_EQ(outcomes[3].result.score, 1.0);
}

TEST(RewardServiceTest, SlowItemTimesOutOthersSucceed) {
  BlockingScorer* blocking = nullptr;
  RewardServiceOptions options;
  options.num_workers = 2;
  // The deadline "passes" as soon as the three quick items are done; the clock plays no part.
  auto service = RewardService::Create(options, nullptr, std::make_unique<ExpireAfterWaiter>(3),
                                       TestRegistry(&blocking));
  ASSERT_TRUE(service.ok());
  auto outcomes = (*service)->ScoreBatch(
      Items({Item("r", "t", "test/block", "slow"), Item("#### 3", "3", "openai/gsm8k", "a"),
             Item("#### 4", "3", "openai/gsm8k", "b"), Item("x", "x", "exact_match", "c")}),
      Far());
  EXPECT_EQ(outcomes[0].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(outcomes[0].error_kind, ItemErrorKind::kTimeout);
  EXPECT_NE(outcomes[0].status.message().find("slow"), std::string::npos);
  ASSERT_TRUE(outcomes[1].status.ok());
  EXPECT_EQ(outcomes[1].result.score, 1.0);
  ASSERT_TRUE(outcomes[2].status.ok());
  EXPECT_EQ(outcomes[2].result.score, 0.0);
  ASSERT_TRUE(outcomes[3].status.ok());
  EXPECT_EQ(outcomes[3].result.score, 1.0);
  blocking->release.Notify();  // let the worker finish before the service is destroyed
}

TEST(RewardServiceTest, SlowItemTimesOutOnTheRealClock) {
  BlockingScorer* blocking = nullptr;
  auto service = RewardService::Create(RewardServiceOptions{}, nullptr, nullptr,
                                       TestRegistry(&blocking));
  ASSERT_TRUE(service.ok());
  // Only the blocked item is asserted: it cannot finish before its release, which comes
  // after ScoreBatch returns.
  auto outcomes = (*service)->ScoreBatch(
      Items({Item("r", "t", "test/block", "slow"), Item("#### 3", "3", "openai/gsm8k", "a")}),
      absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(outcomes[0].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(outcomes[0].error_kind, ItemErrorKind::kTimeout);
  blocking->release.Notify();
  // The service keeps serving after a timeout.
  auto next = (*service)->ScoreBatch(Items({Item("#### 5", "5", "openai/gsm8k", "z")}), Far());
  ASSERT_TRUE(next[0].status.ok());
  EXPECT_EQ(next[0].result.score, 1.0);
}

TEST(RewardServiceTest, DeadlinePassedBeforeStartTimesEveryLocalItemOut) {
  auto service = RewardService::Create(RewardServiceOptions{}, nullptr);
  ASSERT_TRUE(service.ok());
  auto outcomes = (*service)->ScoreBatch(Items({Item("#### 3", "3", "openai/gsm8k", "a")}),
                                         absl::Now() - absl::Seconds(1));
  EXPECT_EQ(outcomes[0].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(outcomes[0].error_kind, ItemErrorKind::kTimeout);
}

TEST(RewardServiceTest, DeadlineFollowsRequestThenDefaultAndIsCapped) {
  RewardServiceOptions options;
  options.default_timeout = absl::Seconds(30);
  auto service = RewardService::Create(options, nullptr);
  ASSERT_TRUE(service.ok());
  const absl::Time before = absl::Now();
  const absl::Time by_default = (*service)->DeadlineFor(absl::ZeroDuration(), absl::InfiniteFuture());
  EXPECT_GE(by_default, before + absl::Seconds(30));
  EXPECT_LE(by_default, absl::Now() + absl::Seconds(30));
  const absl::Time asked = (*service)->DeadlineFor(absl::Seconds(2), absl::InfiniteFuture());
  EXPECT_LE(asked, absl::Now() + absl::Seconds(2));
  const absl::Time cap = before + absl::Seconds(1);
  EXPECT_EQ((*service)->DeadlineFor(absl::Seconds(2), cap), cap);
}

TEST(RewardServiceTest, OptionsAreValidated) {
  RewardServiceOptions no_workers;
  no_workers.num_workers = 0;
  auto a = RewardService::Create(no_workers, nullptr);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("rlmesh.reward.num_workers"), std::string::npos);
  RewardServiceOptions routed_nowhere;
  routed_nowhere.custom_data_sources = {"my/task"};
  auto b = RewardService::Create(routed_nowhere, nullptr);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("rlmesh.reward.custom_address"), std::string::npos);
}

TEST(RewardServiceTest, RemoteReplacesBuiltinsWhenNoDataSourcesAreListed) {
  auto remote = std::make_unique<FakeRemote>();
  FakeRemote* fake = remote.get();
  auto service = RewardService::Create(RewardServiceOptions{}, std::move(remote));
  ASSERT_TRUE(service.ok());
  auto outcomes = (*service)->ScoreBatch(
      Items({Item("ok", "1", "openai/gsm8k", "a"), Item("bad", "1", "anything", "b"),
             Item("ok", "1", "my/task", "c")}),
      Far());
  EXPECT_EQ(fake->calls.load(), 1);  // one call for the whole batch
  ASSERT_TRUE(outcomes[0].status.ok()) << outcomes[0].status;
  EXPECT_EQ(outcomes[0].result.score, 0.5);  // the remote's score, not gsm8k's
  EXPECT_EQ(outcomes[0].result.extra.at("remote"), 1.0);
  EXPECT_EQ(outcomes[1].error_kind, ItemErrorKind::kRemote);
  EXPECT_NE(outcomes[1].status.message().find("cannot parse response"), std::string::npos);
  EXPECT_NE(outcomes[1].status.message().find("fake:1"), std::string::npos);
  EXPECT_TRUE(outcomes[2].status.ok());
}

TEST(RewardServiceTest, ListedDataSourcesGoRemoteOthersStayLocal) {
  auto remote = std::make_unique<FakeRemote>();
  RewardServiceOptions options;
  options.custom_data_sources = {"my/task"};
  auto service = RewardService::Create(options, std::move(remote));
  ASSERT_TRUE(service.ok());
  auto outcomes = (*service)->ScoreBatch(
      Items({Item("#### 7", "7", "openai/gsm8k", "a"), Item("ok", "1", "my/task", "b"),
             Item("x", "x", "other/task", "c")}),
      Far());
  EXPECT_EQ(outcomes[0].result.score, 1.0);
  EXPECT_EQ(outcomes[1].result.score, 0.5);
  EXPECT_EQ(outcomes[2].error_kind, ItemErrorKind::kUnknownDataSource);
  EXPECT_TRUE((*service)->IsKnownDataSource("my/task"));
  EXPECT_FALSE((*service)->IsKnownDataSource("other/task"));
  const auto known = (*service)->KnownDataSources();
  EXPECT_EQ(known.size(), 9u);  // the 8 built-in data sources and my/task
  EXPECT_NE(std::find(known.begin(), known.end(), "my/task"), known.end());
}

TEST(RewardServiceTest, FailedRemoteCallFailsOnlyTheRemoteItems) {
  auto remote = std::make_unique<FakeRemote>();
  remote->fail_call = true;
  RewardServiceOptions options;
  options.custom_data_sources = {"my/task"};
  auto service = RewardService::Create(options, std::move(remote));
  ASSERT_TRUE(service.ok());
  auto outcomes = (*service)->ScoreBatch(
      Items({Item("ok", "1", "my/task", "a"), Item("#### 7", "7", "openai/gsm8k", "b")}), Far());
  EXPECT_EQ(outcomes[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(outcomes[0].error_kind, ItemErrorKind::kRemote);
  EXPECT_NE(outcomes[0].status.message().find("connection refused"), std::string::npos);
  EXPECT_TRUE(outcomes[1].status.ok());
}

}  // namespace
}  // namespace rlmesh::reward
