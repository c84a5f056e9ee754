#include "common/config/dry_run.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::config {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class DryRunTest : public testing::Test {
 protected:
  void SetUp() override {
    const char* source = std::getenv("RLMESH_SOURCE_DIR");
    quickstart_ = std::string(source != nullptr ? source : ".") + "/deploy/configs/quickstart.yaml";
    SetHostMemoryKiB(8 * 1024 * 1024);  // 8 GiB: the quickstart fits easily, even over 4 ranks
  }

  void SetHostMemoryKiB(int64_t kib) {
    // One file per test: ctest runs the tests of this binary in parallel processes.
    options_.meminfo_path = testing::TempDir() + "/dry_run_meminfo_" +
                            testing::UnitTest::GetInstance()->current_test_info()->name();
    std::ofstream out(options_.meminfo_path);
    out << "MemTotal:       " << kib << " kB\n";
  }

  DryRunResult Run(std::vector<std::string> overrides) {
    // The model folder does not exist in the test: the sizes come from rlmesh.model.*.
    overrides.push_back("actor_rollout_ref.model.path=" + testing::TempDir() + "/no_model_here");
    absl::StatusOr<Config> config = LoadConfig(quickstart_, overrides);
    EXPECT_TRUE(config.ok()) << config.status();
    if (!config.ok()) return {};
    return RunDryRun(*config, options_);
  }

  std::string quickstart_;
  DryRunOptions options_;
};

TEST_F(DryRunTest, QuickstartIsValidAndEstimatesMemory) {
  const DryRunResult r = Run({});
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_EQ(r.warnings, 0) << r.report;
  EXPECT_THAT(r.report, HasSubstr("resolved config:\n"));
  EXPECT_THAT(r.report, HasSubstr("experiment_name: \"quickstart\""));
  // 406656 parameters (counted by hand in memory_estimate_test.cc).
  EXPECT_THAT(r.report, HasSubstr("0.407 M parameters"));
  EXPECT_THAT(r.report, HasSubstr("rlmesh.model.*"));
  EXPECT_THAT(r.report, HasSubstr("= TP 1 x PP 1 x DP 1"));
  EXPECT_THAT(r.report, HasSubstr("32 prompts x n 8 = 256 samples per step; 4 mini-batch(es) "
                                  "of 64 samples"));
  EXPECT_THAT(r.report, HasSubstr("memory per device"));
  EXPECT_THAT(r.report, HasSubstr("rollout KV cache"));
  EXPECT_THAT(r.report, HasSubstr("trainer process, resident set at peak"));
  EXPECT_THAT(r.report, HasSubstr("capacity: 8.00 GiB per device"));
  EXPECT_THAT(r.report, HasSubstr("result: valid"));
}

TEST_F(DryRunTest, BriefOmitsTheConfig) {
  options_.print_config = false;
  EXPECT_THAT(Run({}).report, Not(HasSubstr("resolved config:")));
}

TEST_F(DryRunTest, TensorParallelMustAgreeBetweenActorAndRollout) {
  const DryRunResult r = Run({"actor_rollout_ref.rollout.tensor_model_parallel_size=2"});
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("error: actor_rollout_ref.actor.megatron.tensor_model_parallel_"
                                  "size = 1 but actor_rollout_ref.rollout.tensor_model_parallel_"
                                  "size = 2"));
}

TEST_F(DryRunTest, ParallelSizesMustAgreeBetweenActorAndReference) {
  const DryRunResult r = Run({"actor_rollout_ref.ref.megatron.pipeline_model_parallel_size=2"});
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size "
                                  "= 1 but actor_rollout_ref.ref.megatron.pipeline_model_"
                                  "parallel_size = 2"));
}

TEST_F(DryRunTest, ExpertParallelNeedsExperts) {
  DryRunResult r = Run({"actor_rollout_ref.actor.megatron.expert_model_parallel_size=4",
                        "actor_rollout_ref.ref.megatron.expert_model_parallel_size=4",
                        "trainer.n_gpus_per_node=4"});
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("expert_model_parallel_size = 4 needs a mixture-of-experts "
                                  "model"));
  EXPECT_THAT(r.report, HasSubstr("a dense model has no experts"));
  // The same layout with an 8-expert model is fine: EP 4 divides 8 experts and DP 4.
  r = Run({"actor_rollout_ref.actor.megatron.expert_model_parallel_size=4",
           "actor_rollout_ref.ref.megatron.expert_model_parallel_size=4",
           "trainer.n_gpus_per_node=4", "rlmesh.model.num_experts=8",
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"});
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_THAT(r.report, HasSubstr("8 experts"));
  // 6 experts do not split over EP 4.
  r = Run({"actor_rollout_ref.actor.megatron.expert_model_parallel_size=4",
           "actor_rollout_ref.ref.megatron.expert_model_parallel_size=4",
           "trainer.n_gpus_per_node=4", "rlmesh.model.num_experts=6",
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"});
  EXPECT_THAT(r.report, HasSubstr("does not divide the model's 6 experts"));
}

TEST_F(DryRunTest, DevicesMustBeTpTimesPpTimesDp) {
  const DryRunResult r =
      Run({"actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
           "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=2",
           "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=3"});
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("devices = trainer.n_gpus_per_node x trainer.nnodes = 3 x 1 = 3 "
                                  "is not divisible by tensor x pipeline parallel = 2 x 1 = 2"));
}

TEST_F(DryRunTest, BatchSizes) {
  DryRunResult r = Run({"actor_rollout_ref.actor.ppo_mini_batch_size=64"});
  EXPECT_THAT(r.report, HasSubstr("data.train_batch_size = 32 is smaller than "
                                  "actor_rollout_ref.actor.ppo_mini_batch_size = 64"));
  // 32 x 8 = 256 samples do not split into mini-batches of 12 x 8 = 96.
  r = Run({"actor_rollout_ref.actor.ppo_mini_batch_size=12"});
  EXPECT_THAT(r.report, HasSubstr("32 x 8 = 256 samples is not divisible by the mini-batch of "
                                  "actor_rollout_ref.actor.ppo_mini_batch_size x n = 12 x 8 = 96"));
  // 8 x 8 = 64 samples per device do not split into micro-batches of 48.
  r = Run({"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=48"});
  EXPECT_THAT(r.report, HasSubstr("= 64 samples, is not divisible by "
                                  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = 48"));
  // With 2 data-parallel ranks each device gets 32 samples: micro-batch 32 fits, 64 not.
  r = Run({"trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32"});
  EXPECT_TRUE(r.valid()) << r.report;
  r = Run({"trainer.n_gpus_per_node=2"});
  EXPECT_THAT(r.report, HasSubstr("8 x 8 / 2 = 32 samples, is not divisible by"));
  // One mini-batch, one epoch: valid, with a warning.
  r = Run({"actor_rollout_ref.actor.ppo_mini_batch_size=32",
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64"});
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_THAT(r.report, HasSubstr("warning: one mini-batch per step and ppo_epochs = 1"));
}

TEST_F(DryRunTest, MemoryAgainstCapacity) {
  // The quickstart needs 722571264 bytes per device: the 139164672 of the tiny config in
  // memory_estimate_test.cc, plus for the quickstart's settings what the trainer's
  // old-log-prob forward of 256 sequences, 256 * (301056 + 3456) = 77955072, needs beyond the
  // update's activations and logits (38866944): 39088128; the weight-sync snapshot and
  // shared-memory segment 2 * 1626624 = 3253248, and three process runtimes 3 * 172 MiB =
  // 541065216 (the warm-up's AdamW is freed before GRPO's is allocated: not counted).
  // 784000 KiB = 802816000 bytes: 90.0 % (warning); 700000 KiB is too little (error).
  SetHostMemoryKiB(784000);
  DryRunResult r = Run({});
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_THAT(r.report, HasSubstr("is 90.0% of the"));
  EXPECT_THAT(r.report, HasSubstr("above 85%"));
  SetHostMemoryKiB(700000);
  r = Run({});
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("it does not fit"));
  // An explicit capacity wins over the detected one.
  r = Run({"rlmesh.device_memory_gb=1"});
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_THAT(r.report, HasSubstr("(rlmesh.device_memory_gb)"));
}

TEST_F(DryRunTest, SizesFromConfigJson) {
  // Qwen2, hidden 64, MLP 128, 1 layer, 4 heads of 16 (2 kv heads), vocab 100, tied.
  // Parameters: embeddings 6400; layer: norms 128, q 4096 + 64 bias, k and v 2048 + 32 bias
  // each, o 4096, MLP 3*64*128 = 24576 -> 37120; final norm 64. Total 43584.
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "qwen_tiny";
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "config.json");
    out << R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 20,
      "tie_word_embeddings": true})";
  }
  absl::StatusOr<Config> config =
      LoadConfig(quickstart_, {"actor_rollout_ref.model.path=" + dir.string()});
  ASSERT_TRUE(config.ok()) << config.status();
  const DryRunResult r = RunDryRun(*config, options_);
  EXPECT_THAT(r.report, HasSubstr("Qwen2ForCausalLM from " + (dir / "config.json").string()));
  EXPECT_THAT(r.report, HasSubstr("0.044 M parameters"));
  // 16 + 8 = 24 tokens exceed its 20 positions.
  EXPECT_THAT(r.report, HasSubstr("data.max_prompt_length + data.max_response_length = 24 "
                                  "exceeds the model's max_position_embeddings = 20"));
}

TEST_F(DryRunTest, MissingModelSizesNameTheKey) {
  const DryRunResult r = Run({"rlmesh.model.hidden_size=0"});
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("config key rlmesh.model.hidden_size: expected the model size"));
}

TEST_F(DryRunTest, ServicesAndData) {
  DryRunResult r = Run({"rlmesh.weight_sync.transport=nccl"});
  EXPECT_THAT(r.report,
              HasSubstr("rlmesh.weight_sync.transport = nccl needs rlmesh.device = cuda"));
  r = Run({"rlmesh.reward.metrics_port=50051"});
  EXPECT_THAT(r.report, HasSubstr("rlmesh.rollout.port and rlmesh.reward.metrics_port are both "
                                  "50051"));
  r = Run({"rlmesh.host=0.0.0.0"});
  EXPECT_THAT(r.report, HasSubstr("rlmesh.host = 0.0.0.0 is not a loopback address"));
  EXPECT_TRUE(Run({"rlmesh.host=0.0.0.0", "rlmesh.tls.insecure_plaintext=true"}).valid());
  r = Run({"rlmesh.tls.enabled=true"});
  EXPECT_THAT(r.report, HasSubstr("rlmesh.tls.enabled = true needs rlmesh.tls.cert_file"));
  r = Run({"rlmesh.quickstart.task=none"});
  EXPECT_THAT(r.report, HasSubstr("no training data"));
  r = Run({"rlmesh.quickstart.max_digits=8"});
  EXPECT_THAT(r.report, HasSubstr("data.max_response_length = 8 cannot hold an answer"));
  r = Run({"trainer.resume_mode=resume_path"});
  EXPECT_THAT(r.report, HasSubstr("trainer.resume_mode = resume_path needs "
                                  "trainer.resume_from_path"));
}

TEST_F(DryRunTest, AlgorithmWarnings) {
  DryRunResult r = Run(
      {"actor_rollout_ref.rollout.n=1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"});
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_THAT(r.report, HasSubstr("warning: actor_rollout_ref.rollout.n = 1"));
  r = Run({"actor_rollout_ref.rollout.do_sample=false"});
  EXPECT_THAT(r.report, HasSubstr("identical"));
}

}  // namespace
}  // namespace rlmesh::config
