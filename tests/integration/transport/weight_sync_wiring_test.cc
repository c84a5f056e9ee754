// The trainer's WeightPublisher and real rollout replicas behind real gRPC servers on loopback:
// a version published over the shm data plane (BEGIN names the endpoint, the replica pulls,
// COMMIT applies between decode steps) changes what the replicas generate to exactly what the
// published model generates (checked against an independent full-forward greedy reference);
// inline gRPC still works between data-plane versions; a replica added later is caught up
// with the current version without a new send. A trainer that offers its node's receivers a
// second backend (cuda_ipc beside nccl on GPUs; shm beside tcp stands in for it here) sends
// each replica the version by the one its node allows.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <filesystem>

#include "absl/synchronization/notification.h"
#include "common/generation/test_model.h"
#include "common/model/pretrained.h"
#include "common/transport/control_channel.h"
#include "common/transport/transport_factory.h"
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

// Two distinguishable tiny models in a folder of their own, the first saved there as the
// replicas' model, and their greedy continuations of kPrompt. The folder goes with it.
struct TwoModels {
  explicit TwoModels(const std::string& name)
      : dir(fs::temp_directory_path() /
            ("rlmesh_wiring_" + name + "_" + std::to_string(::getpid()))),
        initial(TinyModel(/*seed=*/1)),
        trained(TinyModel(/*seed=*/2)) {
    EXPECT_TRUE(model::SavePretrained(*initial, dir.string(), "").ok());
    initial_tokens = ReferenceGreedy(*initial, kPrompt, kNewTokens);
    trained_tokens = ReferenceGreedy(*trained, kPrompt, kNewTokens);
  }
  ~TwoModels() { fs::remove_all(dir); }
  fs::path dir;
  std::shared_ptr<model::CausalLmImpl> initial, trained;
  std::vector<int64_t> initial_tokens, trained_tokens;
};

// A publisher over `transport` with buckets of 4 KiB (many even for a tiny model), bound to
// `bind_host`, offering `same_node` to receivers on this node ("" = nothing).
std::unique_ptr<trainer::WeightPublisher> Publisher(const std::string& transport,
                                                    const std::string& bind_host = "127.0.0.1",
                                                    const std::string& same_node = "") {
  trainer::WeightPublisherOptions options;
  options.transport = transport;
  options.bind_host = bind_host;
  options.same_node_transport = same_node;
  options.bucket_bytes = 4096;
  auto publisher = trainer::WeightPublisher::Create(options);
  EXPECT_TRUE(publisher.ok()) << publisher.status();
  return publisher.ok() ? std::move(*publisher) : nullptr;
}

TEST(WeightSyncWiringTest, ShmVersionsChangeWhatReplicasGenerateAndInlineStillWorks) {
  const TwoModels models("shm");
  const auto& [dir, initial, trained, initial_tokens, trained_tokens] = models;
  ASSERT_NE(initial_tokens, trained_tokens) << "the two seeds must give distinguishable models";

  ServedReplica a(dir.string()), b(dir.string());
  EXPECT_EQ(a.Greedy(), initial_tokens);

  auto publisher = Publisher("shm");
  ASSERT_NE(publisher, nullptr);
  trainer::PublishOptions publish;
  publish.timeout_seconds = 60;

  // Version 1 over shm: both replicas subscribe on BEGIN, pull, and commit.
  ExpectAllOk(publisher->Publish(Snapshot(*trained), Version(1), Targets({&a, &b}), "", publish),
              2);
  EXPECT_EQ(a.replica().weight_version().version(), 1u);
  EXPECT_EQ(a.Greedy(), trained_tokens);
  EXPECT_EQ(b.Greedy(), trained_tokens);

  // Version 2 inline (the fallback path), back to the initial weights.
  ExpectAllOk(
      publisher->Publish(Snapshot(*initial), Version(2), Targets({&a, &b}), "inline", publish), 2);
  EXPECT_EQ(b.replica().weight_version().version(), 2u);
  EXPECT_EQ(b.Greedy(), initial_tokens);

  // Version 3 over shm again, through the subscriptions made for version 1.
  ExpectAllOk(publisher->Publish(Snapshot(*trained), Version(3), Targets({&a, &b}), "", publish),
              2);
  EXPECT_EQ(a.Greedy(), trained_tokens);
  EXPECT_EQ(b.Greedy(), trained_tokens);

  // A replica added now gets version 3 without a new send (the sender's catch-up).
  ServedReplica late(dir.string());
  EXPECT_EQ(late.Greedy(), initial_tokens);
  ExpectAllOk(publisher->Publish(Snapshot(*trained), Version(3), Targets({&late}), "", publish), 1);
  EXPECT_EQ(late.replica().weight_version().version(), 3u);
  EXPECT_EQ(late.Greedy(), trained_tokens);

  EXPECT_EQ(publisher->inline_fallbacks(), 0) << "every data-plane version must have gone over shm";

  // A transport other than the configured one is refused, naming the key.
  auto refused = publisher->Publish(Snapshot(*trained), Version(4), Targets({&a}), "nccl", publish);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("rlmesh.weight_sync.transport"));
}

// rlmesh.weight_sync.transport = tcp from a trainer bound to every interface: the BEGIN names
// "0.0.0.0:<port>", each replica dials the address the call came from, and the version goes
// down the chain of replicas; the replicas count it under transport="tcp".
TEST(WeightSyncWiringTest, TcpVersionsGoDownTheChainFromATrainerBoundToEveryInterface) {
  const TwoModels models("tcp");
  const auto& [dir, initial, trained, initial_tokens, trained_tokens] = models;

  ServedReplica a(dir.string()), b(dir.string()), c(dir.string());
  auto publisher = Publisher("tcp", "0.0.0.0");
  ASSERT_NE(publisher, nullptr);
  trainer::PublishOptions publish;
  publish.timeout_seconds = 60;
  ExpectAllOk(
      publisher->Publish(Snapshot(*trained), Version(1), Targets({&a, &b, &c}), "", publish), 3);
  for (ServedReplica* r : {&a, &b, &c}) {
    EXPECT_EQ(r->Greedy(), trained_tokens);
    EXPECT_EQ(r->UpdatesBy("tcp"), 1);
    EXPECT_EQ(r->UpdatesBy("inline"), 0);
  }
  ExpectAllOk(
      publisher->Publish(Snapshot(*initial), Version(2), Targets({&a, &b, &c}), "", publish), 3);
  for (ServedReplica* r : {&a, &b, &c}) {
    EXPECT_EQ(r->Greedy(), initial_tokens);
    EXPECT_EQ(r->UpdatesBy("tcp"), 2);
  }
  EXPECT_EQ(publisher->inline_fallbacks(), 0) << "every version must have gone over tcp";
  // An inline version is counted as such.
  ExpectAllOk(publisher->Publish(Snapshot(*trained), Version(3), Targets({&a}), "inline", publish),
              1);
  EXPECT_EQ(a.UpdatesBy("inline"), 1);
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

// A trainer offering a second backend to the receivers on its node: replicas there take it,
// a replica on another node (a node id of its own) takes the configured one, and every
// version reaches every replica with no inline fallback. Here tcp is the configured backend
// and shm the same-node one, standing in for nccl and cuda_ipc on GPUs (same code path: two
// senders, the offer in BEGIN, the replica's choice). The trainer is bound to every
// interface, so both endpoints in BEGIN are wildcards that each replica must resolve.
TEST(WeightSyncWiringTest, ReplicasOnTheTrainersNodeTakeTheSameNodeBackendTheOthersTheConfigured) {
  const TwoModels models("node");
  const auto& [dir, initial, trained, initial_tokens, trained_tokens] = models;

  rollout::ReplicaOptions elsewhere = ServedReplica::Options(dir.string());
  elsewhere.node_id = "another-node";
  ServedReplica here_a(dir.string()), away(elsewhere), here_b(dir.string());
  auto publisher = Publisher("tcp", "0.0.0.0", "shm");
  ASSERT_NE(publisher, nullptr);
  EXPECT_EQ(publisher->same_node_transport(), "shm");
  // Two senders that both stream cannot take a version unit by unit: the trainer holds it.
  EXPECT_FALSE(publisher->FeedsFrom(""));
  EXPECT_TRUE(publisher->FeedsFrom("inline"));
  trainer::PublishOptions publish;
  publish.timeout_seconds = 60;
  const auto targets = Targets({&here_a, &away, &here_b});
  ExpectAllOk(publisher->Publish(Snapshot(*trained), Version(1), targets, "", publish), 3);
  ExpectAllOk(publisher->Publish(Snapshot(*initial), Version(2), targets, "", publish), 3);
  for (ServedReplica* r : {&here_a, &here_b}) {
    EXPECT_EQ(r->Greedy(), initial_tokens);
    EXPECT_EQ(r->UpdatesBy("shm"), 2);
    EXPECT_EQ(r->UpdatesBy("tcp"), 0);
  }
  EXPECT_EQ(away.Greedy(), initial_tokens);
  EXPECT_EQ(away.UpdatesBy("tcp"), 2);
  EXPECT_EQ(away.UpdatesBy("shm"), 0);
  EXPECT_EQ(publisher->inline_fallbacks(), 0);

  // A replica added later on either side is caught up by its own sender, without a new send.
  ServedReplica late_here(dir.string()), late_away(elsewhere);
  ExpectAllOk(publisher->Publish(Snapshot(*initial), Version(2), Targets({&late_here, &late_away}),
                                 "", publish),
              2);
  ExpectAllOk(
      publisher->Publish(Snapshot(*trained), Version(3),
                         Targets({&here_a, &away, &here_b, &late_here, &late_away}), "", publish),
      5);
  for (ServedReplica* r : {&here_a, &away, &here_b, &late_here, &late_away}) {
    EXPECT_EQ(r->replica().weight_version().version(), 3u);
    EXPECT_EQ(r->Greedy(), trained_tokens);
  }
  EXPECT_EQ(late_here.UpdatesBy("shm"), 2);
  EXPECT_EQ(late_away.UpdatesBy("tcp"), 2);
  EXPECT_EQ(publisher->inline_fallbacks(), 0);

  // The same-node sender must move the memory the configured one does.
  trainer::WeightPublisherOptions mixed;
  mixed.transport = "tcp";
  mixed.same_node_transport = "cuda_ipc";
  auto refused = trainer::WeightPublisher::Create(mixed);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("device memory"));
}

// What the trainer offers replicas on its node by default: cuda_ipc beside nccl (in a build
// that has both), nothing beside the host backends.
TEST(WeightSyncWiringTest, TheTrainerOffersCudaIpcBesideNcclOnly) {
  EXPECT_EQ(trainer::SameNodeTransportFor("shm"), "");
  EXPECT_EQ(trainer::SameNodeTransportFor("tcp"), "");
  EXPECT_EQ(trainer::SameNodeTransportFor("grpc"), "");
  const auto built = transport::AvailableBackends();
  const bool cuda_ipc = std::find(built.begin(), built.end(), "cuda_ipc") != built.end();
  EXPECT_EQ(trainer::SameNodeTransportFor("nccl"), cuda_ipc ? "cuda_ipc" : "");
}

// A same-node offer that fails on a replica is not taken there again: one whose sender cannot
// be reached is passed over in the same BEGIN; one whose version fails on the replica fails
// that BEGIN (the trainer then sends the version inline), and the next BEGIN takes the
// configured backend. Driven by hand: real senders, BEGIN and COMMIT straight to the replica.
TEST(WeightSyncWiringTest, ASameNodeOfferThatFailsHereIsPassedOverFromThenOn) {
  const TwoModels models("offer");
  const auto& [dir, initial, trained, initial_tokens, trained_tokens] = models;
  ServedReplica served(dir.string());
  rollout::Replica& replica = served.replica();

  transport::SenderOptions sender_options;
  sender_options.bucket_bytes = 4096;
  sender_options.transfer_timeout = transport::Duration(30);
  auto tcp = transport::CreateSender("tcp", sender_options);
  auto shm = transport::CreateSender("shm", sender_options);
  ASSERT_TRUE(tcp.ok() && shm.ok());
  const trainer::NamedTensors weights = Snapshot(*trained);
  std::vector<transport::ConstTensorView> good;
  for (const auto& [name, tensor] : weights)
    good.push_back({{name, transport::DType::kFloat32, tensor.sizes().vec()}, tensor.data_ptr()});
  // A version no replica can take: one tensor named as no parameter is.
  std::vector<transport::ConstTensorView> bad = good;
  bad.front().meta.name = "model.no_such_parameter";

  auto begin = [&](uint64_t version, const std::string& same_node_endpoint) {
    v1::UpdateWeightsRequest request;
    request.set_phase(v1::WEIGHT_UPDATE_PHASE_BEGIN);
    *request.mutable_version() = Version(version);
    request.set_transport("tcp");
    request.set_endpoint((*tcp)->endpoint());
    request.set_timeout_seconds(30);
    auto& o = *request.mutable_transport_options();
    o["receiver_name"] = "replica";
    o[transport::kSameNodeTransportOption] = "shm";
    o[transport::kSameNodeEndpointOption] = same_node_endpoint;
    o[transport::kSenderNodeOption] = transport::NodeId();
    return replica.UpdateWeights(request);
  };
  auto commit = [&](uint64_t version) {
    v1::UpdateWeightsRequest request;
    request.set_phase(v1::WEIGHT_UPDATE_PHASE_COMMIT);
    *request.mutable_version() = Version(version);
    request.set_transport("tcp");
    return replica.UpdateWeights(request);
  };
  // Published before anyone subscribes: each subscriber is caught up with the current version.
  ASSERT_TRUE((*tcp)->Publish(1, good).ok());
  ASSERT_TRUE((*shm)->Publish(1, bad).ok());

  // 1. Nobody listens at the offered same-node endpoint: the same BEGIN takes tcp.
  auto closed = transport::Listener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(closed.ok());
  const std::string nobody = (*closed)->endpoint();
  closed->reset();
  auto first = begin(1, nobody);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(replica.staged_path(), "tcp");
  ASSERT_TRUE(commit(1).ok());

  // 2. The shm sender's version fails here: that BEGIN fails, naming why ...
  ASSERT_TRUE((*tcp)->Publish(2, good).ok());
  ASSERT_TRUE((*shm)->Publish(2, bad).ok());
  auto failed = begin(2, (*shm)->endpoint());
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), ::testing::HasSubstr("no_such_parameter"));
  // ... and the next BEGIN, offered the same, takes tcp.
  auto retried = begin(2, (*shm)->endpoint());
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(replica.staged_path(), "tcp");
  ASSERT_TRUE(commit(2).ok());
  EXPECT_EQ(replica.weight_version().version(), 2u);
  EXPECT_EQ(served.Greedy(), trained_tokens);
}

// A BEGIN whose caller went away (a trainer that died mid-publish) stops waiting for its
// version, so the next BEGIN (the restarted trainer's) is served at once instead of after the
// first one's timeout_seconds.
TEST(WeightSyncWiringTest, ABeginWhoseCallerWentAwayDoesNotHoldUpTheNext) {
  const TwoModels models("abandoned");
  const auto& [dir, initial, trained, initial_tokens, trained_tokens] = models;
  ServedReplica served(dir.string());
  transport::SenderOptions sender_options;
  sender_options.bucket_bytes = 4096;
  sender_options.transfer_timeout = transport::Duration(30);
  auto tcp = transport::CreateSender("tcp", sender_options);
  ASSERT_TRUE(tcp.ok());
  const trainer::NamedTensors weights = Snapshot(*trained);
  std::vector<transport::ConstTensorView> views;
  for (const auto& [name, tensor] : weights)
    views.push_back({{name, transport::DType::kFloat32, tensor.sizes().vec()}, tensor.data_ptr()});
  ASSERT_TRUE((*tcp)->Publish(1, views).ok());

  auto stub = v1::RolloutService::NewStub(
      grpc::CreateChannel(served.address(), grpc::InsecureChannelCredentials()));
  auto begin = [&](uint64_t version, int client_deadline_s, v1::UpdateWeightsResponse* response) {
    v1::UpdateWeightsRequest request;
    request.set_phase(v1::WEIGHT_UPDATE_PHASE_BEGIN);
    *request.mutable_version() = Version(version);
    request.set_transport("tcp");
    request.set_endpoint((*tcp)->endpoint());
    request.set_timeout_seconds(600);  // a run's nccl_timeout
    (*request.mutable_transport_options())["receiver_name"] = "replica";
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(client_deadline_s));
    return stub->UpdateWeights(&context, request, response);
  };
  // Version 7 never comes; its caller gives up after 1 s.
  v1::UpdateWeightsResponse response;
  EXPECT_EQ(begin(7, 1, &response).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The next BEGIN is answered well within its 60 s: before the fix it waited the first one's
  // 600 s out behind it.
  grpc::Status next = begin(1, 60, &response);
  ASSERT_TRUE(next.ok()) << next.error_message();
  EXPECT_EQ(response.staged_version().version(), 1u);
}

// Which offer a receiver takes (transport::ChooseOffer), and a wildcard same-node endpoint
// resolved to the caller's address like the configured one.
TEST(SameNodeOfferTest, TheSameNodeOfferIsTakenOnTheTrainersNodeAndWhereItsMemoryIs) {
  const transport::Offer nccl{"nccl", "10.0.0.1:5000"}, ipc{"cuda_ipc", "10.0.0.1:5001"},
      shm{"shm", "10.0.0.1:5002"};
  EXPECT_EQ(transport::ChooseOffer(nccl, ipc, "node-a", "node-a", /*on_gpu=*/true), ipc);
  EXPECT_EQ(transport::ChooseOffer(nccl, ipc, "node-a", "node-b", true), nccl);
  // cuda_ipc moves device memory: a receiver on the CPU of the trainer's node cannot take it.
  EXPECT_EQ(transport::ChooseOffer(nccl, ipc, "node-a", "node-a", false), nccl);
  EXPECT_EQ(transport::ChooseOffer(nccl, shm, "node-a", "node-a", false), shm);
  // Unknown nodes never match; nothing offered, nothing taken.
  EXPECT_EQ(transport::ChooseOffer(nccl, ipc, "", "", true), nccl);
  EXPECT_EQ(transport::ChooseOffer(nccl, {}, "node-a", "node-a", true), nccl);
  EXPECT_EQ(transport::ChooseOffer(nccl, {"cuda_ipc", ""}, "node-a", "node-a", true), nccl);

  v1::UpdateWeightsRequest request;
  request.set_transport("nccl");
  request.set_endpoint("0.0.0.0:5000");
  auto& o = *request.mutable_transport_options();
  o[transport::kSameNodeTransportOption] = "cuda_ipc";
  o[transport::kSameNodeEndpointOption] = "0.0.0.0:5001";
  o[transport::kSenderNodeOption] = "node-a";
  EXPECT_EQ(transport::OfferIn(request, "node-a", true),
            (transport::Offer{"cuda_ipc", "0.0.0.0:5001"}));
  EXPECT_EQ(transport::OfferIn(request, "node-b", true),
            (transport::Offer{"nccl", "0.0.0.0:5000"}));
  v1::UpdateWeightsRequest storage;
  const v1::UpdateWeightsRequest* reachable =
      transport::WithReachableEndpoint(&request, "ipv4:10.1.2.3:7000", &storage);
  EXPECT_EQ(reachable->endpoint(), "10.1.2.3:5000");
  EXPECT_EQ(reachable->transport_options().at(transport::kSameNodeEndpointOption), "10.1.2.3:5001");
  // Nothing to resolve: the request itself.
  request.set_endpoint("10.0.0.1:5000");
  o[transport::kSameNodeEndpointOption] = "10.0.0.1:5001";
  EXPECT_EQ(transport::WithReachableEndpoint(&request, "ipv4:10.1.2.3:7000", &storage), &request);
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
