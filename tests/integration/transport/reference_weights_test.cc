// The KL reference takes its weights from the trainer (issue #13, items 4 and 6), not from a
// folder they would have to share: a real Trainer (alone, or a sharded group publishing one
// unit at a time) publishes to a real ReferenceService behind a gRPC server on loopback, over
// the shm data plane or inline, and the reference then scores sequences exactly as the
// trainer's policy does — the current weights, or those of a checkpoint the trainer saved.
// Broken updates are refused naming what was wrong, and the old weights stay in use.
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/model/pretrained.h"
#include "common/transport/control_channel.h"
#include "common/transport/transport_factory.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "rlmesh/v1/reference.grpc.pb.h"
#include "services/reference/reference_service.h"
#include "services/rollout/tensor_codec.h"
#include "services/trainer/trainer.h"
#include "services/trainer/trainer_group_testing.h"

namespace rlmesh {
namespace {

namespace fs = std::filesystem;

// A two-layer Qwen2 of hidden 32, weights drawn with `seed`.
std::shared_ptr<model::CausalLmImpl> TinyModel(uint64_t seed) {
  auto config = model::ModelConfig::FromJson(
      R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 24, "max_position_embeddings": 32, "tie_word_embeddings": false})",
      "test");
  EXPECT_TRUE(config.ok()) << config.status();
  torch::manual_seed(seed);
  auto m = model::CausalLmImpl::Create(*config, {});
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

// A copy of TinyModel(seed)'s parameters, as a trainer publishes them.
trainer::NamedTensors Weights(uint64_t seed) {
  trainer::NamedTensors tensors;
  for (const auto& item : TinyModel(seed)->named_parameters())
    tensors.emplace_back(item.key(), item.value().detach().clone());
  return tensors;
}

// TinyModel(11) in a Hugging Face folder.
std::string MakeModel(const std::string& name) {
  const std::string dir = testing::TempDir() + "/rlmesh_reference_weights_" + name;
  fs::remove_all(dir);
  EXPECT_TRUE(model::SavePretrained(*TinyModel(11), dir, "").ok());
  std::ofstream(dir + "/tokenizer.json") << "{}";
  std::ofstream(dir + "/tokenizer_config.json") << "{}";
  return dir;
}

config::TrainerSettings Settings(const std::string& model, const std::string& name,
                                 const std::string& transport) {
  config::TrainerSettings t;
  t.model_path = model;
  t.dtype = "float32";
  t.reduce_dtype = "float32";
  t.device = "cpu";
  t.max_batch_sequences = 8;
  t.actor.ppo_mini_batch_size = 4;
  t.actor.ppo_micro_batch_size = 2;
  t.actor.log_prob_micro_batch_size = 8;
  t.actor.loss_agg_mode = "token-mean";
  t.actor.kl_loss_type = "low_var_kl";
  t.actor.lr = 1e-2;  // a step that moves the log-probs well beyond rounding
  t.actor.lr_scheduler_type = "constant";
  t.warmup_lr = 1e-2;
  t.warmup_batch_size = 8;
  t.checkpoint_dir = testing::TempDir() + "/rlmesh_reference_weights_ckpt_" + name;
  fs::remove_all(t.checkpoint_dir);
  t.weight_transport = transport;
  t.weight_bucket_bytes = 4096;  // many buckets; inline, tensors in parts (Tensor.offset)
  t.bind_host = "127.0.0.1";
  return t;
}

// A reference service behind a gRPC server on 127.0.0.1:<free port>.
class ServedReference {
 public:
  // `node_id`: the node it says it is on ("" = this machine's).
  ServedReference(const std::string& model, bool param_offload, const std::string& node_id = "")
      : service_(registry_) {
    reference::ReferenceOptions options;
    options.model_path = model;
    options.param_offload = param_offload;
    options.node_id = node_id;
    auto created = reference::ReferenceModel::Create(options);
    EXPECT_TRUE(created.ok()) << created.status();
    model_ = std::move(*created);
    service_.SetModel(model_.get());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    stub_ = v1::ReferenceService::NewStub(
        grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
  }
  ~ServedReference() {
    server_->Shutdown();
    service_.SetModel(nullptr);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  v1::WeightTarget Target() const {
    v1::WeightTarget target;
    target.set_replica_id("reference");
    target.set_address(address());
    target.set_kind(v1::WEIGHT_TARGET_KIND_REFERENCE);
    return target;
  }
  absl::StatusOr<v1::ComputeLogProbsResponse> Score(const v1::ComputeLogProbsRequest& request) {
    grpc::ClientContext context;
    v1::ComputeLogProbsResponse response;
    grpc::Status status = stub_->ComputeLogProbs(&context, request, &response);
    if (!status.ok()) return absl::InternalError(status.error_message());
    return response;
  }
  // Versions committed so far that came over `transport` (rlmesh_reference_weight_updates_total).
  double Updates(const std::string& transport) {
    for (const auto& family : registry_.Collect()) {
      if (family.name != "rlmesh_reference_weight_updates_total") continue;
      for (const auto& metric : family.metric) {
        for (const auto& label : metric.label) {
          if (label.name == "transport" && label.value == transport) return metric.counter.value;
        }
      }
    }
    return 0;
  }
  grpc::Status Update(const v1::UpdateWeightsRequest& request) {
    grpc::ClientContext context;
    v1::UpdateWeightsResponse response;
    return stub_->UpdateWeights(&context, request, &response);
  }

 private:
  prometheus::Registry registry_;
  reference::ReferenceServiceImpl service_;
  std::unique_ptr<reference::ReferenceModel> model_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ReferenceService::Stub> stub_;
};

std::vector<v1::TokenSequence> Sequences() {
  std::vector<v1::TokenSequence> out;
  for (int b = 0; b < 8; ++b) {
    v1::TokenSequence seq;
    seq.set_id(absl::StrCat("s", b));
    for (int t = 0; t < 5 + b % 4; ++t) seq.add_token_ids(1 + (b * 7 + t * 5) % 23);
    seq.set_prompt_length(3);
    out.push_back(seq);
  }
  return out;
}

// The policy's log-probs of Sequences() (the trainer's own pass).
std::vector<std::vector<float>> PolicyLogProbs(trainer::Trainer& trainer) {
  v1::ComputeOldLogProbsRequest request;
  for (const auto& seq : Sequences()) *request.add_sequences() = seq;
  auto r = trainer.ComputeOldLogProbs(request);
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<std::vector<float>> out;
  if (r.ok()) {
    for (const auto& result : r->results())
      out.emplace_back(result.logprobs().begin(), result.logprobs().end());
  }
  return out;
}

// The reference's log-probs of Sequences() and the version it answers with.
std::pair<std::vector<std::vector<float>>, uint64_t> ReferenceLogProbs(ServedReference& ref) {
  v1::ComputeLogProbsRequest request;
  for (const auto& seq : Sequences()) *request.add_sequences() = seq;
  auto r = ref.Score(request);
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<std::vector<float>> out;
  if (!r.ok()) return {out, 0};
  for (const auto& result : r->results())
    out.emplace_back(result.logprobs().begin(), result.logprobs().end());
  return {out, r->weight_version().version()};
}

double MaxDiff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double most = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].size(), b[i].size());
    for (size_t j = 0; j < a[i].size() && j < b[i].size(); ++j)
      most = std::max<double>(most, std::abs(a[i][j] - b[i][j]));
  }
  return most;
}

// One supervised step on Sequences(): the policy moves away from the initial model.
void Step(trainer::Trainer& trainer, int64_t step) {
  v1::SftStepRequest sft;
  for (const auto& seq : Sequences()) *sft.add_sequences() = seq;
  sft.set_step(step);
  auto r = trainer.SftStep(sft);
  ASSERT_TRUE(r.ok()) << r.status();
}

void ExpectOk(const absl::StatusOr<v1::PublishWeightsResponse>& published) {
  ASSERT_TRUE(published.ok()) << published.status();
  ASSERT_EQ(published->results_size(), 1);
  EXPECT_TRUE(published->results(0).ok()) << published->results(0).error();
}

// The reference takes the trainer's current weights (over the shm data plane, or inline with
// the grpc transport), then a saved checkpoint's (always inline), and scores as the policy it
// was sent; with param_offload too (the new weights are moved into host-resident units).
TEST(ReferenceWeightsTest, TheReferenceScoresAsThePolicyTheTrainerSentIt) {
  const std::string model = MakeModel("send");
  for (const char* transport : {"grpc", "shm"}) {
    for (bool offload : {false, true}) {
      SCOPED_TRACE(absl::StrCat("transport ", transport, ", param_offload ", offload));
      const std::string name = absl::StrCat(transport, offload ? "_offload" : "");
      auto trainer = trainer::Trainer::Create(Settings(model, name, transport));
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      ServedReference reference(model, offload);
      const auto initial = PolicyLogProbs(**trainer);
      EXPECT_LT(MaxDiff(ReferenceLogProbs(reference).first, initial), 1e-6);

      // Two steps, saved, sent: the reference is the policy after two steps.
      Step(**trainer, 1);
      Step(**trainer, 2);
      const auto after_two = PolicyLogProbs(**trainer);
      ASSERT_GT(MaxDiff(after_two, initial), 1e-3) << "the steps did not move the policy";
      v1::SaveCheckpointRequest save;
      save.set_global_step(0);
      save.set_directory(Settings(model, name, transport).checkpoint_dir + "/warmup");
      auto saved = (*trainer)->SaveCheckpoint(save);
      ASSERT_TRUE(saved.ok()) << saved.status();
      v1::PublishWeightsRequest publish;
      *publish.add_targets() = reference.Target();
      auto published = (*trainer)->PublishWeights(publish);
      ExpectOk(published);
      EXPECT_EQ(published->weight_version().version(), 2u);
      auto [scored, version] = ReferenceLogProbs(reference);
      const double current = MaxDiff(scored, after_two);
      EXPECT_LT(current, 1e-6);
      EXPECT_EQ(version, 2u);
      const std::string used = std::string(transport) == "shm" ? "shm" : "inline";
      EXPECT_EQ(reference.Updates(used), 1.0);
      // Published from the parameters themselves: nothing held beside them.
      EXPECT_EQ(published->peak_held_bytes(), 0);

      // A third step; the reference keeps the version it has until it is sent another.
      Step(**trainer, 3);
      EXPECT_GT(MaxDiff(PolicyLogProbs(**trainer), after_two), 1e-3);
      EXPECT_LT(MaxDiff(ReferenceLogProbs(reference).first, after_two), 1e-6);

      // A fresh reference (a restarted pod) holds the initial model; the trainer sends it the
      // saved checkpoint's weights under that checkpoint's version, its own unchanged.
      ServedReference restarted(model, offload);
      EXPECT_EQ(ReferenceLogProbs(restarted).second, 0u);
      v1::PublishWeightsRequest again;
      *again.add_targets() = restarted.Target();
      again.set_checkpoint(saved->checkpoint().path());
      auto resent = (*trainer)->PublishWeights(again);
      ExpectOk(resent);
      EXPECT_EQ(resent->weight_version().version(), 2u);
      EXPECT_EQ((*trainer)->Status().weight_version().version(), 3u);
      auto [rescored, reversion] = ReferenceLogProbs(restarted);
      const double from_checkpoint = MaxDiff(rescored, after_two);
      EXPECT_LT(from_checkpoint, 1e-6);
      EXPECT_EQ(reversion, 2u);
      EXPECT_EQ(restarted.Updates("inline"), 1.0);
      // Read from the folder a tensor at a time: the largest is an MLP projection (64 x 32).
      EXPECT_EQ(resent->peak_held_bytes(), 64 * 32 * 4);
      std::printf("%s, param_offload %d: reference vs policy %.3g (sent), %.3g (checkpoint)\n",
                  transport, offload, current, from_checkpoint);
    }
  }
}

// A checkpoint's weights go to references only; the reference takes tensors of its own
// parameters' names and shapes, from a data plane only with its endpoint, and commits a
// version only whole. After each refusal
// the reference still answers with the weights it had.
TEST(ReferenceWeightsTest, BrokenUpdatesAreRefusedAndTheOldWeightsStay) {
  const std::string model = MakeModel("refuse");
  auto trainer = trainer::Trainer::Create(Settings(model, "refuse", "grpc"));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ServedReference reference(model, false);
  const auto initial = ReferenceLogProbs(reference).first;

  v1::SaveCheckpointRequest save;
  auto saved = (*trainer)->SaveCheckpoint(save);
  ASSERT_TRUE(saved.ok()) << saved.status();
  v1::PublishWeightsRequest to_rollout;
  auto* target = to_rollout.add_targets();
  target->set_replica_id("r0");
  target->set_address(reference.address());
  to_rollout.set_checkpoint(saved->checkpoint().path());
  auto refused = (*trainer)->PublishWeights(to_rollout);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("targets[0].kind"), std::string::npos)
      << refused.status();
  v1::PublishWeightsRequest missing;
  *missing.add_targets() = reference.Target();
  missing.set_checkpoint(saved->checkpoint().path() + "_not_there");
  EXPECT_FALSE((*trainer)->PublishWeights(missing).ok());

  auto begin = [](uint64_t version) {
    v1::UpdateWeightsRequest request;
    request.set_phase(v1::WEIGHT_UPDATE_PHASE_BEGIN);
    request.mutable_version()->set_version(version);
    request.set_transport("inline");
    return request;
  };
  auto expect = [](const grpc::Status& status, grpc::StatusCode code, const std::string& text) {
    EXPECT_EQ(status.error_code(), code) << status.error_message();
    EXPECT_NE(status.error_message().find(text), std::string::npos) << status.error_message();
  };
  auto shm = begin(5);
  shm.set_transport("shm");
  expect(reference.Update(shm), grpc::StatusCode::INVALID_ARGUMENT,
         "endpoint: transport \"shm\" needs the trainer's data-plane endpoint, got none");
  auto pigeon = begin(5);
  pigeon.set_transport("pigeon");
  pigeon.set_endpoint("127.0.0.1:1");
  expect(reference.Update(pigeon), grpc::StatusCode::INVALID_ARGUMENT,
         "weight transport \"pigeon\"");
  auto stranger = begin(5);
  ASSERT_TRUE(
      rollout::EncodeTensor("no.such.weight", torch::zeros({2}), stranger.add_tensors()).ok());
  expect(reference.Update(stranger), grpc::StatusCode::INVALID_ARGUMENT,
         "(no.such.weight): not a parameter of this model");
  auto misshapen = begin(5);
  ASSERT_TRUE(
      rollout::EncodeTensor("model.norm.weight", torch::ones({3}), misshapen.add_tensors()).ok());
  expect(reference.Update(misshapen), grpc::StatusCode::INVALID_ARGUMENT,
         "tensors[model.norm.weight].shape: expected [32], got [3]");
  auto wrong_dtype = begin(5);
  ASSERT_TRUE(rollout::EncodeTensor("model.norm.weight", torch::ones({32}, torch::kFloat64),
                                    wrong_dtype.add_tensors())
                  .ok());
  expect(reference.Update(wrong_dtype), grpc::StatusCode::INVALID_ARGUMENT,
         "tensors[model.norm.weight].dtype: expected Float, got Double (DTYPE_FLOAT64)");
  // Half a version: BEGIN with one tensor, then COMMIT.
  auto half = begin(6);
  ASSERT_TRUE(
      rollout::EncodeTensor("model.norm.weight", torch::ones({32}), half.add_tensors()).ok());
  ASSERT_TRUE(reference.Update(half).ok());
  v1::UpdateWeightsRequest commit;
  commit.set_phase(v1::WEIGHT_UPDATE_PHASE_COMMIT);
  commit.mutable_version()->set_version(6);
  expect(reference.Update(commit), grpc::StatusCode::FAILED_PRECONDITION,
         "tensors: received 1 of the model's");
  commit.mutable_version()->set_version(7);
  expect(reference.Update(commit), grpc::StatusCode::FAILED_PRECONDITION,
         "version: no update of version 7 was begun");
  auto [after, version] = ReferenceLogProbs(reference);
  EXPECT_EQ(version, 0u);
  EXPECT_EQ(MaxDiff(after, initial), 0.0);
}

// The bytes of the largest unit of the model at `dir` (a decoder layer, or the embeddings,
// final norm and head) and of the whole model.
std::pair<int64_t, int64_t> UnitBytes(const std::string& dir) {
  auto m = model::LoadPretrained(dir, {});
  EXPECT_TRUE(m.ok()) << m.status();
  int64_t largest = 0, whole = 0;
  for (int u = 0; m.ok() && u < (*m)->NumUnits(); ++u) {
    int64_t bytes = 0;
    for (const auto& p : (*m)->UnitParameters(u)) bytes += p.numel() * p.element_size();
    largest = std::max(largest, bytes);
    whole += bytes;
  }
  return {largest, whole};
}

// A sharded group of 2 publishes from its shards one unit at a time: every rank gathers a unit,
// rank 0 copies it into the shm segment and the inline calls, and frees it before the next, so
// rank 0 holds one unit beyond its shard (peak_held_bytes), never the whole model. References
// pull over the data plane (or take it inline under grpc) and score as the group's policy. A
// target no one answers at fails over the data plane, then inline in a second pass the whole
// group takes part in; the group serves on afterwards.
TEST(ReferenceWeightsTest, AShardedGroupPublishesFromItsShardsOneUnitAtATime) {
  const std::string model = MakeModel("sharded");
  for (const char* transport : {"shm", "grpc"}) {
    SCOPED_TRACE(transport);
    config::TrainerSettings settings =
        Settings(model, absl::StrCat("sharded_", transport), transport);
    settings.sharded = true;
    settings.actor.ppo_micro_batch_size = 1;
    trainer::TrainerGroup group(2, settings);
    ASSERT_TRUE(group.ok());
    Step(group.rank0(), 1);
    const auto policy = PolicyLogProbs(group.rank0());
    ServedReference pulled(model, false), sent(model, false);
    v1::PublishWeightsRequest publish;
    *publish.add_targets() = pulled.Target();
    *publish.add_targets() = sent.Target();
    publish.set_timeout_seconds(30);
    auto first = group.rank0().PublishWeights(publish);
    ASSERT_TRUE(first.ok()) << first.status();
    for (const auto& result : first->results()) EXPECT_TRUE(result.ok()) << result.error();
    const auto [largest, whole] = UnitBytes(model);
    EXPECT_EQ(first->peak_held_bytes(), largest);
    EXPECT_LT(first->peak_held_bytes(), whole / 2);
    EXPECT_EQ(first->bytes(), whole);
    auto [scored, version] = ReferenceLogProbs(pulled);
    EXPECT_LT(MaxDiff(scored, policy), 1e-6);
    EXPECT_EQ(version, 1u);
    EXPECT_EQ(pulled.Updates(std::string(transport) == "shm" ? "shm" : "inline"), 1.0);

    // The same version to the second reference inline, next to a target no one answers at.
    v1::PublishWeightsRequest mixed;
    *mixed.add_targets() = sent.Target();
    v1::WeightTarget* dead = mixed.add_targets();
    dead->set_replica_id("gone");
    dead->set_address("127.0.0.1:1");
    dead->set_kind(v1::WEIGHT_TARGET_KIND_REFERENCE);
    mixed.set_timeout_seconds(30);
    mixed.set_transport("inline");
    auto second = group.rank0().PublishWeights(mixed);
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_TRUE(second->results(0).ok()) << second->results(0).error();
    EXPECT_FALSE(second->results(1).ok());
    EXPECT_LT(MaxDiff(ReferenceLogProbs(sent).first, policy), 1e-6);
    EXPECT_EQ(sent.Updates("inline"), std::string(transport) == "shm" ? 1.0 : 2.0);

    // Over the configured transport the dead target is tried on the data plane, then inline.
    Step(group.rank0(), 2);
    mixed.clear_transport();
    auto third = group.rank0().PublishWeights(mixed);
    ASSERT_TRUE(third.ok()) << third.status();
    EXPECT_EQ(third->weight_version().version(), 2u);
    EXPECT_TRUE(third->results(0).ok()) << third->results(0).error();
    ASSERT_FALSE(third->results(1).ok());
    if (std::string(transport) == "shm") {
      EXPECT_NE(third->results(1).error().find("inline fallback"), std::string::npos)
          << third->results(1).error();
    }
    EXPECT_EQ(ReferenceLogProbs(sent).second, 2u);
    // The group went through the same passes: it still trains.
    Step(group.rank0(), 3);
    EXPECT_GT(MaxDiff(PolicyLogProbs(group.rank0()), policy), 1e-3);
  }
}

// A trainer offering its node a second backend: the reference on its node takes that one, a
// reference on another node the configured one (tcp here, with shm offered beside it as
// cuda_ipc is beside nccl on GPUs), and each scores with the weights it was sent.
// rlmesh_reference_weight_updates_total counts each by the way its bytes came.
TEST(ReferenceWeightsTest, AReferenceOnTheTrainersNodeTakesTheSameNodeOffer) {
  const std::string model = MakeModel("node");
  ServedReference here(model, false), away(model, false, "another-node");
  const auto initial = ReferenceLogProbs(here).first;
  trainer::WeightPublisherOptions options;
  options.transport = "tcp";
  options.same_node_transport = "shm";
  options.bucket_bytes = 4096;
  auto publisher = trainer::WeightPublisher::Create(options);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  // Other weights of the same shapes.
  trainer::NamedTensors tensors = Weights(12);
  google::protobuf::RepeatedPtrField<v1::WeightTarget> targets;
  *targets.Add() = here.Target();
  *targets.Add() = away.Target();
  targets.Mutable(1)->set_replica_id("reference-away");
  v1::WeightVersion version;
  version.set_version(1);
  trainer::PublishOptions publish;
  publish.timeout_seconds = 30;
  auto published = (*publisher)->Publish(std::move(tensors), version, targets, "", publish);
  ASSERT_TRUE(published.ok()) << published.status();
  for (const auto& r : published->results()) EXPECT_TRUE(r.ok()) << r.replica_id() << r.error();
  EXPECT_EQ(here.Updates("shm"), 1.0);
  EXPECT_EQ(away.Updates("tcp"), 1.0);
  EXPECT_EQ(
      here.Updates("tcp") + away.Updates("shm") + here.Updates("inline") + away.Updates("inline"),
      0.0);
  const auto [scored_here, version_here] = ReferenceLogProbs(here);
  const auto [scored_away, version_away] = ReferenceLogProbs(away);
  EXPECT_EQ(version_here, 1u);
  EXPECT_EQ(version_away, 1u);
  EXPECT_GT(MaxDiff(scored_here, initial), 1e-3) << "the new weights are not in use";
  EXPECT_EQ(MaxDiff(scored_here, scored_away), 0.0);
  EXPECT_EQ((*publisher)->inline_fallbacks(), 0);
}

// A same-node offer that fails on the reference is passed over from then on: one nobody
// listens at within the same BEGIN, one whose version fails here from the next BEGIN (that
// BEGIN fails naming why; the trainer would send the version inline). Real senders, BEGIN and
// COMMIT straight to the reference.
TEST(ReferenceWeightsTest, ASameNodeOfferThatFailsOnTheReferenceIsPassedOver) {
  const std::string model = MakeModel("offer");
  ServedReference reference(model, false);
  const auto initial = ReferenceLogProbs(reference).first;
  transport::SenderOptions sender_options;
  sender_options.transfer_timeout = transport::Duration(30);
  auto tcp = transport::CreateSender("tcp", sender_options);
  auto shm = transport::CreateSender("shm", sender_options);
  ASSERT_TRUE(tcp.ok() && shm.ok());
  const trainer::NamedTensors weights = Weights(12);
  std::vector<transport::ConstTensorView> good;
  for (const auto& [name, tensor] : weights)
    good.push_back({{name, transport::DType::kFloat32, tensor.sizes().vec()}, tensor.data_ptr()});
  std::vector<transport::ConstTensorView> bad = good;
  bad.front().meta.name = "model.no_such_parameter";
  // Published before anyone subscribes: a subscriber is caught up with the current version.
  ASSERT_TRUE((*tcp)->Publish(1, good).ok());
  ASSERT_TRUE((*shm)->Publish(1, bad).ok());
  auto update = [&](v1::WeightUpdatePhase phase, uint64_t version,
                    const std::string& same_node_endpoint) {
    v1::UpdateWeightsRequest request;
    request.set_phase(phase);
    request.mutable_version()->set_version(version);
    request.set_transport("tcp");
    request.set_endpoint((*tcp)->endpoint());
    request.set_timeout_seconds(30);
    auto& o = *request.mutable_transport_options();
    o[transport::kSameNodeTransportOption] = "shm";
    o[transport::kSameNodeEndpointOption] = same_node_endpoint;
    o[transport::kSenderNodeOption] = transport::NodeId();
    return reference.Update(request);
  };
  auto closed = transport::Listener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(closed.ok());
  const std::string nobody = (*closed)->endpoint();
  closed->reset();
  grpc::Status begun = update(v1::WEIGHT_UPDATE_PHASE_BEGIN, 1, nobody);
  ASSERT_TRUE(begun.ok()) << begun.error_message();
  ASSERT_TRUE(update(v1::WEIGHT_UPDATE_PHASE_COMMIT, 1, nobody).ok());
  EXPECT_EQ(reference.Updates("tcp"), 1.0);

  grpc::Status failed = update(v1::WEIGHT_UPDATE_PHASE_BEGIN, 1, (*shm)->endpoint());
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.error_message().find("no_such_parameter"), std::string::npos)
      << failed.error_message();
  grpc::Status again = update(v1::WEIGHT_UPDATE_PHASE_BEGIN, 1, (*shm)->endpoint());
  ASSERT_TRUE(again.ok()) << again.error_message();
  ASSERT_TRUE(update(v1::WEIGHT_UPDATE_PHASE_COMMIT, 1, (*shm)->endpoint()).ok());
  EXPECT_EQ(reference.Updates("tcp"), 2.0);
  EXPECT_EQ(reference.Updates("shm"), 0.0);
  EXPECT_GT(MaxDiff(ReferenceLogProbs(reference).first, initial), 1e-3)
      << "the new weights are not in use";
}

}  // namespace
}  // namespace rlmesh
