#include "common/config/schema.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::config {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

TEST(SchemaTest, KeysAreUniqueAndHaveHelp) {
  std::set<std::string> seen;
  for (const KeySpec& spec : Schema()) {
    EXPECT_TRUE(seen.insert(spec.key).second) << "duplicate key " << spec.key;
    EXPECT_FALSE(spec.help.empty()) << spec.key;
    EXPECT_FALSE(spec.expected.empty()) << spec.key;
    EXPECT_EQ(FindKey(spec.key), &spec);
  }
  EXPECT_EQ(FindKey("data"), nullptr);
  EXPECT_EQ(FindKey("data.no_such_key"), nullptr);
}

// Every default passes its own validation, and reading back what get() prints gives the
// same value.
TEST(SchemaTest, DefaultsAreValidAndRoundTrip) {
  for (const KeySpec& spec : Schema()) {
    Config config;
    ASSERT_TRUE(spec.set(spec.default_value, config).ok()) << spec.key;
    const YAML::Node printed = spec.get(config);
    Config again;
    ASSERT_TRUE(spec.set(printed, again).ok()) << spec.key;
    YAML::Emitter a, b;
    a << printed;
    b << spec.get(again);
    EXPECT_EQ(std::string(a.c_str()), std::string(b.c_str())) << spec.key;
  }
}

// ConfigToYaml prints each section once: a section's keys must be contiguous in the table.
TEST(SchemaTest, SectionsAreContiguous) {
  std::set<std::string> closed;
  std::vector<std::string> previous;
  for (const KeySpec& spec : Schema()) {
    std::vector<std::string> parts = absl::StrSplit(spec.key, '.');
    parts.pop_back();
    size_t common = 0;
    while (common < previous.size() && common < parts.size() && previous[common] == parts[common]) {
      ++common;
    }
    std::string prefix;
    for (size_t i = 0; i < previous.size(); ++i) {
      prefix += (i ? "." : "") + previous[i];
      if (i >= common) closed.insert(prefix);
    }
    prefix.clear();
    for (size_t i = 0; i < parts.size(); ++i) {
      prefix += (i ? "." : "") + parts[i];
      if (i >= common) {
        EXPECT_EQ(closed.count(prefix), 0u) << "section " << prefix << " reopened at " << spec.key;
      }
    }
    previous = parts;
  }
}

TEST(SchemaTest, Sections) {
  EXPECT_TRUE(IsSection("data"));
  EXPECT_TRUE(IsSection("actor_rollout_ref"));
  EXPECT_TRUE(IsSection("actor_rollout_ref.actor.optim"));
  EXPECT_TRUE(IsSection("rlmesh.rollout"));
  EXPECT_FALSE(IsSection("data.train_batch_size"));
  EXPECT_FALSE(IsSection("actor_rollout_ref.act"));
}

TEST(SchemaTest, IssueKeysExist) {
  for (const char* key :
       {"data.train_files", "data.val_files", "data.train_batch_size", "data.max_prompt_length",
        "data.max_response_length", "data.prompt_key", "data.shuffle", "data.seed",
        "data.val_batch_size", "data.reward_fn_key", "actor_rollout_ref.model.path",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.actor.ppo_epochs", "actor_rollout_ref.actor.clip_ratio",
        "actor_rollout_ref.actor.clip_ratio_low", "actor_rollout_ref.actor.clip_ratio_high",
        "actor_rollout_ref.actor.clip_ratio_c", "actor_rollout_ref.actor.loss_agg_mode",
        "actor_rollout_ref.actor.entropy_coeff", "actor_rollout_ref.actor.use_kl_loss",
        "actor_rollout_ref.actor.kl_loss_coef", "actor_rollout_ref.actor.kl_loss_type",
        "actor_rollout_ref.actor.grad_clip", "actor_rollout_ref.actor.optim.lr",
        "actor_rollout_ref.actor.optim.weight_decay", "actor_rollout_ref.actor.optim.betas",
        "actor_rollout_ref.actor.optim.lr_warmup_steps", "actor_rollout_ref.actor.shuffle",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
        "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size",
        "actor_rollout_ref.actor.megatron.expert_model_parallel_size",
        "actor_rollout_ref.ref.megatron.tensor_model_parallel_size",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "actor_rollout_ref.rollout.n",
        "actor_rollout_ref.rollout.temperature", "actor_rollout_ref.rollout.top_p",
        "actor_rollout_ref.rollout.top_k", "actor_rollout_ref.rollout.do_sample",
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "actor_rollout_ref.rollout.max_num_seqs",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.rollout.val_kwargs.n", "algorithm.adv_estimator",
        "algorithm.norm_adv_by_std_in_grpo", "algorithm.use_kl_in_reward",
        "algorithm.kl_ctrl.kl_coef", "algorithm.gamma", "algorithm.lam", "trainer.total_epochs",
        "trainer.total_training_steps", "trainer.save_freq", "trainer.test_freq",
        "trainer.default_local_dir", "trainer.resume_mode", "trainer.n_gpus_per_node",
        "trainer.nnodes", "trainer.project_name", "trainer.experiment_name", "trainer.logger",
        "trainer.val_before_train", "trainer.max_actor_ckpt_to_keep", "reward_model.reward_manager",
        "custom_reward_function.path", "custom_reward_function.name", "rlmesh.host",
        "rlmesh.run_dir", "rlmesh.device", "rlmesh.dtype", "rlmesh.num_threads", "rlmesh.seed",
        "rlmesh.device_memory_gb", "rlmesh.rollout.replicas", "rlmesh.rollout.addresses",
        "rlmesh.rollout.discovery_dns", "rlmesh.rollout.max_queue", "rlmesh.reward.custom_address",
        "rlmesh.reward.timeout_s", "rlmesh.reward.format_score", "rlmesh.reward.num_workers",
        "rlmesh.weight_sync.transport", "rlmesh.weight_sync.bucket_bytes", "rlmesh.max_staleness",
        "rlmesh.warmup.sft_steps", "rlmesh.warmup.lr", "rlmesh.warmup.batch_size",
        "rlmesh.tls.enabled", "rlmesh.tls.insecure_plaintext", "rlmesh.tls.cert_file",
        "rlmesh.tls.key_file", "rlmesh.tls.ca_file", "rlmesh.model.hidden_size",
        "rlmesh.model.num_experts", "rlmesh.model.tie_word_embeddings",
        // verl's keys that issue #12 asks to honour or refuse by name
        "actor_rollout_ref.nccl_timeout", "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
        "actor_rollout_ref.actor.optim.lr_scheduler_type",
        "actor_rollout_ref.actor.optim.warmup_style", "actor_rollout_ref.actor.optim.min_lr_ratio",
        "actor_rollout_ref.actor.optim.num_cycles",
        "actor_rollout_ref.actor.fsdp_config.param_offload",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype",
        "actor_rollout_ref.actor.ppo_micro_batch_size", "actor_rollout_ref.actor.use_dynamic_bsz",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size",
        "actor_rollout_ref.ref.fsdp_config.param_offload",
        "actor_rollout_ref.model.use_remove_padding", "actor_rollout_ref.rollout.name",
        "actor_rollout_ref.rollout.gpu_memory_utilization",
        "actor_rollout_ref.rollout.max_num_batched_tokens",
        "actor_rollout_ref.rollout.enable_chunked_prefill",
        "actor_rollout_ref.rollout.max_model_len", "actor_rollout_ref.rollout.free_cache_engine",
        "actor_rollout_ref.rollout.enforce_eager", "actor_rollout_ref.rollout.load_format",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", "algorithm.kl_penalty",
        "algorithm.kl_ctrl.type", "algorithm.kl_ctrl.target_kl", "algorithm.kl_ctrl.horizon",
        "data.filter_overlong_prompts", "data.truncation", "data.return_raw_chat",
        "trainer.critic_warmup", "trainer.log_val_generations"}) {
    EXPECT_NE(FindKey(key), nullptr) << key;
  }
  for (const char* service : {"rollout", "reward", "reference", "trainer", "coordinator"}) {
    for (const char* leaf : {"address", "port", "metrics_port"}) {
      const std::string key = std::string("rlmesh.") + service + "." + leaf;
      EXPECT_NE(FindKey(key), nullptr) << key;
    }
  }
}

TEST(SchemaTest, Suggestions) {
  EXPECT_THAT(SuggestKey("actor_rollout_ref.actor.ppo_mini_batch_sise"),
              Optional(std::string("actor_rollout_ref.actor.ppo_mini_batch_size")));
  EXPECT_THAT(SuggestKey("data.val_batch_sizes"), Optional(std::string("data.val_batch_size")));
  EXPECT_THAT(SuggestKey("data.train_batchsize"), Optional(std::string("data.train_batch_size")));
  // The section is misspelt, the leaf is right.
  EXPECT_THAT(SuggestKey("actor_rolout_ref.rollout.n"),
              Optional(std::string("actor_rollout_ref.rollout.n")));
  // The leaf is right but under another section.
  EXPECT_THAT(SuggestKey("trainer.max_num_seqs"),
              Optional(std::string("actor_rollout_ref.rollout.max_num_seqs")));
  EXPECT_EQ(SuggestKey("zzzzzzzzzzzzzzzzzzzzzzzz.qqqqqqqqqqqqqqqq"), std::nullopt);
  // Spelt alike, meant otherwise: another word of the name, or a one-word name in an
  // unrelated group, is no typo.
  EXPECT_EQ(SuggestKey("actor_rollout_ref.actor.ppo_nano_batch_size"), std::nullopt);
  EXPECT_EQ(SuggestKey("actor_rollout_ref.actor.ppo_max_batch_size"), std::nullopt);
  EXPECT_EQ(SuggestKey("trainer.profile.name"), std::nullopt);
  EXPECT_EQ(SuggestKey("data.names"), std::nullopt);
}

TEST(SchemaTest, VerlKeysRlmeshLacksSayWhy) {
  EXPECT_THAT(NotBuiltVerlKey("actor_rollout_ref.actor.megatron.use_mbridge"),
              ::testing::NotNull());
  EXPECT_THAT(NotBuiltVerlKey(
                  "actor_rollout_ref.actor.megatron.override_transformer_config.apply_rope_fusion"),
              ::testing::NotNull());
  EXPECT_THAT(
      NotBuiltVerlKey("actor_rollout_ref.rollout.engine_kwargs.vllm.disable_mm_preprocessor_cache"),
      ::testing::NotNull());
  EXPECT_THAT(NotBuiltVerlKey("critic"), ::testing::NotNull());
  // A section's own keys are not covered by the section's entry.
  EXPECT_EQ(NotBuiltVerlKey("actor_rollout_ref.actor.megatron.tensor_model_parallel_size"),
            nullptr);
  EXPECT_EQ(NotBuiltVerlKey("data.train_batch_size"), nullptr);
}

TEST(SchemaTest, MarkdownListsEveryKey) {
  const std::string md = KeyTableMarkdown();
  for (const KeySpec& spec : Schema()) {
    EXPECT_THAT(md, HasSubstr("| `" + spec.key + "` |"));
  }
  EXPECT_THAT(md, HasSubstr("### actor_rollout_ref\n"));
  EXPECT_THAT(md, HasSubstr("### rlmesh.tls\n"));
}

// docs/config.md carries the generated tables; a key added to the table must reach the docs.
TEST(SchemaTest, DocsListEveryKey) {
  const char* source = std::getenv("RLMESH_SOURCE_DIR");
  std::ifstream in(std::string(source != nullptr ? source : ".") + "/docs/config.md");
  ASSERT_TRUE(in.good()) << "docs/config.md not found";
  std::stringstream text;
  text << in.rdbuf();
  for (const KeySpec& spec : Schema()) {
    EXPECT_THAT(text.str(), HasSubstr("| `" + spec.key + "` |"))
        << "docs/config.md lacks " << spec.key << ": regenerate it with `rlmesh config-keys`";
  }
}

}  // namespace
}  // namespace rlmesh::config
