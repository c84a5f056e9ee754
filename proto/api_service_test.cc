// Every RPC of every rlmesh service, called through its generated stub against a small test
// implementation on an in-process server (127.0.0.1, port 0). The implementations compute
// their answers from the request, so the tests check that requests and responses cross the
// wire intact, including server streaming and error statuses.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "grpc/health/v1/health.grpc.pb.h"
#include "rlmesh/v1/coordinator.grpc.pb.h"
#include "rlmesh/v1/reference.grpc.pb.h"
#include "rlmesh/v1/reward.grpc.pb.h"
#include "rlmesh/v1/rollout.grpc.pb.h"
#include "rlmesh/v1/trainer.grpc.pb.h"

namespace rlmesh::v1 {
namespace {

using ::grpc::ServerContext;
using ::grpc::Status;
using ::grpc::StatusCode;

// Rollout: sample k of a prompt is the prompt's tokens followed by k; log-prob -0.5 per token.
class TestRollout final : public RolloutService::Service {
 public:
  Status Generate(ServerContext*, const GenerateRequest* req,
                  grpc::ServerWriter<GenerateResponse>* writer) override {
    if (req->sampling_params().n() < 1) {
      return Status(StatusCode::INVALID_ARGUMENT, "sampling_params.n: expected >= 1");
    }
    for (const GeneratePrompt& p : req->prompts()) {
      for (int k = 0; k < req->sampling_params().n(); ++k) {
        GenerateResponse resp;
        resp.set_request_id(req->request_id());
        resp.set_prompt_id(p.prompt_id());
        resp.set_sample_index(p.first_sample_index() + k);
        Sample* s = resp.mutable_sample();
        *s->mutable_token_ids() = p.token_ids();
        s->add_token_ids(k);
        for (int t = 0; t < s->token_ids_size(); ++t) s->add_logprobs(-0.5f);
        s->set_finish_reason(FINISH_REASON_STOP);
        s->set_weight_version(current_.version());
        s->set_last_weight_version(current_.version());
        s->set_prompt_length(p.token_ids_size());
        writer->Write(resp);
      }
    }
    return Status::OK;
  }
  Status GetStatus(ServerContext*, const GetRolloutStatusRequest*,
                   GetRolloutStatusResponse* resp) override {
    resp->set_queue_depth(3);
    resp->set_max_num_seqs(64);
    resp->set_kv_cache_usage(0.25);
    *resp->mutable_weight_version() = current_;
    return Status::OK;
  }
  Status UpdateWeights(ServerContext*, const UpdateWeightsRequest* req,
                       UpdateWeightsResponse* resp) override {
    switch (req->phase()) {
      case WEIGHT_UPDATE_PHASE_BEGIN:
        staged_ = req->version();
        received_ = 0;
        break;
      case WEIGHT_UPDATE_PHASE_DATA:
        for (const Tensor& t : req->tensors()) received_ += static_cast<int64_t>(t.data().size());
        break;
      case WEIGHT_UPDATE_PHASE_COMMIT:
        current_ = staged_;
        break;
      default:
        return Status(StatusCode::INVALID_ARGUMENT, "phase: expected BEGIN, DATA or COMMIT");
    }
    *resp->mutable_current_version() = current_;
    resp->set_received_bytes(received_);
    return Status::OK;
  }
  Status Abort(ServerContext*, const AbortRequest* req, AbortResponse* resp) override {
    resp->set_aborted_requests(req->all() ? 100 : req->request_ids_size());
    return Status::OK;
  }

 private:
  WeightVersion current_;
  WeightVersion staged_;
  int64_t received_ = 0;
};

// Reward: 1 for an exact match with the ground truth, an item error for an unknown source.
class TestReward final : public RewardService::Service {
 public:
  Status Score(ServerContext*, const ScoreRequest* req, ScoreResponse* resp) override {
    for (const RewardItem& item : req->items()) {
      RewardResult* r = resp->add_results();
      r->set_id(item.id());
      if (item.data_source() != "exact") {
        r->set_error("unknown data_source " + item.data_source());
        continue;
      }
      r->set_score(item.response() == item.ground_truth() ? 1.0 : 0.0);
      (*r->mutable_extra_values())["len"] = static_cast<double>(item.response().size());
    }
    return Status::OK;
  }
};

// Log-prob of response token t is -(token id) / temperature.
void FakeLogProbs(const TokenSequence& seq, double temperature, SequenceLogProbs* out) {
  out->set_id(seq.id());
  for (int t = seq.prompt_length(); t < seq.token_ids_size(); ++t) {
    out->add_logprobs(static_cast<float>(-seq.token_ids(t) / temperature));
  }
}

class TestReference final : public ReferenceService::Service {
 public:
  Status ComputeLogProbs(ServerContext*, const ComputeLogProbsRequest* req,
                         ComputeLogProbsResponse* resp) override {
    for (const TokenSequence& s : req->sequences()) {
      FakeLogProbs(s, req->temperature(), resp->add_results());
    }
    return Status::OK;
  }
};

class TestTrainer final : public TrainerService::Service {
 public:
  Status ComputeOldLogProbs(ServerContext*, const ComputeOldLogProbsRequest* req,
                            ComputeOldLogProbsResponse* resp) override {
    for (const TokenSequence& s : req->sequences()) {
      FakeLogProbs(s, req->temperature(), resp->add_results());
    }
    resp->mutable_weight_version()->set_version(version_);
    return Status::OK;
  }
  Status TrainStep(ServerContext*, const TrainStepRequest* req, TrainStepResponse* resp) override {
    double sum = 0;
    for (const TrainingSample& s : req->samples()) {
      for (float a : s.advantages()) sum += a;
    }
    (*resp->mutable_metrics())["actor/advantage_sum"] = sum;
    step_ = req->global_step();
    resp->mutable_weight_version()->set_version(++version_);
    resp->mutable_weight_version()->set_global_step(step_);
    return Status::OK;
  }
  Status SftStep(ServerContext*, const SftStepRequest* req, SftStepResponse* resp) override {
    (*resp->mutable_metrics())["sft/num_sequences"] = req->sequences_size();
    resp->mutable_weight_version()->set_version(++version_);
    return Status::OK;
  }
  Status SaveCheckpoint(ServerContext*, const SaveCheckpointRequest* req,
                        SaveCheckpointResponse* resp) override {
    saved_.set_global_step(req->global_step());
    saved_.set_path(req->directory() + "/global_step_" + std::to_string(req->global_step()));
    *saved_.mutable_data_position() = req->data_position();
    saved_.set_coordinator_state(req->coordinator_state());
    *resp->mutable_checkpoint() = saved_;
    return Status::OK;
  }
  Status LoadCheckpoint(ServerContext*, const LoadCheckpointRequest* req,
                        LoadCheckpointResponse* resp) override {
    if (!req->path().empty() && req->path() != saved_.path()) {
      return Status(StatusCode::NOT_FOUND, "path: no checkpoint at " + req->path());
    }
    *resp->mutable_checkpoint() = saved_;
    return Status::OK;
  }
  Status PublishWeights(ServerContext*, const PublishWeightsRequest* req,
                        PublishWeightsResponse* resp) override {
    resp->mutable_weight_version()->set_version(version_);
    for (const WeightTarget& t : req->targets()) {
      WeightTargetResult* r = resp->add_results();
      r->set_replica_id(t.replica_id());
      r->set_ok(!t.address().empty());
      if (t.address().empty()) r->set_error("empty address");
    }
    return Status::OK;
  }
  Status GetStatus(ServerContext*, const GetTrainerStatusRequest*,
                   GetTrainerStatusResponse* resp) override {
    resp->set_state(TRAINER_STATE_IDLE);
    resp->set_global_step(step_);
    resp->mutable_weight_version()->set_version(version_);
    return Status::OK;
  }

 private:
  uint64_t version_ = 0;
  int64_t step_ = 0;
  CheckpointInfo saved_;
};

class TestCoordinator final : public CoordinatorService::Service {
 public:
  Status GetStatus(ServerContext*, const GetCoordinatorStatusRequest*,
                   GetCoordinatorStatusResponse* resp) override {
    resp->set_state(state_);
    for (const auto& [id, info] : replicas_) *resp->add_replicas() = info;
    return Status::OK;
  }
  Status Pause(ServerContext*, const PauseRequest*, PauseResponse* resp) override {
    state_ = RUN_STATE_PAUSED;
    resp->set_state(state_);
    return Status::OK;
  }
  Status Resume(ServerContext*, const ResumeRequest*, ResumeResponse* resp) override {
    state_ = RUN_STATE_RUNNING;
    resp->set_state(state_);
    return Status::OK;
  }
  Status RegisterReplica(ServerContext*, const RegisterReplicaRequest* req,
                         RegisterReplicaResponse* resp) override {
    std::string id =
        req->replica_id().empty() ? "replica-" + std::to_string(next_++) : req->replica_id();
    ReplicaInfo& info = replicas_[id];
    info.set_replica_id(id);
    info.set_address(req->address());
    *info.mutable_weight_version() = req->weight_version();
    info.set_state(REPLICA_STATE_SYNCING);
    resp->set_replica_id(id);
    resp->mutable_target_weight_version()->set_version(5);
    return Status::OK;
  }
  Status UnregisterReplica(ServerContext*, const UnregisterReplicaRequest* req,
                           UnregisterReplicaResponse*) override {
    if (replicas_.erase(req->replica_id()) == 0) {
      return Status(StatusCode::NOT_FOUND, "replica_id: unknown replica " + req->replica_id());
    }
    return Status::OK;
  }
  Status ListReplicas(ServerContext*, const ListReplicasRequest*,
                      ListReplicasResponse* resp) override {
    for (const auto& [id, info] : replicas_) *resp->add_replicas() = info;
    return Status::OK;
  }

 private:
  RunState state_ = RUN_STATE_RUNNING;
  std::map<std::string, ReplicaInfo> replicas_;
  int next_ = 0;
};

// One in-process server with every test service and grpc++'s built-in health service.
// The test services are not thread-safe; the synchronous server runs calls concurrently only
// when clients do, and each test issues one call at a time.
class ApiServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&rollout_);
    builder.RegisterService(&reward_);
    builder.RegisterService(&reference_);
    builder.RegisterService(&trainer_);
    builder.RegisterService(&coordinator_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override { server_->Shutdown(); }

  TestRollout rollout_;
  TestReward reward_;
  TestReference reference_;
  TestTrainer trainer_;
  TestCoordinator coordinator_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TokenSequence MakeSequence(const std::string& id, std::initializer_list<int> tokens,
                           int prompt_length) {
  TokenSequence s;
  s.set_id(id);
  for (int t : tokens) s.add_token_ids(t);
  s.set_prompt_length(prompt_length);
  return s;
}

TEST_F(ApiServiceTest, RolloutGenerateStreamsEverySampleOnce) {
  auto stub = RolloutService::NewStub(channel_);
  GenerateRequest req;
  req.set_request_id("r1");
  req.mutable_sampling_params()->set_n(4);
  req.mutable_sampling_params()->set_temperature(1.0);
  for (int p = 0; p < 3; ++p) {
    GeneratePrompt* prompt = req.add_prompts();
    prompt->set_prompt_id("p" + std::to_string(p));
    prompt->add_token_ids(10 + p);
    prompt->set_first_sample_index(p == 2 ? 4 : 0);
  }
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, req);
  GenerateResponse resp;
  std::set<std::pair<std::string, int>> seen;
  while (reader->Read(&resp)) {
    EXPECT_EQ(resp.request_id(), "r1");
    EXPECT_TRUE(seen.emplace(resp.prompt_id(), resp.sample_index()).second);
    EXPECT_EQ(resp.sample().token_ids_size(), resp.sample().logprobs_size());
    EXPECT_EQ(resp.sample().finish_reason(), FINISH_REASON_STOP);
  }
  ASSERT_TRUE(reader->Finish().ok());
  // 3 prompts x 4 samples; prompt p2 numbered from 4.
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_TRUE(seen.count({"p2", 7}));
  EXPECT_FALSE(seen.count({"p2", 0}));
}

TEST_F(ApiServiceTest, RolloutGenerateErrorReachesClient) {
  auto stub = RolloutService::NewStub(channel_);
  GenerateRequest req;
  req.add_prompts()->add_token_ids(1);
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, req);
  GenerateResponse resp;
  EXPECT_FALSE(reader->Read(&resp));
  Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("sampling_params.n"), std::string::npos);
}

TEST_F(ApiServiceTest, RolloutWeightUpdateStatusAndAbort) {
  auto stub = RolloutService::NewStub(channel_);
  UpdateWeightsRequest req;
  req.mutable_version()->set_version(2);
  req.mutable_version()->set_global_step(2);
  req.set_transport("inline");
  UpdateWeightsResponse resp;
  req.set_phase(WEIGHT_UPDATE_PHASE_BEGIN);
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->UpdateWeights(&ctx, req, &resp).ok());
  }
  req.set_phase(WEIGHT_UPDATE_PHASE_DATA);
  Tensor* t = req.add_tensors();
  t->set_name("lm_head.weight");
  t->set_dtype(DTYPE_BFLOAT16);
  t->add_shape(3);
  t->add_shape(5);
  t->set_data(std::string(30, '\x7f'));
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->UpdateWeights(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.received_bytes(), 30);
    EXPECT_EQ(resp.current_version().version(), 0u);  // not committed yet
  }
  req.set_phase(WEIGHT_UPDATE_PHASE_COMMIT);
  req.clear_tensors();
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->UpdateWeights(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.current_version().version(), 2u);
  }
  GetRolloutStatusResponse status;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->GetStatus(&ctx, GetRolloutStatusRequest(), &status).ok());
  }
  EXPECT_EQ(status.weight_version().version(), 2u);
  EXPECT_EQ(status.queue_depth(), 3);
  EXPECT_DOUBLE_EQ(status.kv_cache_usage(), 0.25);
  AbortRequest abort;
  abort.add_request_ids("a");
  abort.add_request_ids("b");
  AbortResponse aborted;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->Abort(&ctx, abort, &aborted).ok());
  EXPECT_EQ(aborted.aborted_requests(), 2);
}

TEST_F(ApiServiceTest, RewardScoresPerItemWithPerItemErrors) {
  auto stub = RewardService::NewStub(channel_);
  ScoreRequest req;
  req.set_timeout_seconds(5);
  const char* rows[][3] = {{"exact", "42", "42"}, {"exact", "41", "42"}, {"nope", "1", "1"}};
  for (auto& row : rows) {
    RewardItem* item = req.add_items();
    item->set_id(std::to_string(req.items_size()));
    item->set_data_source(row[0]);
    item->set_response(row[1]);
    item->set_ground_truth(row[2]);
    (*item->mutable_extra_info())["split"] = "train";
  }
  ScoreResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->Score(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.results_size(), 3);
  EXPECT_EQ(resp.results(0).id(), "1");
  EXPECT_EQ(resp.results(0).score(), 1.0);
  EXPECT_EQ(resp.results(0).extra_values().at("len"), 2.0);
  EXPECT_EQ(resp.results(1).score(), 0.0);
  EXPECT_TRUE(resp.results(1).error().empty());
  EXPECT_EQ(resp.results(2).error(), "unknown data_source nope");
}

TEST_F(ApiServiceTest, ReferenceReturnsResponseTokenLogProbs) {
  auto stub = ReferenceService::NewStub(channel_);
  ComputeLogProbsRequest req;
  req.set_temperature(2.0);
  *req.add_sequences() = MakeSequence("a", {5, 6, 7, 8}, 2);
  ComputeLogProbsResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->ComputeLogProbs(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.results_size(), 1);
  EXPECT_EQ(resp.results(0).id(), "a");
  ASSERT_EQ(resp.results(0).logprobs_size(), 2);  // two response tokens: 7 and 8
  EXPECT_FLOAT_EQ(resp.results(0).logprobs(0), -3.5f);
  EXPECT_FLOAT_EQ(resp.results(0).logprobs(1), -4.0f);
}

TEST_F(ApiServiceTest, TrainerEveryRpc) {
  auto stub = TrainerService::NewStub(channel_);
  {
    ComputeOldLogProbsRequest req;
    req.set_temperature(1.0);
    *req.add_sequences() = MakeSequence("s", {1, 2, 3}, 1);
    ComputeOldLogProbsResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->ComputeOldLogProbs(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.results(0).logprobs_size(), 2);
    EXPECT_FLOAT_EQ(resp.results(0).logprobs(1), -3.0f);
  }
  {
    TrainStepRequest req;
    req.set_global_step(7);
    for (float a : {0.866f, -0.866f, 0.5f}) {
      TrainingSample* s = req.add_samples();
      *s->mutable_sequence() = MakeSequence("x", {1, 2}, 1);
      s->add_advantages(a);
      s->add_old_logprobs(-1.0f);
      s->add_ref_logprobs(-1.5f);
    }
    TrainStepResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->TrainStep(&ctx, req, &resp).ok());
    EXPECT_NEAR(resp.metrics().at("actor/advantage_sum"), 0.5, 1e-6);
    EXPECT_EQ(resp.weight_version().version(), 1u);
    EXPECT_EQ(resp.weight_version().global_step(), 7);
  }
  {
    SftStepRequest req;
    *req.add_sequences() = MakeSequence("a", {1, 2}, 1);
    *req.add_sequences() = MakeSequence("b", {1, 2}, 1);
    SftStepResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->SftStep(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.metrics().at("sft/num_sequences"), 2.0);
  }
  {
    SaveCheckpointRequest req;
    req.set_global_step(7);
    req.set_directory("/ckpt");
    req.mutable_data_position()->set_epoch(1);
    req.mutable_data_position()->set_index_in_epoch(96);
    req.set_coordinator_state(std::string("\x00rng", 4));
    SaveCheckpointResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->SaveCheckpoint(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.checkpoint().path(), "/ckpt/global_step_7");
  }
  {
    LoadCheckpointRequest req;
    req.set_path("/ckpt/global_step_7");
    LoadCheckpointResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->LoadCheckpoint(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.checkpoint().data_position().index_in_epoch(), 96);
    EXPECT_EQ(resp.checkpoint().coordinator_state(), std::string("\x00rng", 4));
    grpc::ClientContext ctx2;
    req.set_path("/elsewhere");
    EXPECT_EQ(stub->LoadCheckpoint(&ctx2, req, &resp).error_code(), StatusCode::NOT_FOUND);
  }
  {
    PublishWeightsRequest req;
    req.add_targets()->set_replica_id("r0");
    req.mutable_targets(0)->set_address("127.0.0.1:1");
    req.add_targets()->set_replica_id("r1");
    PublishWeightsResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->PublishWeights(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.results_size(), 2);
    EXPECT_TRUE(resp.results(0).ok());
    EXPECT_FALSE(resp.results(1).ok());
  }
  {
    GetTrainerStatusResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->GetStatus(&ctx, GetTrainerStatusRequest(), &resp).ok());
    EXPECT_EQ(resp.state(), TRAINER_STATE_IDLE);
    EXPECT_EQ(resp.global_step(), 7);
    EXPECT_EQ(resp.weight_version().version(), 2u);  // one TrainStep and one SftStep
  }
}

TEST_F(ApiServiceTest, CoordinatorEveryRpc) {
  auto stub = CoordinatorService::NewStub(channel_);
  RegisterReplicaRequest reg;
  reg.set_address("10.0.0.7:50051");
  reg.mutable_weight_version()->set_version(3);
  RegisterReplicaResponse reg_resp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->RegisterReplica(&ctx, reg, &reg_resp).ok());
  }
  EXPECT_EQ(reg_resp.replica_id(), "replica-0");
  EXPECT_EQ(reg_resp.target_weight_version().version(), 5u);
  ListReplicasResponse list;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->ListReplicas(&ctx, ListReplicasRequest(), &list).ok());
  }
  ASSERT_EQ(list.replicas_size(), 1);
  EXPECT_EQ(list.replicas(0).address(), "10.0.0.7:50051");
  EXPECT_EQ(list.replicas(0).weight_version().version(), 3u);
  PauseRequest pause;
  pause.set_reason("maintenance");
  PauseResponse pause_resp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Pause(&ctx, pause, &pause_resp).ok());
  }
  EXPECT_EQ(pause_resp.state(), RUN_STATE_PAUSED);
  GetCoordinatorStatusResponse status;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->GetStatus(&ctx, GetCoordinatorStatusRequest(), &status).ok());
  }
  EXPECT_EQ(status.state(), RUN_STATE_PAUSED);
  EXPECT_EQ(status.replicas_size(), 1);
  ResumeResponse resume_resp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Resume(&ctx, ResumeRequest(), &resume_resp).ok());
  }
  EXPECT_EQ(resume_resp.state(), RUN_STATE_RUNNING);
  UnregisterReplicaRequest unreg;
  unreg.set_replica_id("replica-0");
  UnregisterReplicaResponse unreg_resp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->UnregisterReplica(&ctx, unreg, &unreg_resp).ok());
  }
  grpc::ClientContext ctx;
  EXPECT_EQ(stub->UnregisterReplica(&ctx, unreg, &unreg_resp).error_code(), StatusCode::NOT_FOUND);
}

TEST_F(ApiServiceTest, BuiltInHealthServiceSpeaksOurHealthProto) {
  auto stub = ::grpc::health::v1::Health::NewStub(channel_);
  using ::grpc::health::v1::HealthCheckRequest;
  using ::grpc::health::v1::HealthCheckResponse;
  server_->GetHealthCheckService()->SetServingStatus("rlmesh.v1.RolloutService", false);
  HealthCheckRequest req;
  req.set_service("rlmesh.v1.RolloutService");
  HealthCheckResponse resp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Check(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.status(), HealthCheckResponse::NOT_SERVING);
  }
  server_->GetHealthCheckService()->SetServingStatus("rlmesh.v1.RolloutService", true);
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Check(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.status(), HealthCheckResponse::SERVING);
  }
  req.set_service("no.such.Service");
  grpc::ClientContext ctx;
  EXPECT_EQ(stub->Check(&ctx, req, &resp).error_code(), StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace rlmesh::v1
