#include "common/config/dry_run.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/service_settings.h"
#include "common/model/model_config.h"
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
    // The model folder does not exist in the test: the sizes come from rlmesh.model.*, with
    // the 18-token vocabulary the hand-counted figures of memory_estimate_test.cc assume.
    overrides.insert(overrides.begin(), "rlmesh.model.vocab_size=18");
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
  // The one warning: the folder is missing, so the sizes come from rlmesh.model.*.
  EXPECT_EQ(r.warnings, 1) << r.report;
  EXPECT_THAT(r.report, HasSubstr("no_model_here does not exist; `rlmesh run` needs it"));
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
  EXPECT_THAT(r.report, HasSubstr("trainer tensors at peak"));
  EXPECT_THAT(r.report, HasSubstr("trainer process, resident set at peak"));
  EXPECT_THAT(r.report, HasSubstr("capacity: 8.00 GiB per device"));
  EXPECT_THAT(r.report, HasSubstr("result: valid"));
  // Valid as a plan, but the missing folder would stop `rlmesh run`: the result line says so.
  EXPECT_EQ(r.run_blockers, 1);
  EXPECT_THAT(r.report, HasSubstr("a plan only: `rlmesh run` would refuse it on 1 of the "
                                  "warnings (the folder or files they name)"));
}

// `rlmesh run` (local_run) refuses what its warnings say it needs, and the keys it sets itself
// for every service it starts, which would otherwise be overridden without a word.
TEST_F(DryRunTest, RlmeshRunRefusesMissingDataAndTheKeysItSetsItself) {
  const std::string missing = testing::TempDir() + "/no_such_train.jsonl";
  const std::vector<std::string> data = {"rlmesh.quickstart.task=none",
                                         "data.train_files=[" + missing + "]"};
  DryRunResult r = Run(data);
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_EQ(r.run_blockers, 2) << r.report;  // the model folder and the data file
  EXPECT_THAT(r.report, HasSubstr("warning: data.train_files: \"" + missing +
                                  "\" does not exist (yet): the coordinator reads it at start; "
                                  "`rlmesh run` needs it"));
  options_.local_run = true;
  r = Run(data);
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("error: data.train_files: \"" + missing));
  EXPECT_THAT(r.report, HasSubstr("error: actor_rollout_ref.model.path: "));

  r = Run({"rlmesh.reward.port=50777", "rlmesh.rollout.addresses=[127.0.0.1:1]",
           "rlmesh.trainer.metrics_port=0"});
  EXPECT_THAT(r.report, HasSubstr("error: rlmesh.reward.port = 50777: `rlmesh run` sets it for "
                                  "every service it starts"));
  EXPECT_THAT(r.report, HasSubstr("error: rlmesh.rollout.addresses = [127.0.0.1:1]: "));
  EXPECT_THAT(r.report, HasSubstr("error: rlmesh.trainer.metrics_port = 0: "));
  // At their defaults none is refused.
  r = Run({});
  EXPECT_THAT(r.report, Not(HasSubstr("`rlmesh run` sets it"))) << r.report;
  options_.local_run = false;
  r = Run({"rlmesh.reward.port=50777", "rlmesh.rollout.addresses=[127.0.0.1:1]"});
  EXPECT_TRUE(r.valid()) << r.report;  // for services started one by one, they are the point
}

TEST(LoadConfigForStartTest, AServiceWithoutAConfigSaysSo) {
  const auto config = LoadConfigForStart("rollout", "", {}, /*whole_run=*/true);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("--config FILE is required"));
}

// A key read only in some mode is refused outside it, at any value but its default (or the
// verl value that asks for nothing), as the loss-mode options are.
TEST_F(DryRunTest, KeysReadOnlyInAModeAreRefusedOutsideIt) {
  struct Case {
    std::vector<std::string> overrides;
    std::string error;  // empty: valid
  };
  const std::string kl_off = "actor_rollout_ref.actor.use_kl_loss=false";
  const std::vector<Case> cases = {
      {{kl_off, "actor_rollout_ref.actor.kl_loss_coef=0.01"},
       "error: actor_rollout_ref.actor.kl_loss_coef = 0.01: only the KL loss reads it: set "
       "actor_rollout_ref.actor.use_kl_loss=true"},
      {{kl_off, "actor_rollout_ref.actor.kl_loss_coef=0.0"}, ""},  // DAPO's recipes write it
      {{kl_off, "actor_rollout_ref.actor.kl_loss_type=k1"},
       "error: actor_rollout_ref.actor.kl_loss_type = k1: only the KL loss reads it"},
      {{"algorithm.kl_ctrl.kl_coef=0.05"},
       "error: algorithm.kl_ctrl.kl_coef = 0.05: only the in-reward KL penalty reads it"},
      {{"algorithm.kl_ctrl.kl_coef=0.0"}, ""},
      {{"algorithm.kl_penalty=k3"}, "error: algorithm.kl_penalty = k3: only the in-reward"},
      {{"algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.target_kl=0.5"},
       "error: algorithm.kl_ctrl.target_kl = 0.5: only the adaptive controller reads it"},
      {{"algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
        "algorithm.kl_ctrl.target_kl=0.5", "algorithm.kl_ctrl.horizon=500"},
       ""},
      {{"actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096"},
       "error: actor_rollout_ref.actor.ppo_max_token_len_per_gpu = 4096: only dynamic batch "
       "sizes read it"},
      // A log-prob pass with a dynamic batch and no budget of its own reads the actor's.
      {{"actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true"},
       ""},
      {{"actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=2048"},
       "error: actor_rollout_ref.actor.ppo_max_token_len_per_gpu = 4096"},
      {{"actor_rollout_ref.actor.optim.min_lr_ratio=0.1"},
       "error: actor_rollout_ref.actor.optim.min_lr_ratio = 0.1: only the cosine schedule"},
      {{"actor_rollout_ref.actor.optim.warmup_style=cosine",
        "actor_rollout_ref.actor.optim.min_lr_ratio=0.1"},
       ""},
      {{"rlmesh.warmup.sft_steps=0", "rlmesh.warmup.lr=0.01"},
       "error: rlmesh.warmup.lr = 0.01: only the supervised warm-up reads it"},
      {{"algorithm.rollout_correction.rollout_is_threshold=5"},
       "error: algorithm.rollout_correction.rollout_is_threshold = 5.0: only the importance "
       "weights read it"},
      {{"algorithm.rollout_correction.rollout_is=token",
        "algorithm.rollout_correction.rollout_is_threshold=5"},
       ""},
      {{"actor_rollout_ref.rollout.val_kwargs.top_p=0.7"},
       "error: actor_rollout_ref.rollout.val_kwargs.top_p = 0.7: greedy validation"},
      {{"actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        "actor_rollout_ref.rollout.val_kwargs.top_p=0.7"},
       ""},
      {{"actor_rollout_ref.rollout.do_sample=false", "actor_rollout_ref.rollout.top_k=5"},
       "error: actor_rollout_ref.rollout.top_k = 5: greedy decoding"},
      {{"trainer.resume_from_path=/ckpt/global_step_3"},
       "error: trainer.resume_from_path = /ckpt/global_step_3: only "
       "trainer.resume_mode=resume_path reads it"},
      {{"rlmesh.quickstart.task=none", "data.train_files=[" + quickstart_ + "]",
        "rlmesh.quickstart.num_train=10"},
       "error: rlmesh.quickstart.num_train = 10: only the synthetic task reads it"},
      {{"rlmesh.reward.custom_data_sources=[my/task]"},
       "error: rlmesh.reward.custom_data_sources = [my/task]: it names the data sources sent to "
       "rlmesh.reward.custom_address, which is empty"},
      {{"rlmesh.reward.format_score=0.1"}, ""},
      // 406656 parameters in float32 = 1626624 bytes, over a 1 MiB message.
      {{"rlmesh.weight_sync.transport=grpc", "rlmesh.rpc.max_message_bytes=1048576"},
       "error: rlmesh.rpc.max_message_bytes = 1048576 cannot carry one inline weight update "
       "(the whole model in float32, 1626624 bytes, plus 65536 for the tensors' names and "
       "shapes)"},
      {{"rlmesh.weight_sync.transport=grpc", "rlmesh.rpc.max_message_bytes=1048576",
        "rlmesh.weight_sync.bucket_bytes=524288"},
       ""},
      {{"rlmesh.reward.format_score=0.1", "rlmesh.reward.custom_address=localhost:9"},
       "error: rlmesh.reward.format_score = 0.1: rlmesh.reward.custom_address scores every item"},
      {{"rlmesh.reward.format_score=0.1", "rlmesh.reward.custom_address=localhost:9",
        "rlmesh.reward.custom_data_sources=[my/task]"},
       ""},
  };
  for (const Case& c : cases) {
    const DryRunResult r = Run(c.overrides);
    const std::string what = absl::StrJoin(c.overrides, " ");
    const std::string errors = absl::StrJoin(r.error_lines, "\n");
    if (c.error.empty()) {
      EXPECT_TRUE(r.valid()) << what << "\n" << errors;
    } else {
      EXPECT_THAT(errors, HasSubstr(c.error)) << what;
    }
  }
}

TEST_F(DryRunTest, ARewardFileOrModelMissingHereIsAWarningAndConflictsAreRefused) {
  const std::string here = testing::TempDir() + "/dry_run_reward.py";
  std::ofstream(here) << "def compute_score(data_source, solution_str, ground_truth):\n"
                         "    return 1.0\n";
  DryRunResult r = Run({"custom_reward_function.path=" + here});
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_EQ(r.warnings, 1) << r.report;  // the model folder's only
  r = Run({"custom_reward_function.path=/nowhere/reward.py"});
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_THAT(r.report, HasSubstr("warning: custom_reward_function.path = /nowhere/reward.py: no "
                                  "such file here"));
  r = Run({"custom_reward_function.path=" + here, "rlmesh.reward.custom_address=localhost:9"});
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("rlmesh.reward.custom_address also replaces the built-in "
                                  "scorers"));
  r = Run({"rlmesh.reward.python_workers=2"});
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("only a reward file reads it: set custom_reward_function.path"));
  // The reward model's folder, likewise.
  r = Run({"reward_model.enable=true", "reward_model.model.path=/nowhere/rm"});
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_THAT(r.report, HasSubstr("warning: reward_model.model.path = /nowhere/rm: no "
                                  "config.json here"));
  r = Run({"reward_model.enable=true"});
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("needs reward_model.model.path"));
}

TEST_F(DryRunTest, BriefOmitsTheConfig) {
  options_.print_config = false;
  EXPECT_THAT(Run({}).report, Not(HasSubstr("resolved config:")));
}

// Parallel layouts the build lacks are refused by name, but the report still plans them (the
// layout and the memory estimate are printed) so a user can size a cluster.
TEST_F(DryRunTest, UnbuiltParallelismIsRefusedNamingTheKey) {
  DryRunResult r = Run({"actor_rollout_ref.rollout.tensor_model_parallel_size=2"});
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("error: actor_rollout_ref.rollout.tensor_model_parallel_size = "
                                  "2: tensor parallelism is not built yet; use 1"));
  r = Run({"actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4",
           "trainer.n_gpus_per_node=4"});
  EXPECT_THAT(r.report, HasSubstr("error: actor_rollout_ref.actor.megatron.tensor_model_parallel_"
                                  "size = 4: tensor parallelism is not built yet; use 1"));
  EXPECT_THAT(r.report, HasSubstr("= TP 4 x PP 1 x DP 1"));
  EXPECT_THAT(r.report, HasSubstr("memory per device"));
}

// A data-parallel trainer group runs on cpu and on cuda (common/dist/placement.h says how),
// and a rank outside the group is an error.
TEST_F(DryRunTest, TrainerGroupsOnCpuAndCudaWithRanksInsideThem) {
  for (const char* device : {"rlmesh.device=cpu", "rlmesh.device=cuda"}) {
    DryRunResult group = Run({"trainer.n_gpus_per_node=2", device,
                              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32"});
    EXPECT_TRUE(group.valid()) << device << "\n" << group.report;
  }
  DryRunResult r = Run({"trainer.n_gpus_per_node=2", "rlmesh.trainer.rank=2"});
  EXPECT_THAT(r.report, HasSubstr("error: rlmesh.trainer.rank = 2 is not a rank of the trainer "
                                  "group of trainer.n_gpus_per_node x trainer.nnodes = 2 ranks "
                                  "(0 to 1)"));
  // A reference group likewise: on cpu, with ranks inside it.
  EXPECT_TRUE(Run({"rlmesh.reference.world_size=3"}).valid());
  r = Run({"rlmesh.reference.world_size=2", "rlmesh.reference.rank=2"});
  EXPECT_THAT(r.report, HasSubstr("error: rlmesh.reference.rank = 2 is not a rank of the "
                                  "reference group of rlmesh.reference.world_size = 2 ranks "
                                  "(0 to 1)"));
  r = Run({"rlmesh.reference.world_size=2", "rlmesh.device=cuda"});
  EXPECT_TRUE(r.valid()) << r.report;
  // Ranks on several nodes (the Helm chart's pods), on cpu and on cuda.
  for (const char* device : {"rlmesh.device=cpu", "rlmesh.device=cuda"}) {
    r = Run(
        {"trainer.nnodes=2", device, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32"});
    EXPECT_TRUE(r.valid()) << device << "\n" << r.report;
  }
  // Full sharding over all ranks, none, or hybrid shard groups that tile the ranks; groups
  // that do not are refused by name.
  for (const char* size : {"-1", "1", "2", "4"}) {
    EXPECT_TRUE(
        Run({"trainer.n_gpus_per_node=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
             absl::StrCat("actor_rollout_ref.actor.fsdp_config.fsdp_size=", size)})
            .valid())
        << size;
  }
  for (const char* size : {"3", "8"}) {
    r = Run({"trainer.n_gpus_per_node=4",
             absl::StrCat("actor_rollout_ref.actor.fsdp_config.fsdp_size=", size)});
    EXPECT_THAT(r.report,
                HasSubstr(absl::StrCat(
                    "error: actor_rollout_ref.actor.fsdp_config.fsdp_size = ", size,
                    ": shard groups of ", size, " ranks do not tile the 4 trainer ranks")));
  }
}

// Partial rollouts need a generation that runs beside the update (max_staleness >= 1), and a
// recomputed KV cache needs partial rollouts: anything else would be a key that does nothing.
TEST_F(DryRunTest, PartialRolloutsNeedTheAsynchronousLoop) {
  EXPECT_TRUE(Run({"rlmesh.max_staleness=1", "rlmesh.partial_rollout=true",
                   "rlmesh.rollout.inflight_update=recompute"})
                  .valid());
  DryRunResult r = Run({"rlmesh.partial_rollout=true"});
  EXPECT_THAT(r.report, HasSubstr("error: rlmesh.partial_rollout = true: the synchronous loop "
                                  "(rlmesh.max_staleness = 0) publishes between steps"));
  r = Run({"rlmesh.max_staleness=1", "rlmesh.rollout.inflight_update=recompute"});
  EXPECT_THAT(r.report, HasSubstr("error: rlmesh.rollout.inflight_update = recompute: weights "
                                  "change during a generation only with rlmesh.partial_rollout = "
                                  "true"));
}

// A loss mode's option is refused with a mode that ignores it, except at our default or
// verl's (the quickstart writes clip_ratio_low/high: 0.2, verl's actor.yaml values).
TEST_F(DryRunTest, LossModeOptionsOnlyWithTheModesThatReadThem) {
  const std::string sapo = "actor_rollout_ref.actor.policy_loss.loss_mode=sapo";
  EXPECT_TRUE(Run({sapo, "actor_rollout_ref.actor.tau_pos=2"}).valid());
  DryRunResult r = Run({sapo, "actor_rollout_ref.actor.clip_ratio_high=0.28"});
  EXPECT_THAT(r.report, HasSubstr("error: actor_rollout_ref.actor.clip_ratio_high = 0.28: only "
                                  "loss_mode vanilla, gspo, clip_cov, geo_mean, cispo reads it; "
                                  "actor_rollout_ref.actor.policy_loss.loss_mode=sapo does not"));
  r = Run({"actor_rollout_ref.actor.tau_pos=2"});
  EXPECT_THAT(r.report, HasSubstr("error: actor_rollout_ref.actor.tau_pos = 2"));
  r = Run({"actor_rollout_ref.actor.policy_loss.loss_mode=gpg",
           "actor_rollout_ref.actor.clip_ratio_c=10"});
  EXPECT_THAT(r.report, HasSubstr("error: actor_rollout_ref.actor.clip_ratio_c = 10"));
  EXPECT_TRUE(Run({"actor_rollout_ref.actor.policy_loss.loss_mode=gpg",
                   "actor_rollout_ref.actor.clip_ratio_low=null"})
                  .valid());
}

TEST(RankFromPodNameTest, TheStatefulSetOrdinalIsTheRank) {
  EXPECT_EQ(*RankFromPodName("rlmesh-trainer-0"), 0);
  EXPECT_EQ(*RankFromPodName("my-run-rlmesh-trainer-12"), 12);
  for (const char* bad : {"", "trainer", "trainer-", "trainer-x1", "trainer-1x"}) {
    auto rank = RankFromPodName(bad);
    EXPECT_FALSE(rank.ok()) << bad;
    EXPECT_THAT(rank.status().message(), HasSubstr("takes the rank from POD_NAME")) << bad;
  }
}

// The reference's sizes default to the actor's (null), as in verl.
TEST_F(DryRunTest, ReferenceParallelSizesDefaultToTheActors) {
  EXPECT_TRUE(Run({"actor_rollout_ref.ref.megatron.pipeline_model_parallel_size=1"}).valid());
  const DryRunResult r = Run({"actor_rollout_ref.ref.megatron.pipeline_model_parallel_size=2"});
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("error: actor_rollout_ref.ref.megatron.pipeline_model_parallel_"
                                  "size = 2: pipeline parallelism is not built yet"));
}

TEST_F(DryRunTest, ExpertParallelNeedsExperts) {
  DryRunResult r = Run({"actor_rollout_ref.actor.megatron.expert_model_parallel_size=4",
                        "trainer.n_gpus_per_node=4"});
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("expert_model_parallel_size = 4 needs a mixture-of-experts "
                                  "model"));
  EXPECT_THAT(r.report, HasSubstr("a dense model has no experts"));
  // The same layout with an 8-expert model is consistent (EP 4 divides 8 experts and DP 4):
  // only the refusals of what is not built remain.
  r = Run({"actor_rollout_ref.actor.megatron.expert_model_parallel_size=4",
           "trainer.n_gpus_per_node=4", "rlmesh.model.num_experts=8",
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"});
  EXPECT_THAT(r.report, HasSubstr("8 experts"));
  EXPECT_THAT(r.report, Not(HasSubstr("needs a mixture-of-experts")));
  EXPECT_EQ(r.errors, 1) << r.report;  // expert_model_parallel_size
  // 6 experts do not split over EP 4.
  r = Run({"actor_rollout_ref.actor.megatron.expert_model_parallel_size=4",
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
  r = Run({"trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64"});
  EXPECT_THAT(r.report, HasSubstr("8 x 8 / 2 = 32 samples, is not divisible by"));
  // One mini-batch, one epoch: valid, with a warning.
  r = Run({"actor_rollout_ref.actor.ppo_mini_batch_size=32",
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64"});
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_THAT(r.report, HasSubstr("warning: one mini-batch per step and ppo_epochs = 1"));
}

TEST_F(DryRunTest, MemoryAgainstCapacity) {
  // The quickstart needs 720944640 bytes per device: the 139164672 of the tiny config in
  // memory_estimate_test.cc, plus for the quickstart's settings what the trainer's
  // old-log-prob forward of 256 sequences, 256 * (301056 + 3456) = 77955072, needs beyond the
  // update's activations and logits (38866944): 39088128; the weight-sync shared-memory
  // segment 1626624, and three process runtimes 3 * 172 MiB = 541065216 (the warm-up's AdamW
  // is freed before GRPO's is allocated: not counted).
  // 784000 KiB = 802816000 bytes: 89.8 % (warning); 700000 KiB is too little (error).
  SetHostMemoryKiB(784000);
  DryRunResult r = Run({});
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_THAT(r.report, HasSubstr("is 89.8% of the"));
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
  r = Run({"rlmesh.weight_sync.transport=cuda_ipc"});
  EXPECT_THAT(r.report, HasSubstr("rlmesh.weight_sync.transport = cuda_ipc needs rlmesh.device = "
                                  "cuda, got cpu (use shm or tcp on cpu)"));
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

// A model folder written by hand, torch-free: config.json of a 1-layer Llama and, when asked,
// model.safetensors with every tensor config.json implies (zeros) and a tokenizer.json.
class ModelFolderTest : public DryRunTest {
 protected:
  std::string MakeFolder(const std::string& name, bool weights, bool tokenizer) {
    const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string config_json =
        R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
            "vocab_size": 12, "max_position_embeddings": 64})";
    std::ofstream(dir / "config.json") << config_json;
    if (weights) {
      auto model = model::ModelConfig::FromJson(config_json, "test");
      EXPECT_TRUE(model.ok()) << model.status();
      std::string header = "{";
      int64_t offset = 0;
      for (const auto& [tensor, shape] : model->TensorShapes()) {
        int64_t bytes = 4;
        for (int64_t d : shape) bytes *= d;
        if (header.size() > 1) header += ",";
        header += "\"" + tensor + "\":{\"dtype\":\"F32\",\"shape\":[";
        for (size_t i = 0; i < shape.size(); ++i)
          header += (i ? "," : "") + std::to_string(shape[i]);
        header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
                  std::to_string(offset + bytes) + "]}";
        offset += bytes;
      }
      header += "}";
      std::ofstream out(dir / "model.safetensors", std::ios::binary);
      const uint64_t len = header.size();
      for (int i = 0; i < 8; ++i) out.put(static_cast<char>(len >> (8 * i)));
      out << header << std::string(static_cast<size_t>(offset), '\0');
    }
    if (tokenizer) std::ofstream(dir / "tokenizer.json") << "{}";
    return dir.string();
  }

  DryRunResult RunOn(const std::string& model, bool for_run) {
    // rlmesh.model.* as the folder's config.json says, so that they draw no warning.
    absl::StatusOr<Config> config = LoadConfig(
        quickstart_, {"actor_rollout_ref.model.path=" + model, "rlmesh.model.hidden_size=8",
                      "rlmesh.model.intermediate_size=16", "rlmesh.model.num_hidden_layers=1",
                      "rlmesh.model.num_attention_heads=2", "rlmesh.model.num_key_value_heads=2",
                      "rlmesh.model.vocab_size=12", "rlmesh.model.max_position_embeddings=64"});
    EXPECT_TRUE(config.ok()) << config.status();
    DryRunOptions options = options_;
    options.for_run = for_run;
    return RunDryRun(*config, options);
  }
};

TEST_F(ModelFolderTest, AWholeFolderIsValidForARun) {
  const DryRunResult r = RunOn(MakeFolder("whole", true, true), /*for_run=*/true);
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_EQ(r.warnings, 0) << r.report;
}

TEST_F(ModelFolderTest, MissingWeightsAndTokenizerWarnWhenPlanningAndStopARun) {
  const std::string dir = MakeFolder("config_only", false, false);
  DryRunResult r = RunOn(dir, /*for_run=*/false);
  EXPECT_TRUE(r.valid()) << r.report;
  EXPECT_THAT(r.report, HasSubstr("warning: actor_rollout_ref.model.path: " + dir +
                                  " holds no model.safetensors"));
  EXPECT_THAT(r.report, HasSubstr("holds no tokenizer.json"));
  r = RunOn(dir, /*for_run=*/true);
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("error: actor_rollout_ref.model.path: " + dir +
                                  " holds no model.safetensors"));
  EXPECT_THAT(r.report, HasSubstr("error: actor_rollout_ref.model.path: " + dir +
                                  " holds no tokenizer.json"));
}

TEST_F(ModelFolderTest, TruncatedWeightsAreAnErrorNamingTheFile) {
  const std::string dir = MakeFolder("truncated", true, true);
  const auto weights = std::filesystem::path(dir) / "model.safetensors";
  std::filesystem::resize_file(weights, std::filesystem::file_size(weights) - 4);
  const DryRunResult r = RunOn(dir, /*for_run=*/false);
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("error: actor_rollout_ref.model.path: " + weights.string()));
  EXPECT_THAT(r.report, HasSubstr("truncated"));
}

TEST_F(ModelFolderTest, WeightsThatDisagreeWithConfigJsonAreAnError) {
  const std::string dir = MakeFolder("mismatch", true, true);
  std::ofstream(std::filesystem::path(dir) / "config.json")
      << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 16, "intermediate_size": 16,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
            "vocab_size": 12, "max_position_embeddings": 64})";
  const DryRunResult r = RunOn(dir, /*for_run=*/false);
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report, HasSubstr("has shape [12, 8], expected [12, 16] from config.json"));
}

TEST_F(ModelFolderTest, AMissingFolderIsAnErrorForARunEvenWithSizes) {
  const std::string dir = testing::TempDir() + "/nothing_here";
  EXPECT_TRUE(RunOn(dir, /*for_run=*/false).valid());
  const DryRunResult r = RunOn(dir, /*for_run=*/true);
  EXPECT_FALSE(r.valid());
  EXPECT_THAT(r.report,
              HasSubstr("error: actor_rollout_ref.model.path: " + dir + " does not exist"));
}

TEST_F(ModelFolderTest, CheckBeforeStartReturnsTheDryRunsErrorLines) {
  absl::StatusOr<Config> config =
      LoadConfig(quickstart_, {"actor_rollout_ref.model.path=" + MakeFolder("start", true, true),
                               "actor_rollout_ref.actor.ppo_mini_batch_size=7"});
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<std::string> warnings;
  const absl::Status status = CheckBeforeStart(*config, /*whole_run=*/true, &warnings);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("error: data.train_batch_size x actor_rollout_ref.rollout.n = 32 x 8"));
}

TEST(ConfigFileTest, AFolderGivenAsTheConfigIsAnError) {
  const absl::StatusOr<Config> config = LoadConfig(testing::TempDir(), {});
  EXPECT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("is a folder, expected a YAML file"));
}

}  // namespace
}  // namespace rlmesh::config
