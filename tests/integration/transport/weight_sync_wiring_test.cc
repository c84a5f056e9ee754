// The trainer's WeightPublisher and real rollout replicas behind real gRPC servers on loopback:
// a version published over the shm data plane (BEGIN names the endpoint, the replica pulls,
// COMMIT applies between decode steps) changes what the replicas generate to exactly what the
// published model generates (checked against an independent full-forward greedy reference);
// inline gRPC still works between data-plane versions; a replica added later is caught up
// with the current version without a new send.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <filesystem>

#include "absl/synchronization/notification.h"
#include "common/generation/test_model.h"
#include "common/model/pretrained.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "services/rollout/replica.h"
#include "services/rollout/rollout_service.h"
#include "services/trainer/weight_publisher.h"

namespace rlmesh {
namespace {

namespace fs = std::filesystem;
using generation::testing::ReferenceGreedy;
using generation::testing::TinyModel;

const std::vector<int64_t> kPrompt = {5, 17, 42, 8};
constexpr int64_t kNewTokens = 8;

// A replica served over gRPC on 127.0.0.1:<free port>.
class ServedReplica {
 public:
  explicit ServedReplica(const std::string& model_dir) : ServedReplica(Options(model_dir)) {}
  static rollout::ReplicaOptions Options(const std::string& model_dir) {
    rollout::ReplicaOptions options;
    options.model_path = model_dir;
    options.max_num_seqs = 4;
    return options;
  }
  explicit ServedReplica(const rollout::ReplicaOptions& options) : service_(registry_) {
    auto replica = rollout::Replica::Create(options);
    EXPECT_TRUE(replica.ok()) << replica.status();
    replica_ = std::move(*replica);
    service_.SetReplica(replica_.get());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~ServedReplica() {
    server_->Shutdown();
    service_.SetReplica(nullptr);
    replica_->Shutdown();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  rollout::Replica& replica() { return *replica_; }
  // rlmesh_rollout_weight_updates_total{transport="<path>"} of this replica's service.
  double UpdatesBy(const std::string& path) {
    for (const auto& family : registry_.Collect()) {
      if (family.name != "rlmesh_rollout_weight_updates_total") continue;
      for (const auto& metric : family.metric) {
        for (const auto& label : metric.label)
          if (label.name == "transport" && label.value == path) return metric.counter.value;
      }
    }
    return 0;
  }

  // Greedy continuation of kPrompt by the replica's engine.
  std::vector<int64_t> Greedy() {
    v1::GenerateRequest request;
    request.set_request_id("greedy-" + std::to_string(++calls_));
    auto* prompt = request.add_prompts();
    prompt->set_prompt_id("p");
    for (int64_t t : kPrompt) prompt->add_token_ids(static_cast<int32_t>(t));
    auto* p = request.mutable_sampling_params();
    p->set_temperature(0);
    p->set_max_new_tokens(kNewTokens);
    p->set_n(1);
    p->set_ignore_eos(true);
    std::vector<int64_t> tokens;
    absl::Notification done;
    auto submitted = replica_->Submit(request, [&](v1::GenerateResponse r) {
      for (int32_t t : r.sample().token_ids()) tokens.push_back(t);
      // The replica times every sample (Sample.generation_seconds).
      EXPECT_GT(r.sample().generation_seconds(), 0.0);
      done.Notify();
    });
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    done.WaitForNotification();
    replica_->Forget(request.request_id());
    return tokens;
  }

 private:
  prometheus::Registry registry_;
  rollout::RolloutServiceImpl service_;
  std::unique_ptr<rollout::Replica> replica_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  int calls_ = 0;
};

trainer::NamedTensors Snapshot(model::CausalLmImpl& model) {
  trainer::NamedTensors tensors;
  for (const auto& item : model.named_parameters())
    tensors.emplace_back(item.key(), item.value().detach().clone());
  return tensors;
}

v1::WeightVersion Version(uint64_t v) {
  v1::WeightVersion version;
  version.set_version(v);
  version.set_source("trainer");
  return version;
}

google::protobuf::RepeatedPtrField<v1::WeightTarget> Targets(
    const std::vector<ServedReplica*>& replicas) {
  google::protobuf::RepeatedPtrField<v1::WeightTarget> targets;
  for (size_t i = 0; i < replicas.size(); ++i) {
    auto* t = targets.Add();
    t->set_replica_id("replica-" + std::to_string(i) + "-" + replicas[i]->address());
    t->set_address(replicas[i]->address());
  }
  return targets;
}

void ExpectAllOk(const absl::StatusOr<v1::PublishWeightsResponse>& response, int n) {
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->results_size(), n);
  for (const auto& r : response->results())
    EXPECT_TRUE(r.ok()) << r.replica_id() << ": " << r.error();
}

TEST(WeightSyncWiringTest, ShmVersionsChangeWhatReplicasGenerateAndInlineStillWorks) {
  const fs::path dir = fs::temp_directory_path() / ("rlmesh_wiring_" + std::to_string(::getpid()));
  auto initial = TinyModel(/*seed=*/1);
  auto trained = TinyModel(/*seed=*/2);
  ASSERT_TRUE(model::SavePretrained(*initial, dir.string(), "").ok());
  const auto initial_tokens = ReferenceGreedy(*initial, kPrompt, kNewTokens);
  const auto trained_tokens = ReferenceGreedy(*trained, kPrompt, kNewTokens);
  ASSERT_NE(initial_tokens, trained_tokens) << "the two seeds must give distinguishable models";

  ServedReplica a(dir.string()), b(dir.string());
  EXPECT_EQ(a.Greedy(), initial_tokens);

  trainer::WeightPublisherOptions options;
  options.transport = "shm";
  options.bucket_bytes = 4096;  // many buckets even for a tiny model
  auto publisher = trainer::WeightPublisher::Create(options);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  trainer::PublishOptions publish;
  publish.timeout_seconds = 60;

  // Version 1 over shm: both replicas subscribe on BEGIN, pull, and commit.
  ExpectAllOk((*publisher)->Publish(Snapshot(*trained), Version(1), Targets({&a, &b}), "", publish),
              2);
  EXPECT_EQ(a.replica().weight_version().version(), 1u);
  EXPECT_EQ(a.Greedy(), trained_tokens);
  EXPECT_EQ(b.Greedy(), trained_tokens);

  // Version 2 inline (the fallback path), back to the initial weights.
  ExpectAllOk(
      (*publisher)->Publish(Snapshot(*initial), Version(2), Targets({&a, &b}), "inline", publish),
      2);
  EXPECT_EQ(b.replica().weight_version().version(), 2u);
  EXPECT_EQ(b.Greedy(), initial_tokens);

  // Version 3 over shm again, through the subscriptions made for version 1.
  ExpectAllOk((*publisher)->Publish(Snapshot(*trained), Version(3), Targets({&a, &b}), "", publish),
              2);
  EXPECT_EQ(a.Greedy(), trained_tokens);
  EXPECT_EQ(b.Greedy(), trained_tokens);

  // A replica added now gets version 3 without a new send (the sender's catch-up).
  ServedReplica late(dir.string());
  EXPECT_EQ(late.Greedy(), initial_tokens);
  ExpectAllOk((*publisher)->Publish(Snapshot(*trained), Version(3), Targets({&late}), "", publish),
              1);
  EXPECT_EQ(late.replica().weight_version().version(), 3u);
  EXPECT_EQ(late.Greedy(), trained_tokens);

  EXPECT_EQ((*publisher)->inline_fallbacks(), 0)
      << "every data-plane version must have gone over shm";

  // A transport other than the configured one is refused, naming the key.
  auto refused =
      (*publisher)->Publish(Snapshot(*trained), Version(4), Targets({&a}), "nccl", publish);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("rlmesh.weight_sync.transport"));
  fs::remove_all(dir);
}

// rlmesh.weight_sync.transport = tcp from a trainer bound to every interface: the BEGIN names
// "0.0.0.0:<port>", each replica dials the address the call came from, and the version goes
// down the chain of replicas; the replicas count it under transport="tcp".
TEST(WeightSyncWiringTest, TcpVersionsGoDownTheChainFromATrainerBoundToEveryInterface) {
  const fs::path dir =
      fs::temp_directory_path() / ("rlmesh_wiring_tcp_" + std::to_string(::getpid()));
  auto initial = TinyModel(/*seed=*/1);
  auto trained = TinyModel(/*seed=*/2);
  ASSERT_TRUE(model::SavePretrained(*initial, dir.string(), "").ok());
  const auto initial_tokens = ReferenceGreedy(*initial, kPrompt, kNewTokens);
  const auto trained_tokens = ReferenceGreedy(*trained, kPrompt, kNewTokens);

  ServedReplica a(dir.string()), b(dir.string()), c(dir.string());
  trainer::WeightPublisherOptions options;
  options.transport = "tcp";
  options.bind_host = "0.0.0.0";
  options.bucket_bytes = 4096;
  auto publisher = trainer::WeightPublisher::Create(options);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  trainer::PublishOptions publish;
  publish.timeout_seconds = 60;
  ExpectAllOk(
      (*publisher)->Publish(Snapshot(*trained), Version(1), Targets({&a, &b, &c}), "", publish), 3);
  for (ServedReplica* r : {&a, &b, &c}) {
    EXPECT_EQ(r->Greedy(), trained_tokens);
    EXPECT_EQ(r->UpdatesBy("tcp"), 1);
    EXPECT_EQ(r->UpdatesBy("inline"), 0);
  }
  ExpectAllOk(
      (*publisher)->Publish(Snapshot(*initial), Version(2), Targets({&a, &b, &c}), "", publish), 3);
  for (ServedReplica* r : {&a, &b, &c}) {
    EXPECT_EQ(r->Greedy(), initial_tokens);
    EXPECT_EQ(r->UpdatesBy("tcp"), 2);
  }
  EXPECT_EQ((*publisher)->inline_fallbacks(), 0) << "every version must have gone over tcp";
  // An inline version is counted as such.
  ExpectAllOk(
      (*publisher)->Publish(Snapshot(*trained), Version(3), Targets({&a}), "inline", publish), 1);
  EXPECT_EQ(a.UpdatesBy("inline"), 1);
  fs::remove_all(dir);
}

// Partial rollouts (rlmesh.partial_rollout with rlmesh.rollout.inflight_update = recompute): a
// version published over shm while a replica decodes one long sample is applied between two
// of its decode steps. The sample runs on to its end, reports both versions and the token
// where the new one took over, and from that token on it is what the new weights choose over
// the whole sequence so far (an independent full forward per token); before it, what the old
// weights chose.
TEST(WeightSyncWiringTest, AVersionPublishedMidSampleTakesOverBetweenDecodeSteps) {
  const fs::path dir =
      fs::temp_directory_path() / ("rlmesh_wiring_mid_" + std::to_string(::getpid()));
  constexpr int64_t kPositions = 8192, kLong = kPositions - 8;
  auto initial = TinyModel(/*seed=*/1, kPositions);
  auto trained = TinyModel(/*seed=*/2, kPositions);
  ASSERT_TRUE(model::SavePretrained(*initial, dir.string(), "").ok());
  rollout::ReplicaOptions options = ServedReplica::Options(dir.string());
  options.max_model_len = kPositions;
  options.default_max_new_tokens = kLong;
  options.recompute_kv_on_update = true;
  ServedReplica replica(options);

  v1::GenerateRequest request;
  request.set_request_id("long");
  auto* prompt = request.add_prompts();
  prompt->set_prompt_id("p");
  for (int64_t t : kPrompt) prompt->add_token_ids(static_cast<int32_t>(t));
  auto* params = request.mutable_sampling_params();
  params->set_temperature(0);
  params->set_max_new_tokens(static_cast<int32_t>(kLong));
  params->set_n(1);
  params->set_ignore_eos(true);
  v1::Sample sample;
  absl::Notification done;
  ASSERT_TRUE(replica.replica()
                  .Submit(request,
                          [&](v1::GenerateResponse r) {
                            sample = r.sample();
                            done.Notify();
                          })
                  .ok());
  // Some tokens in, thousands to go (seconds of decoding): publish version 1 now.
  while (replica.replica().EngineStats().decode_steps_total < 16) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  trainer::WeightPublisherOptions publisher_options;
  publisher_options.transport = "shm";
  auto publisher = trainer::WeightPublisher::Create(publisher_options);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  trainer::PublishOptions publish;
  publish.timeout_seconds = 60;
  ExpectAllOk(
      (*publisher)->Publish(Snapshot(*trained), Version(1), Targets({&replica}), "", publish), 1);
  done.WaitForNotification();

  ASSERT_EQ(sample.token_ids_size(), kLong) << "the running sample was cut";
  EXPECT_EQ(sample.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(sample.weight_version(), 0u);
  EXPECT_EQ(sample.last_weight_version(), 1u);
  ASSERT_EQ(sample.version_switches_size(), 1);
  EXPECT_EQ(sample.version_switches(0).weight_version(), 1u);
  const int64_t at = sample.version_switches(0).token_index();
  std::printf("version 1 took over at token %lld of %lld\n", static_cast<long long>(at),
              static_cast<long long>(kLong));
  ASSERT_GE(at, 16);
  ASSERT_LT(at, kLong);
  std::vector<int64_t> ids = kPrompt;
  for (int64_t t = 0; t < at + 24 && t < kLong; ++t) {
    // The tokens around the switch: the last 8 of the old weights, then the new ones'.
    if (t >= at - 8) {
      auto& weights = t < at ? *initial : *trained;
      EXPECT_EQ(sample.token_ids(static_cast<int>(t)),
                generation::testing::FullLogits(weights, ids)[-1].argmax().item<int64_t>())
          << "token " << t << " (new weights from token " << at << ")";
    }
    ids.push_back(sample.token_ids(static_cast<int>(t)));
  }
  fs::remove_all(dir);
}

TEST(WeightSyncWiringTest, UnknownBackendIsAConfigError) {
  trainer::WeightPublisherOptions options;
  options.transport = "carrier-pigeon";
  auto publisher = trainer::WeightPublisher::Create(options);
  ASSERT_FALSE(publisher.ok());
  EXPECT_EQ(publisher.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      publisher.status().message(),
      ::testing::AllOf(::testing::HasSubstr("rlmesh.weight_sync.transport = carrier-pigeon"),
                       ::testing::HasSubstr("shm")));
}

}  // namespace
}  // namespace rlmesh
