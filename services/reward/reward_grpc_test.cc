#include "services/reward/reward_grpc.h"

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <memory>
#include <string>

#include "common/metrics/promtool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "services/reward/grpc_remote_scorer.h"

namespace rlmesh::reward {
namespace {

using ::testing::HasSubstr;

v1::RewardItem* AddItem(v1::ScoreRequest& request, const std::string& id,
                        const std::string& data_source, const std::string& response,
                        const std::string& truth) {
  v1::RewardItem* item = request.add_items();
  item->set_id(id);
  item->set_data_source(data_source);
  item->set_response(response);
  item->set_ground_truth(truth);
  return item;
}

TEST(ValidateScoreRequestTest, NamesTheField) {
  RewardGrpcOptions options;
  options.max_batch_size = 2;
  struct Case {
    v1::ScoreRequest request;
    std::string field;
  };
  std::vector<Case> cases(7);
  cases[0].field = "items: expected at least one item";
  AddItem(cases[1].request, "a", "openai/gsm8k", "", "1");
  AddItem(cases[1].request, "", "openai/gsm8k", "", "1");
  cases[1].field = "items[1].id";
  AddItem(cases[2].request, "a", "", "", "1");
  cases[2].field = "items[0].data_source";
  AddItem(cases[3].request, "a", "openai/gsm8k", "", "1");
  AddItem(cases[3].request, "a", "openai/gsm8k", "", "1");
  cases[3].field = "items[1].id: duplicate id \"a\" (also items[0].id)";
  for (const char* id : {"a", "b", "c"}) AddItem(cases[4].request, id, "openai/gsm8k", "", "1");
  cases[4].field = "items: 3 items exceed the limit of 2 per request";
  AddItem(cases[5].request, "a", "openai/gsm8k", "", "1");
  cases[5].request.set_timeout_seconds(-1);
  cases[5].field = "timeout_seconds";
  AddItem(cases[6].request, "a", "openai/gsm8k", "", "1");
  cases[6].request.set_timeout_seconds(std::nan(""));
  cases[6].field = "timeout_seconds";
  for (const Case& c : cases) {
    absl::Status status = ValidateScoreRequest(c.request, options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(status.message(), HasSubstr(c.field));
  }
  v1::ScoreRequest fine;
  AddItem(fine, "a", "no/such/source", "", "");
  EXPECT_TRUE(ValidateScoreRequest(fine, options).ok());  // per-item problems are not malformed
}

// A reward service with its handler on an in-process gRPC server on a free port.
class RewardServer {
 public:
  explicit RewardServer(std::unique_ptr<RemoteScorer> remote = nullptr,
                        RewardServiceOptions options = {}) {
    auto service = RewardService::Create(options, std::move(remote));
    EXPECT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    registry_ = std::make_shared<prometheus::Registry>();
    metrics_ = std::make_unique<RewardMetrics>(*registry_, service_->KnownDataSources());
    RewardGrpcOptions grpc_options;
    grpc_options.max_batch_size = 8;
    handler_ = std::make_unique<RewardGrpcService>(service_.get(), metrics_.get(), grpc_options);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(handler_.get());
    server_ = builder.BuildAndStart();
    stub_ = v1::RewardService::NewStub(
        grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
  }
  ~RewardServer() { server_->Shutdown(); }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  grpc::Status Score(const v1::ScoreRequest& request, v1::ScoreResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub_->Score(&context, request, response);
  }
  std::string Metrics() const {
    return prometheus::TextSerializer().Serialize(registry_->Collect());
  }

 private:
  std::unique_ptr<RewardService> service_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<RewardMetrics> metrics_;
  std::unique_ptr<RewardGrpcService> handler_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::RewardService::Stub> stub_;
};

// Negative scores (verl's -1 for a wrong MATH-DAPO answer) have a counter of their own, so the
// mean score the dashboard shows, (positive sum - negative sum) / ok items, is the true mean.
TEST(RewardMetricsTest, NegativeScoresAreCountedSoTheMeanIsTheTrueOne) {
  prometheus::Registry registry;
  RewardMetrics metrics(registry, {"math_dapo"});
  for (double score : {1.0, -1.0, -1.0, 0.5}) {
    ItemOutcome outcome;
    outcome.result.score = score;
    metrics.RecordItem("math_dapo", outcome);
  }
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_THAT(text, HasSubstr("rlmesh_reward_score_sum_total{data_source=\"math_dapo\"} 1.5"));
  EXPECT_THAT(text,
              HasSubstr("rlmesh_reward_score_negative_sum_total{data_source=\"math_dapo\"} 2"));
  EXPECT_THAT(text,
              HasSubstr("rlmesh_reward_items_total{data_source=\"math_dapo\",outcome=\"ok\"} 4"));
}

TEST(RewardGrpcServiceTest, ScoresInOrderWithPerItemErrors) {
  RewardServer server;
  v1::ScoreRequest request;
  AddItem(request, "p0/0", "openai/gsm8k", "so\n#### 1,234", "1234");
  AddItem(request, "p0/1", "no/such/source", "x", "y");
  AddItem(request, "p1/0", "rlmesh/reverse_digits", "4312", "4321");
  v1::ScoreResponse response;
  grpc::Status status = server.Score(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.results_size(), 3);
  EXPECT_EQ(response.results(0).id(), "p0/0");
  EXPECT_EQ(response.results(0).score(), 1.0);
  EXPECT_EQ(response.results(0).extra_values().at("acc"), 1.0);
  EXPECT_TRUE(response.results(0).error().empty());
  EXPECT_EQ(response.results(1).id(), "p0/1");
  EXPECT_EQ(response.results(1).score(), 0.0);
  EXPECT_THAT(response.results(1).error(), HasSubstr("NOT_FOUND"));
  EXPECT_THAT(response.results(1).error(), HasSubstr("no/such/source"));
  EXPECT_EQ(response.results(2).score(), 0.5);
}

TEST(RewardGrpcServiceTest, MalformedRequestIsRejectedAndTheServerKeepsServing) {
  RewardServer server;
  v1::ScoreRequest duplicate;
  AddItem(duplicate, "a", "openai/gsm8k", "#### 1", "1");
  AddItem(duplicate, "a", "openai/gsm8k", "#### 1", "1");
  v1::ScoreResponse response;
  grpc::Status status = server.Score(duplicate, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("items[1].id"));
  v1::ScoreRequest too_many;
  for (int i = 0; i < 9; ++i) AddItem(too_many, std::to_string(i), "openai/gsm8k", "", "1");
  status = server.Score(too_many, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("items"));

  v1::ScoreRequest good;
  AddItem(good, "a", "openai/gsm8k", "#### 1", "1");
  response.Clear();
  ASSERT_TRUE(server.Score(good, &response).ok());
  EXPECT_EQ(response.results(0).score(), 1.0);

  const std::string text = server.Metrics();
  EXPECT_THAT(
      text, HasSubstr("rlmesh_reward_items_total{data_source=\"openai/gsm8k\",outcome=\"ok\"} 1"));
  EXPECT_THAT(text, HasSubstr("rlmesh_reward_errors_total{kind=\"invalid\"} 11"));
  EXPECT_THAT(text, HasSubstr("rlmesh_reward_request_duration_seconds_count 1"));
  absl::StatusOr<std::string> checked = metrics::PromtoolCheckMetrics(text);
  if (checked.status().code() == absl::StatusCode::kNotFound) {
    GTEST_SKIP() << "promtool not installed";
  }
  EXPECT_TRUE(checked.ok()) << checked.status() << "\n" << text;
}

TEST(GrpcRemoteScorerTest, ForwardsToARemoteRewardService) {
  RewardServer backend;
  auto client = GrpcRemoteScorer::Create(backend.address());
  ASSERT_TRUE(client.ok());
  RewardServer front(*std::move(client));  // no custom_data_sources: everything goes remote
  v1::ScoreRequest request;
  AddItem(request, "a", "lighteval/MATH", "\\boxed{\\frac12}", "0.5");
  AddItem(request, "b", "unknown/here", "x", "x");
  v1::ScoreResponse response;
  ASSERT_TRUE(front.Score(request, &response).ok());
  EXPECT_EQ(response.results(0).score(), 1.0);
  // The backend's per-item error comes back with the remote's address.
  EXPECT_THAT(response.results(1).error(), HasSubstr(backend.address()));
  EXPECT_THAT(response.results(1).error(), HasSubstr("no scorer for data_source"));
  // The backend did the scoring.
  EXPECT_THAT(
      backend.Metrics(),
      HasSubstr("rlmesh_reward_items_total{data_source=\"lighteval/MATH\",outcome=\"ok\"} 1"));
  EXPECT_THAT(front.Metrics(), HasSubstr("rlmesh_reward_errors_total{kind=\"remote\"} 1"));
}

TEST(GrpcRemoteScorerTest, UnreachableRemoteFailsTheForwardedItems) {
  // A port nothing listens on: one bound by a server that is then gone.
  std::string address;
  {
    RewardServer gone;
    address = gone.address();
  }
  auto client = GrpcRemoteScorer::Create(address);
  ASSERT_TRUE(client.ok());
  std::vector<RewardItem> items(1);
  items[0].id = "a";
  items[0].data_source = "openai/gsm8k";
  auto results = (*client)->ScoreBatch(items, absl::Now() + absl::Seconds(30));
  ASSERT_FALSE(results.ok());
  EXPECT_TRUE(results.status().code() == absl::StatusCode::kUnavailable ||
              results.status().code() == absl::StatusCode::kDeadlineExceeded)
      << results.status();
  EXPECT_FALSE(GrpcRemoteScorer::Create("").ok());
}

}  // namespace
}  // namespace rlmesh::reward
