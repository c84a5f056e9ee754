// The coordinator's asynchronous loop (rlmesh.max_staleness = k > 0) against recording fakes:
// every update trains on samples generated from weights exactly min(step - 1, k) versions
// older than the policy it updates (read from each sample's weight_version in the TrainStep
// requests), every prompt's n samples are trained once, the generation never runs while the
// weights change, and a checkpoint records the data position of the last trained step, not
// that of the steps generated ahead. Also, synchronous or not, that every replica of the KL
// reference is sent the warmed-up policy.
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/config/config.h"
#include "common/config/service_settings.h"
#include "gtest/gtest.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/fakes.h"
#include "tests/e2e/run_helpers.h"

namespace rlmesh::coordinator {
namespace {

namespace fs = std::filesystem;

class CoordinatorPipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string path = testing::TempDir() + "/rlmesh_pipeline_XXXXXX";
    ASSERT_NE(mkdtemp(path.data()), nullptr);
    dir_ = new std::string(path);
    model_ = new std::string(e2e::MakeTinyModel(*dir_));
    // Sixteen prompts of digits, as the tiny model's tokenizer reads them; in train_bad.jsonl
    // rows 8-11 (step 3 without shuffling) name a data_source no scorer has.
    for (const bool bad : {false, true}) {
      std::ofstream out(*dir_ + (bad ? "/train_bad.jsonl" : "/train.jsonl"));
      for (int i = 0; i < 16; ++i) {
        const bool unknown = bad && i >= 8 && i < 12;
        out << "{\"data_source\": \"" << (unknown ? "nowhere" : "test")
            << "\", \"prompt\": [{\"role\": \"user\", \"content\": \"" << 10 + i
            << "=\"}], \"reward_model\": {\"ground_truth\": \"" << i << "\"}}\n";
      }
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete model_;
  }

  struct Outcome {
    absl::Status run;
    FakeTrainer* trainer = nullptr;  // owned by the coordinator
    std::vector<v1::GenerateRequest> generate_requests;
    std::vector<nlohmann::json> metrics;  // metrics.jsonl, one record per line
    std::unique_ptr<Coordinator> coordinator;
  };

  // Runs `steps` steps of 4 prompts x 2 samples with rlmesh.max_staleness = k; `customize`
  // may replace or adjust the fakes before the coordinator is made.
  static Outcome RunCoordinator(
      int k, int steps, std::vector<std::string> more = {},
      const std::function<void(CoordinatorClients&, FakeTrainer&)>& customize = nullptr) {
    static int counter = 0;
    const std::string run = absl::StrCat(*dir_, "/run", ++counter);
    std::vector<std::string> overrides = {"data.train_files=[" + *dir_ + "/train.jsonl]",
                                          "data.train_batch_size=4",
                                          "data.max_prompt_length=8",
                                          "data.max_response_length=4",
                                          "data.shuffle=false",
                                          "actor_rollout_ref.model.path=" + *model_,
                                          "actor_rollout_ref.rollout.n=2",
                                          "trainer.total_training_steps=" + std::to_string(steps),
                                          "trainer.test_freq=-1",
                                          "trainer.save_freq=-1",
                                          "trainer.val_before_train=false",
                                          "trainer.default_local_dir=" + run + "/ckpt",
                                          "rlmesh.run_dir=" + run,
                                          "rlmesh.chat_template=raw",
                                          "rlmesh.rollout.addresses=[fake:1]",
                                          "rlmesh.max_staleness=" + std::to_string(k)};
    overrides.insert(overrides.end(), more.begin(), more.end());
    Outcome out;
    auto config = config::LoadConfigFromString("{}", overrides, "test");
    if (!config.ok()) {
      out.run = config.status();
      return out;
    }
    auto settings = config::DeriveSettings(*config);
    if (!settings.ok()) {
      out.run = settings.status();
      return out;
    }
    auto state = std::make_shared<FakeRollout::State>();
    auto* trainer = new FakeTrainer();
    // The replica takes each published version; the trainer's version may move on (an
    // update) only while no generation runs, which the fake checks on every sample.
    trainer->on_publish = [state](uint64_t version) {
      absl::MutexLock lock(&state->mu);
      state->version = state->sample_version = version;
    };
    CoordinatorClients clients;
    clients.trainer.reset(trainer);
    clients.reference.reset(new FakeReference());
    auto* reward = new FakeReward();
    reward->score_fn = [](const v1::RewardItem& item) {
      return item.id().back() == '0' ? 1.0 : 0.0;
    };
    reward->unknown_data_source = "nowhere";
    clients.reward.reset(reward);
    clients.rollout_factory = [state](const std::string&) {
      return std::make_unique<FakeRollout>(state);
    };
    if (customize) customize(clients, *trainer);
    auto coordinator = Coordinator::Create(settings->coordinator, std::move(clients), registry());
    if (!coordinator.ok()) {
      out.run = coordinator.status();
      return out;
    }
    out.run = (*coordinator)->Run();
    out.trainer = trainer;
    {
      absl::MutexLock lock(&state->mu);
      out.generate_requests = state->requests;
    }
    std::ifstream in(fs::path(run) / "metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      out.metrics.push_back(nlohmann::json::parse(line));
    out.coordinator = *std::move(coordinator);
    return out;
  }

  static prometheus::Registry& registry() {
    static auto* r = new prometheus::Registry();
    return *r;
  }

  static std::string* dir_;
  static std::string* model_;
};

std::string* CoordinatorPipelineTest::dir_ = nullptr;
std::string* CoordinatorPipelineTest::model_ = nullptr;

TEST_F(CoordinatorPipelineTest, EveryUpdateTrainsOnSamplesExactlyKVersionsOld) {
  for (int k : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("rlmesh.max_staleness=", k));
    constexpr int kSteps = 6;
    Outcome out = RunCoordinator(k, kSteps);
    ASSERT_TRUE(out.run.ok()) << out.run;
    ASSERT_EQ(out.trainer->train_requests.size(), static_cast<size_t>(kSteps));
    for (int i = 0; i < kSteps; ++i) {
      const v1::TrainStepRequest& request = out.trainer->train_requests[i];
      // The fake trainer is at version i when it takes its (i+1)-th update.
      const uint64_t policy = static_cast<uint64_t>(i);
      const uint64_t expected_lag = static_cast<uint64_t>(std::min(i, k));
      EXPECT_EQ(request.global_step(), i + 1);
      ASSERT_EQ(request.samples_size(), 8) << "step " << i + 1 << ": every sample trained";
      for (const auto& sample : request.samples()) {
        EXPECT_EQ(policy - sample.weight_version(), expected_lag)
            << "step " << i + 1 << ", sample " << sample.sequence().id();
      }
      const nlohmann::json& m = out.metrics.at(i);
      EXPECT_EQ(m["training/global_step"].get<double>(), i + 1);
      EXPECT_EQ(m["rlmesh/staleness/max"].get<double>(), expected_lag);
      EXPECT_EQ(m["rlmesh/staleness/min"].get<double>(), expected_lag);
      EXPECT_EQ(m["rlmesh/samples_dropped_stale"].get<double>(), 0);
      EXPECT_EQ(m["rollout/samples"].get<double>(), 8);
      EXPECT_GE(m["timing_s/wait_for_samples"].get<double>(), 0);
    }
    // Every generation asked for the version it ran on: W(step - 1 - k), 0 before the start.
    ASSERT_EQ(out.generate_requests.size(), static_cast<size_t>(kSteps));
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_EQ(out.generate_requests[i].min_weight_version(),
                static_cast<uint64_t>(std::max(0, i - k)))
          << "generation of step " << i + 1;
    }
    EXPECT_EQ(out.coordinator->Status().weight_version().version(), kSteps);
  }
}

TEST_F(CoordinatorPipelineTest, SynchronousStepsTrainOnTheCurrentVersion) {
  Outcome out = RunCoordinator(0, 3);
  ASSERT_TRUE(out.run.ok()) << out.run;
  ASSERT_EQ(out.trainer->train_requests.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    for (const auto& sample : out.trainer->train_requests[i].samples()) {
      EXPECT_EQ(sample.weight_version(), static_cast<uint64_t>(i));
    }
    // The synchronous step reports no staleness: its samples are current by construction.
    EXPECT_FALSE(out.metrics.at(i).contains("rlmesh/staleness/max"));
  }
}

TEST_F(CoordinatorPipelineTest, ACheckpointRecordsThePositionOfTheLastTrainedStep) {
  // Four steps of 4 of the 16 prompts, a checkpoint every 2: when step 2 is saved the
  // producer has already drawn step 3's prompts, which a resume must draw again.
  Outcome out = RunCoordinator(1, 4, {"trainer.save_freq=2"});
  ASSERT_TRUE(out.run.ok()) << out.run;
  ASSERT_EQ(out.trainer->save_requests.size(), 2u);
  const auto& at2 = out.trainer->save_requests[0];
  EXPECT_EQ(at2.global_step(), 2);
  EXPECT_EQ(at2.data_position().epoch(), 0);
  EXPECT_EQ(at2.data_position().index_in_epoch(), 8);
  EXPECT_EQ(at2.data_position().consumed_prompts(), 8);
  const auto& at4 = out.trainer->save_requests[1];
  EXPECT_EQ(at4.global_step(), 4);
  EXPECT_EQ(at4.data_position().consumed_prompts(), 16);
  // Prompts in order, each once: step s trains prompts 4(s-1) .. 4s-1 of the file.
  std::set<std::string> groups;
  for (const auto& request : out.trainer->train_requests) {
    for (const auto& sample : request.samples()) groups.insert(sample.group_id());
  }
  EXPECT_EQ(groups.size(), 16u);
}

// Two reference replicas behind rlmesh.reference.address, called round robin: the warm-up
// sends the warmed-up policy to each, so no step finds one on other weights; one that restarts
// (base weights again) is found by the step whose call lands on it, and the policy is sent
// again to every replica before the step asks once more.
TEST_F(CoordinatorPipelineTest, EveryReferenceReplicaHoldsTheWarmedUpPolicy) {
  const std::vector<std::string> addresses = {"127.0.0.1:7001", "127.0.0.2:7001"};
  for (int k : {0, 1}) {
    SCOPED_TRACE(absl::StrCat("rlmesh.max_staleness=", k));
    FakeReferenceFleet* fleet = nullptr;
    Outcome out = RunCoordinator(
        k, 4,
        {"rlmesh.warmup.sft_steps=2", "actor_rollout_ref.actor.use_kl_loss=true",
         "rlmesh.reference.address=ipv4:127.0.0.1:7001,127.0.0.2:7001"},
        [&](CoordinatorClients& clients, FakeTrainer& trainer) {
          fleet = new FakeReferenceFleet(addresses);
          fleet->restart_at_call = {3};  // the second replica, at step 4's call
          clients.reference.reset(fleet);
          trainer.on_target = [fleet](const v1::WeightTarget& target, uint64_t version) {
            if (target.kind() == v1::WEIGHT_TARGET_KIND_REFERENCE) {
              fleet->Take(target.address(), version);
            }
          };
        });
    ASSERT_TRUE(out.run.ok()) << out.run;
    // The warm-up's publish: the replica plus both references, each by its own address.
    ASSERT_GE(out.trainer->publish_requests.size(), 1u);
    std::vector<std::string> warmup_references, resent;
    for (const auto& target : out.trainer->publish_requests[0].targets()) {
      if (target.kind() != v1::WEIGHT_TARGET_KIND_REFERENCE) continue;
      warmup_references.push_back(target.address());
      EXPECT_EQ(target.replica_id(), "reference/" + target.address());
    }
    EXPECT_EQ(warmup_references, addresses);
    for (const auto& request : out.trainer->publish_requests) {
      if (request.checkpoint().empty()) continue;
      for (const auto& target : request.targets()) resent.push_back(target.address());
    }
    EXPECT_EQ(resent, addresses) << "the re-anchor reaches every replica, once";
    ASSERT_EQ(out.metrics.size(), 4u);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(out.metrics[i]["rlmesh/reference_reanchored"].get<double>(), i == 3 ? 1 : 0)
          << "step " << i + 1;
    }
    const auto served = fleet->served();
    EXPECT_EQ(served.at(addresses[0]), 3);  // calls 0, 2 and 4 (step 4's second)
    EXPECT_EQ(served.at(addresses[1]), 2);  // calls 1 and 3
  }
}

// A reference replica that cannot take the warmed-up policy stops the run before its first
// step, with a message that names its address.
TEST_F(CoordinatorPipelineTest, AReferenceReplicaThatCannotTakeTheWeightsIsNamed) {
  Outcome out =
      RunCoordinator(0, 2,
                     {"rlmesh.warmup.sft_steps=2", "actor_rollout_ref.actor.use_kl_loss=true",
                      "rlmesh.reference.address=ipv4:127.0.0.1:7001,127.0.0.2:7001"},
                     [](CoordinatorClients&, FakeTrainer& trainer) {
                       trainer.failing_addresses = {"127.0.0.2:7001"};
                     });
  ASSERT_FALSE(out.run.ok());
  EXPECT_NE(out.run.message().find("sending the warmed-up policy to the reference at "
                                   "127.0.0.2:7001: connection refused"),
            std::string::npos)
      << out.run;
  EXPECT_EQ(out.run.message().find("127.0.0.1:7001"), std::string::npos) << out.run;
  ASSERT_NE(out.trainer, nullptr);
  EXPECT_TRUE(out.trainer->train_requests.empty());
}

TEST_F(CoordinatorPipelineTest, AGenerationThatFailsStopsTheRunAtItsStep) {
  // Step 3's prompts have a data_source no scorer knows: its generation fails while step 2
  // trains. The run trains steps 1 and 2, then fails naming step 3, and Run() returns (the
  // generating thread ended).
  testing::internal::CaptureStderr();
  Outcome out = RunCoordinator(1, 4, {"data.train_files=[" + *dir_ + "/train_bad.jsonl]"});
  const std::string said = testing::internal::GetCapturedStderr();
  ASSERT_FALSE(out.run.ok());
  // It says where the run can go on from (the stand-in trainer writes no checkpoint).
  EXPECT_NE(said.find("coordinator: the run stopped after step 2; "), std::string::npos) << said;
  EXPECT_NE(out.run.message().find("step 3: "), std::string::npos) << out.run;
  EXPECT_NE(out.run.message().find("nowhere"), std::string::npos) << out.run;
  ASSERT_NE(out.trainer, nullptr);
  EXPECT_EQ(out.trainer->train_requests.size(), 2u);
  EXPECT_EQ(out.coordinator->Status().state(), v1::RUN_STATE_FAILED);
}

}  // namespace
}  // namespace rlmesh::coordinator
