// Every configuration key does what its help says or is refused by name (issue #12): one row
// per key of the schema sets it to a value other than its default and names the probe that
// must see the difference. A probe runs the component the key belongs to, in process, with
// the config derived the way the binaries derive it (service_settings.h), and returns what it
// observed: the trainer's metrics and weights after three real updates of a tiny model, the
// requests a real coordinator sends to recording fakes over a short run, a real replica's
// engine statistics and tokens, the reference's micro-batches, the reward service's scores,
// the dry-run's report, the TLS options, or the settings each process runs with. A row
// passes when the observation differs from the default config's; a refused row passes when
// the dry-run (which every binary runs at start-up) names the key as an error while the
// default does not. A schema key without a row, or a row of no key, fails the test.
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/config/config.h"
#include "common/config/dry_run.h"
#include "common/config/memory_estimate.h"
#include "common/config/schema.h"
#include "common/config/service_settings.h"
#include "common/process/subprocess.h"
#include "common/rpc/tls_config.h"
#include "gtest/gtest.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/fakes.h"
#include "services/reference/reference_model.h"
#include "services/reward/python_pool.h"
#include "services/reward/reward_grpc.h"
#include "services/reward/reward_model_scorer.h"
#include "services/reward/reward_service.h"
#include "services/rollout/replica.h"
#include "services/trainer/trainer.h"

namespace rlmesh::config_keys {
namespace {

namespace fs = std::filesystem;
using config::Config;
using Observations = std::map<std::string, std::string>;

enum class Probe {
  kRefused,      // the dry-run names the key as an error
  kSettings,     // what the processes run with (the dry-run's "services:" block)
  kDryRun,       // the dry-run's report
  kTls,          // the TLS and keepalive options every server and channel takes, and the
                 // dry-run's errors (the keepalive's effect: tests/e2e/fault_test.cc)
  kTrainer,      // three updates and checkpoints of a real trainer on a tiny model
  kCoordinator,  // a real coordinator's two-step run against recording fakes
  kReplica,      // a real rollout replica generating for four prompts
  kReference,    // a real reference computing log-probs
  kReward,       // the real reward service scoring and validating
};

const char* ProbeName(Probe p) {
  switch (p) {
    case Probe::kRefused:
      return "refused";
    case Probe::kSettings:
      return "settings";
    case Probe::kDryRun:
      return "dry-run";
    case Probe::kTls:
      return "tls";
    case Probe::kTrainer:
      return "trainer";
    case Probe::kCoordinator:
      return "coordinator";
    case Probe::kReplica:
      return "replica";
    case Probe::kReference:
      return "reference";
    case Probe::kReward:
      return "reward";
  }
  return "?";
}

struct Row {
  std::string key;
  std::string value;  // YAML as typed on a command line; $DIR = the test folder
  Probe probe;
  std::vector<std::string> with{};  // set in both runs so that the key's effect can show
  std::string watch{};              // the observation that must change; empty = any
};

// For gtest's messages: the row as it is typed.
void PrintTo(const Row& row, std::ostream* os) { *os << row.key << "=" << row.value; }

// The rows. Values are chosen so that the effect shows in the probe's small run.
const std::vector<Row>& Rows() {
  static const auto* rows = new std::vector<Row>{
      // data
      {"data.train_files", "[$DIR/train_b.jsonl]", Probe::kCoordinator, {}, "generate"},
      {"data.val_files", "[$DIR/train_b.jsonl]", Probe::kCoordinator, {}, "generate"},
      {"data.train_batch_size",
       "2",
       Probe::kCoordinator,
       {"actor_rollout_ref.actor.ppo_mini_batch_size=1"},
       "train"},
      {"data.val_batch_size", "1", Probe::kCoordinator, {}, "generate_calls"},
      {"data.max_prompt_length", "3", Probe::kCoordinator, {"data.truncation=left"}, "generate"},
      {"data.max_response_length", "5", Probe::kCoordinator, {}, "generate"},
      {"data.prompt_key", "question", Probe::kCoordinator, {}, "generate"},
      {"data.reward_fn_key", "ability", Probe::kCoordinator, {}, "score"},
      {"data.shuffle", "false", Probe::kCoordinator, {}, "generate"},
      {"data.seed", "7", Probe::kCoordinator, {}, "generate"},
      {"data.truncation", "left", Probe::kCoordinator, {"data.max_prompt_length=3"}, "error"},
      {"data.filter_overlong_prompts",
       "true",
       Probe::kCoordinator,
       {"data.max_prompt_length=4", "data.truncation=left"},
       "generate"},
      {"data.return_raw_chat", "false", Probe::kRefused},
      {"data.image_key", "pixels", Probe::kRefused},
      // actor_rollout_ref
      {"actor_rollout_ref.nccl_timeout", "30", Probe::kSettings, {}, "trainer.weight_timeout_s"},
      {"actor_rollout_ref.model.path", "$DIR/model_b", Probe::kTrainer, {}, "logprobs_after"},
      {"actor_rollout_ref.model.enable_gradient_checkpointing", "true", Probe::kDryRun},
      {"actor_rollout_ref.model.use_remove_padding",
       "true",
       Probe::kTrainer,
       {},
       "step1/rlmesh/forward_tokens/update_actor"},
      {"actor_rollout_ref.model.lora_rank", "64", Probe::kRefused},
      {"actor_rollout_ref.model.lora_alpha", "32", Probe::kRefused},
      {"actor_rollout_ref.model.target_modules", "q_proj", Probe::kRefused},
      {"actor_rollout_ref.model.use_shm", "true", Probe::kRefused},
      {"actor_rollout_ref.model.use_fused_kernels", "true", Probe::kRefused},
      {"actor_rollout_ref.model.trust_remote_code", "true", Probe::kRefused},
      {"actor_rollout_ref.actor.strategy", "megatron", Probe::kRefused},
      {"actor_rollout_ref.actor.ppo_mini_batch_size",
       "4",
       Probe::kTrainer,
       {},
       "step1/actor/optimizer_steps"},
      {"actor_rollout_ref.actor.ppo_micro_batch_size",
       "1",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null"},
       "step1/rlmesh/micro_batches/update_actor"},
      {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
       "1",
       Probe::kTrainer,
       {},
       "step1/rlmesh/micro_batches/update_actor"},
      {"actor_rollout_ref.actor.use_dynamic_bsz",
       "true",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.ppo_max_token_len_per_gpu=12"},
       "step1/rlmesh/micro_batches/update_actor"},
      {"actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
       "12",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.use_dynamic_bsz=true"},
       "step1/rlmesh/micro_batches/update_actor"},
      {"actor_rollout_ref.actor.ppo_epochs",
       "2",
       Probe::kTrainer,
       {},
       "step1/actor/optimizer_steps"},
      {"actor_rollout_ref.actor.shuffle",
       "true",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.ppo_epochs=2"},
       "logprobs_after"},
      {"actor_rollout_ref.actor.ulysses_sequence_parallel_size", "2", Probe::kRefused},
      {"actor_rollout_ref.actor.use_torch_compile", "true", Probe::kRefused},
      {"actor_rollout_ref.actor.clip_ratio",
       "0.05",
       Probe::kTrainer,
       {},
       "step1/actor/pg_clipfrac"},
      {"actor_rollout_ref.actor.clip_ratio_low",
       "0.05",
       Probe::kTrainer,
       {},
       "step1/actor/pg_clipfrac"},
      {"actor_rollout_ref.actor.clip_ratio_high",
       "0.05",
       Probe::kTrainer,
       {},
       "step1/actor/pg_clipfrac"},
      {"actor_rollout_ref.actor.clip_ratio_c",
       "1.01",
       Probe::kTrainer,
       {},
       "step1/actor/pg_clipfrac_lower"},
      {"actor_rollout_ref.actor.loss_agg_mode",
       "seq-mean-token-sum",
       Probe::kTrainer,
       {},
       "step1/actor/pg_loss"},
      {"actor_rollout_ref.actor.loss_scale_factor",
       "3",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm"},
       "step1/actor/pg_loss"},
      {"actor_rollout_ref.actor.loss_scale_factor", "3", Probe::kRefused},
      {"actor_rollout_ref.actor.policy_loss.loss_mode",
       "gspo",
       Probe::kTrainer,
       {},
       "step1/actor/pg_loss"},
      // The tiny model's covariances are about 0.1: a window from -10 lets tokens be dropped.
      {"actor_rollout_ref.actor.policy_loss.clip_cov_ratio",
       "0.5",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov",
        "actor_rollout_ref.actor.policy_loss.clip_cov_lb=-10"},
       "step1/actor/pg_clipfrac"},
      {"actor_rollout_ref.actor.policy_loss.clip_cov_lb",
       "-10",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov"},
       "step1/actor/pg_clipfrac"},
      {"actor_rollout_ref.actor.policy_loss.clip_cov_ub",
       "-5",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov",
        "actor_rollout_ref.actor.policy_loss.clip_cov_lb=-10"},
       "step1/actor/pg_clipfrac"},
      {"actor_rollout_ref.actor.policy_loss.kl_cov_ratio",
       "0.5",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov"},
       "step1/actor/pg_loss"},
      {"actor_rollout_ref.actor.policy_loss.ppo_kl_coef",
       "5",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov"},
       "step1/actor/pg_loss"},
      {"actor_rollout_ref.actor.tau_pos",
       "3",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.policy_loss.loss_mode=sapo"},
       "step1/actor/pg_loss"},
      {"actor_rollout_ref.actor.tau_neg",
       "3",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.policy_loss.loss_mode=sapo"},
       "step1/actor/pg_loss"},
      // A mode's option set with another mode, which would ignore it, is refused.
      {"actor_rollout_ref.actor.policy_loss.clip_cov_ratio", "0.5", Probe::kRefused},
      {"actor_rollout_ref.actor.policy_loss.kl_cov_ratio",
       "0.5",
       Probe::kRefused,
       {"actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov"}},
      {"actor_rollout_ref.actor.tau_pos", "3", Probe::kRefused},
      {"actor_rollout_ref.actor.clip_ratio_c",
       "5",
       Probe::kRefused,
       {"actor_rollout_ref.actor.policy_loss.loss_mode=gspo"}},
      {"actor_rollout_ref.actor.clip_ratio_high",
       "0.28",
       Probe::kRefused,
       {"actor_rollout_ref.actor.policy_loss.loss_mode=sapo"}},
      {"actor_rollout_ref.actor.entropy_coeff", "0.5", Probe::kTrainer, {}, "logprobs_after"},
      {"actor_rollout_ref.actor.use_kl_loss", "true", Probe::kTrainer, {}, "step1/actor/kl_loss"},
      {"actor_rollout_ref.actor.kl_loss_coef",
       "0.5",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.use_kl_loss=true"},
       "step1/actor/kl_coef"},
      {"actor_rollout_ref.actor.kl_loss_type",
       "mse",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.use_kl_loss=true"},
       "step1/actor/kl_loss"},
      {"actor_rollout_ref.actor.grad_clip", "0.001", Probe::kTrainer, {}, "logprobs_after"},
      {"actor_rollout_ref.actor.optim.lr", "0.01", Probe::kTrainer, {}, "step1/actor/lr"},
      {"actor_rollout_ref.actor.optim.weight_decay", "0.9", Probe::kTrainer, {}, "logprobs_after"},
      {"actor_rollout_ref.actor.optim.betas", "[0.5, 0.6]", Probe::kTrainer, {}, "logprobs_after"},
      {"actor_rollout_ref.actor.optim.lr_warmup_steps", "2", Probe::kTrainer, {}, "step1/actor/lr"},
      {"actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
       "0.3",
       Probe::kTrainer,
       {},
       "step1/actor/lr"},
      {"actor_rollout_ref.actor.optim.lr_scheduler_type",
       "cosine",
       Probe::kTrainer,
       {},
       "step3/actor/lr"},
      {"actor_rollout_ref.actor.optim.warmup_style",
       "cosine",
       Probe::kTrainer,
       {},
       "step3/actor/lr"},
      {"actor_rollout_ref.actor.optim.min_lr_ratio",
       "0.5",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.optim.lr_scheduler_type=cosine"},
       "step3/actor/lr"},
      {"actor_rollout_ref.actor.optim.num_cycles",
       "1.5",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.optim.lr_scheduler_type=cosine"},
       "step3/actor/lr"},
      {"actor_rollout_ref.actor.optim.total_training_steps", "100", Probe::kRefused},
      {"actor_rollout_ref.actor.fsdp_config.param_offload",
       "true",
       Probe::kSettings,
       {},
       "trainer.param_offload"},
      {"actor_rollout_ref.actor.fsdp_config.optimizer_offload",
       "true",
       Probe::kSettings,
       {},
       "trainer.optimizer_offload"},
      {"actor_rollout_ref.actor.fsdp_config.offload_policy",
       "true",
       Probe::kSettings,
       {},
       "trainer.param_offload"},
      // -1 shards over the group's 4 ranks; 2 over shard groups of 2, replicated twice
      // (services/trainer/trainer_test.cc trains it as one rank).
      {"actor_rollout_ref.actor.fsdp_config.fsdp_size",
       "2",
       Probe::kSettings,
       {"trainer.n_gpus_per_node=4"},
       "trainer.shard_size"},
      {"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype",
       "bf16",
       Probe::kTrainer,
       {},
       "logprobs_after"},
      {"actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype",
       "bf16",
       Probe::kTrainer,
       {"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"},
       "logprobs_after"},
      {"actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype", "bf16", Probe::kRefused},
      {"actor_rollout_ref.actor.megatron.tensor_model_parallel_size", "2", Probe::kRefused},
      {"actor_rollout_ref.actor.megatron.pipeline_model_parallel_size", "2", Probe::kRefused},
      {"actor_rollout_ref.actor.megatron.expert_model_parallel_size", "2", Probe::kRefused},
      {"actor_rollout_ref.ref.log_prob_micro_batch_size",
       "1",
       Probe::kReference,
       {},
       "micro_batches"},
      {"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
       "1",
       Probe::kReference,
       {},
       "micro_batches"},
      {"actor_rollout_ref.ref.log_prob_use_dynamic_bsz",
       "true",
       Probe::kReference,
       {"actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=24"},
       "micro_batches"},
      {"actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
       "40",
       Probe::kReference,
       {"actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true"},
       "micro_batches"},
      {"actor_rollout_ref.ref.ulysses_sequence_parallel_size", "2", Probe::kRefused},
      {"actor_rollout_ref.ref.use_torch_compile", "true", Probe::kRefused},
      {"actor_rollout_ref.ref.fsdp_config.param_offload",
       "true",
       Probe::kSettings,
       {},
       "reference.param_offload"},
      {"actor_rollout_ref.ref.megatron.tensor_model_parallel_size", "2", Probe::kRefused},
      {"actor_rollout_ref.ref.megatron.pipeline_model_parallel_size", "2", Probe::kRefused},
      {"actor_rollout_ref.ref.megatron.expert_model_parallel_size", "2", Probe::kRefused},
      {"actor_rollout_ref.rollout.name", "vllm", Probe::kSettings, {}, "rollout.engine"},
      {"actor_rollout_ref.rollout.mode", "sync", Probe::kRefused},
      {"actor_rollout_ref.rollout.n", "3", Probe::kCoordinator, {}, "generate"},
      {"actor_rollout_ref.rollout.temperature", "0.7", Probe::kCoordinator, {}, "train"},
      {"actor_rollout_ref.rollout.top_p", "0.9", Probe::kCoordinator, {}, "generate"},
      {"actor_rollout_ref.rollout.top_k", "5", Probe::kCoordinator, {}, "generate"},
      {"actor_rollout_ref.rollout.do_sample", "false", Probe::kCoordinator, {}, "generate"},
      {"actor_rollout_ref.rollout.tensor_model_parallel_size", "2", Probe::kRefused},
      {"actor_rollout_ref.rollout.max_num_seqs", "2", Probe::kReplica, {}, "slots"},
      // 0.00034 GiB: half of it holds the 148864 bytes of weights and 5 slots of 6144 bytes,
      // 45 % only 2.
      {"actor_rollout_ref.rollout.gpu_memory_utilization",
       "0.45",
       Probe::kReplica,
       {"rlmesh.device_memory_gb=0.00034"},
       "slots"},
      {"actor_rollout_ref.rollout.max_num_batched_tokens", "16", Probe::kReplica, {}, "steps"},
      {"actor_rollout_ref.rollout.enable_chunked_prefill",
       "false",
       Probe::kReplica,
       {"actor_rollout_ref.rollout.max_num_batched_tokens=24"},
       "chunked_prefills"},
      {"actor_rollout_ref.rollout.max_model_len", "11", Probe::kReplica, {}, "tokens"},
      {"actor_rollout_ref.rollout.free_cache_engine",
       "false",
       Probe::kReplica,
       {},
       "kv_cache_bytes_idle"},
      {"actor_rollout_ref.rollout.enforce_eager",
       "true",
       Probe::kSettings,
       {},
       "rollout.enforce_eager"},
      {"actor_rollout_ref.rollout.load_format", "dummy", Probe::kRefused},
      {"actor_rollout_ref.rollout.layered_summon", "true", Probe::kRefused},
      {"actor_rollout_ref.rollout.log_prob_micro_batch_size",
       "1",
       Probe::kTrainer,
       {},
       "old_micro_batches"},
      {"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
       "1",
       Probe::kTrainer,
       {},
       "old_micro_batches"},
      {"actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
       "true",
       Probe::kTrainer,
       {"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=24"},
       "old_micro_batches"},
      {"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
       "30",
       Probe::kTrainer,
       {"actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true"},
       "old_micro_batches"},
      {"actor_rollout_ref.rollout.val_kwargs.temperature",
       "0.5",
       Probe::kCoordinator,
       {"actor_rollout_ref.rollout.val_kwargs.do_sample=true"},
       "generate"},
      {"actor_rollout_ref.rollout.val_kwargs.top_p",
       "0.5",
       Probe::kCoordinator,
       {"actor_rollout_ref.rollout.val_kwargs.do_sample=true"},
       "generate"},
      {"actor_rollout_ref.rollout.val_kwargs.top_k",
       "3",
       Probe::kCoordinator,
       {"actor_rollout_ref.rollout.val_kwargs.do_sample=true"},
       "generate"},
      {"actor_rollout_ref.rollout.val_kwargs.do_sample",
       "true",
       Probe::kCoordinator,
       {"actor_rollout_ref.rollout.val_kwargs.temperature=0.6"},
       "generate"},
      {"actor_rollout_ref.rollout.val_kwargs.n", "2", Probe::kCoordinator, {}, "generate"},
      // algorithm
      {"algorithm.adv_estimator", "rloo", Probe::kCoordinator, {}, "train"},
      {"algorithm.adv_estimator", "reinforce_plus_plus_baseline", Probe::kCoordinator, {}, "train"},
      {"algorithm.adv_estimator", "gae", Probe::kRefused},
      {"algorithm.adv_estimator", "remax", Probe::kRefused},
      {"algorithm.adv_estimator", "grpo_passk", Probe::kRefused, {"actor_rollout_ref.rollout.n=1"}},
      {"algorithm.norm_adv_by_std_in_grpo", "false", Probe::kCoordinator, {}, "train"},
      {"algorithm.norm_adv_by_std_in_grpo",
       "false",
       Probe::kRefused,
       {"algorithm.adv_estimator=rloo"}},
      {"algorithm.use_kl_in_reward", "true", Probe::kCoordinator, {}, "metrics"},
      {"algorithm.kl_penalty",
       "mse",
       Probe::kCoordinator,
       {"algorithm.use_kl_in_reward=true"},
       "metrics"},
      {"algorithm.kl_ctrl.type",
       "adaptive",
       Probe::kCoordinator,
       {"algorithm.use_kl_in_reward=true"},
       "metrics"},
      {"algorithm.kl_ctrl.kl_coef",
       "0.5",
       Probe::kCoordinator,
       {"algorithm.use_kl_in_reward=true"},
       "metrics"},
      {"algorithm.kl_ctrl.target_kl",
       "0.5",
       Probe::kCoordinator,
       {"algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive"},
       "metrics"},
      {"algorithm.kl_ctrl.horizon",
       "10",
       Probe::kCoordinator,
       {"algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive"},
       "metrics"},
      {"algorithm.gamma",
       "0.9",
       Probe::kCoordinator,
       {"algorithm.adv_estimator=reinforce_plus_plus"},
       "train"},
      {"algorithm.gamma", "0.9", Probe::kRefused},
      {"algorithm.lam", "0.9", Probe::kRefused},
      {"algorithm.rollout_correction.rollout_is", "token", Probe::kCoordinator, {}, "train"},
      {"algorithm.rollout_correction.rollout_is", "sequence", Probe::kCoordinator, {}, "train"},
      {"algorithm.rollout_correction.rollout_is",
       "token",
       Probe::kRefused,
       {"algorithm.rollout_correction.bypass_mode=true"}},
      {"algorithm.rollout_correction.rollout_is_threshold",
       "1.1",
       Probe::kCoordinator,
       {"algorithm.rollout_correction.rollout_is=token"},
       "train"},
      {"algorithm.rollout_correction.rollout_is_batch_normalize",
       "true",
       Probe::kCoordinator,
       {"algorithm.rollout_correction.rollout_is=token"},
       "train"},
      {"algorithm.rollout_correction.rollout_rs",
       "token_k1",
       Probe::kCoordinator,
       {"algorithm.rollout_correction.rollout_rs=seq_max_k2",
        "algorithm.rollout_correction.rollout_rs_threshold=1.1"},
       "train"},
      {"algorithm.rollout_correction.rollout_rs", "token_k1", Probe::kRefused},
      {"algorithm.rollout_correction.rollout_rs_threshold",
       "0.9_1.1",
       Probe::kCoordinator,
       {"algorithm.rollout_correction.rollout_rs=token_k1",
        "algorithm.rollout_correction.rollout_rs_threshold=0.5_2"},
       "train"},
      {"algorithm.rollout_correction.rollout_rs_threshold", "2.0", Probe::kRefused},
      {"algorithm.rollout_correction.bypass_mode", "true", Probe::kCoordinator, {}, "train"},
      {"algorithm.rollout_correction.loss_type", "reinforce", Probe::kRefused},
      // trainer
      {"trainer.total_epochs",
       "2",
       Probe::kCoordinator,
       {"trainer.total_training_steps=null"},
       "train_calls"},
      {"trainer.total_training_steps", "1", Probe::kCoordinator, {}, "train_calls"},
      {"trainer.save_freq", "-1", Probe::kCoordinator, {}, "save"},
      {"trainer.test_freq", "-1", Probe::kCoordinator, {}, "generate_calls"},
      {"trainer.val_before_train", "false", Probe::kCoordinator, {}, "generate_calls"},
      {"trainer.project_name",
       "other",
       Probe::kSettings,
       {"trainer.default_local_dir=ckpt/${trainer.project_name}"},
       "trainer.checkpoint_dir"},
      {"trainer.experiment_name",
       "other",
       Probe::kSettings,
       {"rlmesh.run_dir=runs/${trainer.experiment_name}"},
       "coordinator.run_dir"},
      {"trainer.logger", "[console]", Probe::kCoordinator, {}, "metrics"},
      {"trainer.logger", "[console,jsonl,tensorboard]", Probe::kCoordinator, {}, "tensorboard"},
      {"trainer.logger", "[console,wandb]", Probe::kRefused},
      {"trainer.log_val_generations", "2", Probe::kCoordinator, {}, "val_generations"},
      {"trainer.default_local_dir",
       "$DIR/elsewhere",
       Probe::kSettings,
       {},
       "trainer.checkpoint_dir"},
      {"trainer.resume_mode", "disable", Probe::kCoordinator, {}, "load"},
      {"trainer.resume_from_path",
       "$DIR/global_step_3",
       Probe::kCoordinator,
       {"trainer.resume_mode=resume_path"},
       "load"},
      {"trainer.max_actor_ckpt_to_keep", "1", Probe::kTrainer, {}, "checkpoints"},
      {"trainer.n_gpus_per_node", "2", Probe::kSettings, {}, "trainer.world_size"},
      {"trainer.nnodes", "2", Probe::kSettings, {}, "trainer.world_size"},
      {"trainer.balance_batch", "false", Probe::kSettings, {}, "trainer.actor.balance_batch"},
      {"trainer.critic_warmup", "1", Probe::kRefused},
      // reward
      {"reward_model.enable", "true", Probe::kRefused},
      {"reward_model.enable",
       "true",
       Probe::kCoordinator,
       {"reward_model.model.path=$DIR/rm"},
       "score"},
      {"reward_model.enable",
       "true",
       Probe::kRefused,
       {"reward_model.model.path=$DIR/rm", "custom_reward_function.path=$DIR/reward_file.py"}},
      {"reward_model.enable",
       "true",
       Probe::kRefused,
       {"reward_model.model.path=$DIR/rm", "reward_model.reward_manager=dapo",
        "reward_model.reward_kwargs.overlong_buffer_cfg.enable=true",
        "reward_model.reward_kwargs.overlong_buffer_cfg.len=2"}},
      {"reward_model.model.path",
       "$DIR/rm_b",
       Probe::kReward,
       {"reward_model.enable=true", "reward_model.model.path=$DIR/rm"},
       "model_scores"},
      {"reward_model.model.path", "$DIR/rm", Probe::kRefused},
      {"reward_model.micro_batch_size_per_gpu",
       "1",
       Probe::kReward,
       {"reward_model.enable=true", "reward_model.model.path=$DIR/rm"},
       "model_forwards"},
      {"reward_model.micro_batch_size_per_gpu", "1", Probe::kRefused},
      // DAPO's dynamic sampling. The probe's groups all have a spread (sample 0 scores 1):
      // one round a step, which the metrics now count.
      {"algorithm.filter_groups.enable",
       "true",
       Probe::kCoordinator,
       {"algorithm.filter_groups.metric=acc", "algorithm.filter_groups.max_num_gen_batches=3"},
       "metrics"},
      {"algorithm.filter_groups.enable", "true", Probe::kRefused},  // no metric
      {"algorithm.filter_groups.metric",
       "seq_reward",
       Probe::kSettings,
       {"algorithm.filter_groups.enable=true"}},
      {"algorithm.filter_groups.metric", "acc", Probe::kRefused},  // without enable
      {"algorithm.filter_groups.max_num_gen_batches",
       "3",
       Probe::kSettings,
       {"algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"}},
      {"data.gen_batch_size",
       "2",
       Probe::kCoordinator,
       {"algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
        "algorithm.filter_groups.max_num_gen_batches=3"},
       "generate"},
      {"data.gen_batch_size", "2", Probe::kRefused},
      {"reward_model.reward_manager", "dapo", Probe::kRefused},  // dapo without its buffer
      {"reward_model.reward_manager", "batch", Probe::kRefused},
      // DAPO's overlong buffer: responses of the probe's budget of 4 tokens are penalised when
      // the buffer is the whole budget.
      {"reward_model.reward_kwargs.overlong_buffer_cfg.enable",
       "true",
       Probe::kCoordinator,
       {"reward_model.reward_manager=dapo", "reward_model.reward_kwargs.overlong_buffer_cfg.len=4"},
       "metrics"},
      {"reward_model.reward_kwargs.overlong_buffer_cfg.enable", "true", Probe::kRefused},
      {"reward_model.reward_kwargs.overlong_buffer_cfg.len",
       "2",
       Probe::kSettings,
       {"reward_model.reward_manager=dapo",
        "reward_model.reward_kwargs.overlong_buffer_cfg.enable=true"}},
      {"reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor",
       "0.5",
       Probe::kCoordinator,
       {"reward_model.reward_manager=dapo",
        "reward_model.reward_kwargs.overlong_buffer_cfg.enable=true",
        "reward_model.reward_kwargs.overlong_buffer_cfg.len=4"},
       "metrics"},
      {"reward_model.reward_kwargs.overlong_buffer_cfg.log",
       "true",
       Probe::kCoordinator,
       {"reward_model.reward_manager=dapo",
        "reward_model.reward_kwargs.overlong_buffer_cfg.enable=true",
        "reward_model.reward_kwargs.overlong_buffer_cfg.len=4"},
       "metrics"},
      {"reward_model.reward_kwargs.max_resp_len",
       "8",
       Probe::kCoordinator,
       {"reward_model.reward_manager=dapo",
        "reward_model.reward_kwargs.overlong_buffer_cfg.enable=true",
        "reward_model.reward_kwargs.overlong_buffer_cfg.len=4"},
       "metrics"},
      {"reward_model.reward_kwargs.max_resp_len", "8", Probe::kRefused},
      {"custom_reward_function.path", "$DIR/reward_file.py", Probe::kReward, {}, "scores"},
      {"custom_reward_function.path",
       "$DIR/reward_file.py",
       Probe::kRefused,
       {"rlmesh.reward.custom_address=localhost:9"}},
      {"custom_reward_function.name",
       "quarter",
       Probe::kReward,
       {"custom_reward_function.path=$DIR/reward_file.py"},
       "scores"},
      {"custom_reward_function.name", "quarter", Probe::kRefused},
      {"custom_reward_function.reward_kwargs",
       "{scale: 3}",
       Probe::kReward,
       {"custom_reward_function.path=$DIR/reward_file.py"},
       "scores"},
      {"custom_reward_function.reward_kwargs", "{scale: 3}", Probe::kRefused},
      // rlmesh: process-wide
      {"rlmesh.host", "localhost", Probe::kSettings, {}, "listen.trainer"},
      {"rlmesh.chat_template", "chatml", Probe::kCoordinator, {"data.truncation=left"}, "generate"},
      {"rlmesh.run_dir", "$DIR/run_elsewhere", Probe::kSettings, {}, "coordinator.run_dir"},
      {"rlmesh.tensorboard_dir",
       "$DIR/tb_elsewhere",
       Probe::kSettings,
       {},
       "coordinator.tensorboard_dir"},
      {"rlmesh.device", "cuda", Probe::kSettings, {}, "trainer.device"},
      {"rlmesh.dtype", "bfloat16", Probe::kTrainer, {}, "logprobs_after"},
      {"rlmesh.num_threads", "2", Probe::kSettings, {}, "trainer.num_threads"},
      {"rlmesh.num_threads", "2", Probe::kTls, {}, "process_metrics"},
      {"rlmesh.seed", "9", Probe::kCoordinator, {}, "generate"},
      {"rlmesh.device_memory_gb", "0.001", Probe::kDryRun},
      {"rlmesh.device_memory_gb", "2", Probe::kTls, {}, "process_metrics"},
      // rlmesh: services
      {"rlmesh.rollout.address", "localhost:1", Probe::kRefused},
      {"rlmesh.rollout.port", "1234", Probe::kSettings, {}, "listen.rollout"},
      {"rlmesh.rollout.metrics_port", "1235", Probe::kSettings, {}, "listen.rollout"},
      {"rlmesh.rollout.cpus", "0", Probe::kSettings, {}, "listen.rollout"},
      {"rlmesh.rollout.replicas", "3", Probe::kSettings, {}, "launcher.rollout_replicas"},
      {"rlmesh.rollout.addresses", "[fake:1, fake:2]", Probe::kCoordinator, {}, "generate_calls"},
      {"rlmesh.rollout.discovery_dns",
       "replicas.local",
       Probe::kSettings,
       {"rlmesh.rollout.addresses=[]"},
       "coordinator.discovery_dns"},
      {"rlmesh.rollout.discovery_interval_s",
       "3",
       Probe::kSettings,
       {},
       "coordinator.discovery_interval_s"},
      {"rlmesh.rollout.register_with",
       "localhost:50050",
       Probe::kSettings,
       {},
       "rollout.register_with"},
      {"rlmesh.rollout.advertise_address",
       "10.0.0.1:50051",
       Probe::kSettings,
       {},
       "rollout.advertise_address"},
      {"rlmesh.rollout.replica_id", "rollout-7", Probe::kSettings, {}, "rollout.replica_id"},
      {"rlmesh.rollout.max_queue", "2", Probe::kCoordinator, {}, "generate_calls"},
      {"rlmesh.rollout.max_queued_samples",
       "64",
       Probe::kSettings,
       {},
       "rollout.max_queued_samples"},
      {"rlmesh.rollout.heartbeat_s", "0.5", Probe::kSettings, {}, "coordinator.heartbeat_s"},
      {"rlmesh.rollout.evict_after_s", "60", Probe::kSettings, {}, "coordinator.evict_after_s"},
      {"rlmesh.rollout.ready_wait_s", "60", Probe::kSettings, {}, "coordinator.ready_wait_s"},
      {"rlmesh.rollout.max_restarts", "1", Probe::kSettings, {}, "launcher.rollout_max_restarts"},
      {"rlmesh.reward.address", "localhost:1", Probe::kSettings, {}, "coordinator.reward_address"},
      {"rlmesh.reward.port", "1236", Probe::kSettings, {}, "listen.reward"},
      {"rlmesh.reward.metrics_port", "1237", Probe::kSettings, {}, "listen.reward"},
      {"rlmesh.reward.cpus", "0", Probe::kSettings, {}, "listen.reward"},
      {"rlmesh.reward.custom_address",
       "localhost:9",
       Probe::kSettings,
       {},
       "reward.custom_address"},
      {"rlmesh.reward.timeout_s", "7", Probe::kCoordinator, {}, "score"},
      {"rlmesh.reward.format_score", "0.25", Probe::kReward, {}, "scores"},
      {"rlmesh.reward.num_workers", "1", Probe::kSettings, {}, "reward.num_workers"},
      {"rlmesh.reward.max_batch_size", "2", Probe::kReward, {}, "validation"},
      {"rlmesh.reward.custom_data_sources", "[openai/gsm8k]", Probe::kReward, {}, "error"},
      {"rlmesh.reward.python",
       "/nonexistent/python3",
       Probe::kReward,
       {"custom_reward_function.path=$DIR/reward_file.py"},
       "error"},
      {"rlmesh.reward.python", "/usr/bin/python3.11", Probe::kRefused},
      {"rlmesh.reward.python_workers",
       "2",
       Probe::kReward,
       {"custom_reward_function.path=$DIR/reward_file.py"},
       "python_workers"},
      {"rlmesh.reward.python_workers", "2", Probe::kRefused},
      {"rlmesh.reward.failed_item_score", "0", Probe::kCoordinator, {}, "metrics"},
      {"rlmesh.reference.address",
       "localhost:2",
       Probe::kSettings,
       {},
       "coordinator.reference_address"},
      {"rlmesh.reference.port", "1238", Probe::kSettings, {}, "listen.reference"},
      {"rlmesh.reference.metrics_port", "1239", Probe::kSettings, {}, "listen.reference"},
      {"rlmesh.reference.cpus", "0", Probe::kSettings, {}, "listen.reference"},
      {"rlmesh.reference.world_size", "2", Probe::kSettings, {}, "launcher.reference_ranks"},
      {"rlmesh.reference.rank",
       "1",
       Probe::kSettings,
       {"rlmesh.reference.world_size=2"},
       "reference.rank"},
      {"rlmesh.reference.group_host", "10.1.2.4", Probe::kSettings, {}, "reference.group_host"},
      {"rlmesh.reference.group_port", "29612", Probe::kSettings, {}, "reference.group_port"},
      {"rlmesh.trainer.address",
       "localhost:3",
       Probe::kSettings,
       {},
       "coordinator.trainer_address"},
      {"rlmesh.trainer.port", "1240", Probe::kSettings, {}, "listen.trainer"},
      {"rlmesh.trainer.metrics_port", "1241", Probe::kSettings, {}, "listen.trainer"},
      {"rlmesh.trainer.cpus", "0", Probe::kSettings, {}, "listen.trainer"},
      {"rlmesh.trainer.rank", "1", Probe::kSettings, {"trainer.n_gpus_per_node=2"}, "trainer.rank"},
      {"rlmesh.trainer.group_host", "10.1.2.3", Probe::kSettings, {}, "trainer.group_host"},
      {"rlmesh.trainer.group_port", "29611", Probe::kSettings, {}, "trainer.group_port"},
      {"rlmesh.coordinator.address", "localhost:4", Probe::kRefused},
      {"rlmesh.coordinator.port", "1242", Probe::kSettings, {}, "listen.coordinator"},
      {"rlmesh.coordinator.metrics_port", "1243", Probe::kSettings, {}, "listen.coordinator"},
      {"rlmesh.coordinator.cpus", "0", Probe::kSettings, {}, "listen.coordinator"},
      // rlmesh: training loop
      {"rlmesh.weight_sync.transport", "grpc", Probe::kSettings, {}, "trainer.weight_transport"},
      {"rlmesh.weight_sync.bucket_bytes",
       "4096",
       Probe::kSettings,
       {},
       "trainer.weight_bucket_bytes"},
      {"rlmesh.max_staleness", "1", Probe::kCoordinator},
      // Their effects: GenerationEngineTest.NewWeightsMidSequence*, RolloutPoolTest.
      // SamplesFinishedOnNewerWeightsAreKeptOnlyWithPartialRollouts and the e2e
      // GrpoRunTest.PartialRolloutsKeepTheBoundAndTheBooks (a publish mid-generation is a
      // matter of timing, which the coordinator probe's fakes cannot show).
      {"rlmesh.partial_rollout",
       "true",
       Probe::kSettings,
       {"rlmesh.max_staleness=1"},
       "coordinator.partial_rollout"},
      {"rlmesh.rollout.inflight_update",
       "recompute",
       Probe::kSettings,
       {"rlmesh.max_staleness=1", "rlmesh.partial_rollout=true"},
       "rollout.recompute_kv_on_update"},
      {"rlmesh.warmup.sft_steps", "1", Probe::kCoordinator, {}, "sft"},
      {"rlmesh.warmup.lr", "0.5", Probe::kCoordinator, {"rlmesh.warmup.sft_steps=1"}, "sft"},
      {"rlmesh.warmup.batch_size", "3", Probe::kCoordinator, {"rlmesh.warmup.sft_steps=1"}, "sft"},
      {"rlmesh.warmup.target",
       "shuffled_ground_truth",
       Probe::kCoordinator,
       {"rlmesh.warmup.sft_steps=1", "rlmesh.warmup.batch_size=16"},
       "sft"},
      // rlmesh: security
      {"rlmesh.tls.enabled", "true", Probe::kTls},
      {"rlmesh.tls.insecure_plaintext", "true", Probe::kTls, {"rlmesh.host=0.0.0.0"}, "errors"},
      {"rlmesh.tls.cert_file", "$DIR/cert.pem", Probe::kTls, {"rlmesh.tls.enabled=true"}, "errors"},
      {"rlmesh.tls.key_file", "$DIR/key.pem", Probe::kTls, {"rlmesh.tls.enabled=true"}, "errors"},
      {"rlmesh.tls.ca_file", "$DIR/ca.pem", Probe::kTls, {}, "ca_file"},
      {"rlmesh.tls.server_name", "rlmesh.local", Probe::kTls, {}, "server_name"},
      {"rlmesh.rpc.keepalive_s", "3", Probe::kTls, {}, "keepalive_time"},
      {"rlmesh.rpc.keepalive_timeout_s", "2", Probe::kTls, {}, "keepalive_timeout"},
      {"rlmesh.rpc.max_message_bytes", "4194304", Probe::kTls, {}, "max_message_bytes"},
      // rlmesh: model sizes, used when the folder has no config.json
      {"rlmesh.model.architecture",
       "Qwen2ForCausalLM",
       Probe::kDryRun,
       {"actor_rollout_ref.model.path=$DIR/no_model"}},
      {"rlmesh.model.hidden_size",
       "256",
       Probe::kDryRun,
       {"actor_rollout_ref.model.path=$DIR/no_model"}},
      {"rlmesh.model.intermediate_size",
       "704",
       Probe::kDryRun,
       {"actor_rollout_ref.model.path=$DIR/no_model"}},
      {"rlmesh.model.num_hidden_layers",
       "4",
       Probe::kDryRun,
       {"actor_rollout_ref.model.path=$DIR/no_model"}},
      {"rlmesh.model.num_attention_heads",
       "8",
       Probe::kDryRun,
       {"actor_rollout_ref.model.path=$DIR/no_model", "rlmesh.model.num_key_value_heads=8"}},
      {"rlmesh.model.num_key_value_heads",
       "1",
       Probe::kDryRun,
       {"actor_rollout_ref.model.path=$DIR/no_model"}},
      {"rlmesh.model.head_dim",
       "64",
       Probe::kDryRun,
       {"actor_rollout_ref.model.path=$DIR/no_model"}},
      {"rlmesh.model.vocab_size",
       "1000",
       Probe::kDryRun,
       {"actor_rollout_ref.model.path=$DIR/no_model"}},
      {"rlmesh.model.max_position_embeddings",
       "10",
       Probe::kDryRun,
       {"actor_rollout_ref.model.path=$DIR/no_model"}},
      {"rlmesh.model.num_experts",
       "8",
       Probe::kDryRun,
       {"actor_rollout_ref.model.path=$DIR/no_model"}},
      {"rlmesh.model.tie_word_embeddings",
       "true",
       Probe::kDryRun,
       {"actor_rollout_ref.model.path=$DIR/no_model"}},
      // rlmesh: the quickstart's synthetic task
      {"rlmesh.quickstart.task", "reverse_digits", Probe::kCoordinator, {}, "generate"},
      {"rlmesh.quickstart.num_train",
       "5",
       Probe::kCoordinator,
       {"rlmesh.quickstart.task=reverse_digits"},
       "generate"},
      {"rlmesh.quickstart.num_val",
       "3",
       Probe::kCoordinator,
       {"rlmesh.quickstart.task=reverse_digits"},
       "generate"},
      {"rlmesh.quickstart.min_digits",
       "5",
       Probe::kCoordinator,
       {"rlmesh.quickstart.task=reverse_digits"},
       "generate"},
      {"rlmesh.quickstart.max_digits",
       "4",
       Probe::kCoordinator,
       {"rlmesh.quickstart.task=reverse_digits", "rlmesh.quickstart.num_train=100"},
       "generate"},
  };
  return *rows;
}

std::string ReadFileText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Metrics that depend on the clock or the machine, left out of observations.
bool Volatile(const std::string& name) {
  return absl::StrContains(name, "timing") || absl::StrContains(name, "time") ||
         absl::StartsWith(name, "perf/") || absl::StrContains(name, "outside_compute") ||
         absl::StrContains(name, "seconds");
}

class ConfigKeysTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string path = testing::TempDir() + "/rlmesh_config_keys_XXXXXX";
    ASSERT_NE(mkdtemp(path.data()), nullptr);
    dir_ = new std::string(path);
    MakeModel("model", "1");
    MakeModel("model_b", "2");
    // Reward models (…ForSequenceClassification) with the models' tokenizer.
    MakeModel("rm", "3", {"--num-labels", "1"});
    MakeModel("rm_b", "4", {"--num-labels", "1"});
    // Prompts: digits, as the tiny model's tokenizer reads them.
    auto write = [](const std::string& name, const std::vector<std::string>& prompts) {
      std::ofstream out(*dir_ + "/" + name);
      for (size_t i = 0; i < prompts.size(); ++i) {
        out << "{\"data_source\": \"test\", \"ability\": \"other\", \"prompt\": [{\"role\": "
               "\"user\", \"content\": \""
            << prompts[i] << "=\"}], \"question\": [{\"role\": \"user\", \"content\": \"9"
            << prompts[i] << "=\"}], \"reward_model\": {\"ground_truth\": \"" << prompts[i]
            << "\"}}\n";
      }
    };
    write("train.jsonl", {"12", "345", "6789", "10", "2", "31", "456", "7"});
    write("val.jsonl", {"21", "543"});
    write("train_b.jsonl", {"99", "888", "7777", "66", "5", "44", "333", "22"});
    std::ofstream(*dir_ + "/meminfo") << "MemTotal:       8388608 kB\n";
    // A verl reward file: compute_score gives 0.5 (times its reward_kwargs' scale) to
    // everything, quarter 0.25.
    std::ofstream(*dir_ + "/reward_file.py")
        << "def compute_score(data_source, solution_str, ground_truth, extra_info=None,\n"
           "                  scale=1.0):\n"
           "    return {'score': 0.5 * scale}\n\n"
           "def quarter(data_source, solution_str, ground_truth, extra_info=None):\n"
           "    return 0.25\n";
  }
  static void TearDownTestSuite() { delete dir_; }

  static void MakeModel(const std::string& name, const std::string& seed,
                        std::vector<std::string> extra = {}) {
    process::SubprocessOptions options;
    options.argv = {std::string(RLMESH_TEST_BUILD_DIR) + "/bin/rlmesh",
                    "make-tiny-model",
                    "--arch",
                    "llama",
                    "--out",
                    *dir_ + "/" + name,
                    "--hidden",
                    "32",
                    "--layers",
                    "2",
                    "--heads",
                    "2",
                    "--kv-heads",
                    "2",
                    "--intermediate",
                    "64",
                    "--max-position",
                    "64",
                    "--seed",
                    seed};
    options.argv.insert(options.argv.end(), extra.begin(), extra.end());
    options.log_path = *dir_ + "/" + name + ".log";
    auto p = process::Subprocess::Start(options);
    ASSERT_TRUE(p.ok()) << p.status();
    const auto status = (*p)->Wait(absl::Minutes(2));
    ASSERT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << "make-tiny-model failed; see " << options.log_path;
  }

  // The base every row starts from: the quickstart's shape on the tiny model, with data
  // files, two steps that validate and save, and fake peers for the coordinator.
  static std::vector<std::string> Base() {
    const std::string& d = *dir_;
    return {"data.train_files=[" + d + "/train.jsonl]",
            "data.val_files=[" + d + "/val.jsonl]",
            "data.train_batch_size=4",
            "data.max_prompt_length=8",
            "data.max_response_length=4",
            "actor_rollout_ref.model.path=" + d + "/model",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.optim.lr=0.001",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.max_num_seqs=8",
            "actor_rollout_ref.rollout.max_num_batched_tokens=64",
            "trainer.total_epochs=1",
            "trainer.total_training_steps=2",
            "trainer.test_freq=1",
            "trainer.save_freq=1",
            "trainer.default_local_dir=" + d + "/ckpt",
            "rlmesh.run_dir=" + d + "/run",
            "rlmesh.chat_template=raw",
            "rlmesh.num_threads=1",
            "rlmesh.rollout.addresses=[fake:1]",
            "rlmesh.model.hidden_size=32",
            "rlmesh.model.intermediate_size=64",
            "rlmesh.model.num_hidden_layers=2",
            "rlmesh.model.num_attention_heads=2",
            "rlmesh.model.num_key_value_heads=2",
            "rlmesh.model.vocab_size=18",
            "rlmesh.model.max_position_embeddings=64"};
  }

  static std::string Expand(const std::string& text) {
    return absl::StrReplaceAll(text, {{"$DIR", *dir_}});
  }

  static absl::StatusOr<Config> Load(const Row& row, bool changed) {
    std::vector<std::string> overrides = Base();
    for (const std::string& w : row.with) overrides.push_back(Expand(w));
    if (changed) overrides.push_back(row.key + "=" + Expand(row.value));
    return config::LoadConfigFromString("{}", overrides, "base");
  }

  static config::DryRunResult DryRun(const Config& c) {
    config::DryRunOptions options;
    options.print_config = false;
    options.meminfo_path = *dir_ + "/meminfo";
    return config::RunDryRun(c, options);
  }

  // A fresh folder for one probe run.
  static std::string Fresh(const std::string& what) {
    static int counter = 0;
    const std::string path = absl::StrCat(*dir_, "/probe_", what, "_", ++counter);
    fs::remove_all(path);
    fs::create_directories(path);
    return path;
  }

  static Observations Run(Probe probe, const Config& c) {
    switch (probe) {
      case Probe::kSettings:
        return ProbeSettings(c);
      case Probe::kDryRun:
        return {{"report", DryRun(c).report}};
      case Probe::kTls:
        return ProbeTls(c);
      case Probe::kTrainer:
        return ProbeTrainer(c);
      case Probe::kCoordinator:
        return ProbeCoordinator(c);
      case Probe::kReplica:
        return ProbeReplica(c);
      case Probe::kReference:
        return ProbeReference(c);
      case Probe::kReward:
        return ProbeReward(c);
      case Probe::kRefused:
        break;
    }
    return {};
  }

  static Observations ProbeSettings(const Config& c) {
    Observations out;
    auto settings = config::DeriveSettings(c);
    if (!settings.ok()) return {{"error", settings.status().ToString()}};
    for (absl::string_view line : absl::StrSplit(config::SettingsText(*settings), '\n')) {
      const size_t colon = line.find(": ");
      if (colon == absl::string_view::npos) continue;
      out[std::string(absl::StripLeadingAsciiWhitespace(line.substr(0, colon)))] =
          std::string(line.substr(colon + 2));
    }
    return out;
  }

  static Observations ProbeTls(const Config& c) {
    const rpc::TlsOptions tls = rpc::TlsOptionsFromConfig(c);
    Observations out = {{"enabled", tls.enabled ? "1" : "0"},
                        {"insecure_plaintext", tls.insecure_plaintext ? "1" : "0"},
                        {"cert_file", tls.cert_file},
                        {"key_file", tls.key_file},
                        {"ca_file", tls.ca_file},
                        {"server_name", tls.server_name}};
    rpc::ServiceServerOptions server;
    rpc::ChannelOptions channel;
    rpc::ApplyRpcConfig(c, &server, &channel);
    out["keepalive_time"] =
        absl::StrCat(server.keepalive.time_seconds, " ", channel.keepalive.time_seconds);
    out["keepalive_timeout"] =
        absl::StrCat(server.keepalive.timeout_seconds, " ", channel.keepalive.timeout_seconds);
    out["max_message_bytes"] =
        absl::StrCat(server.max_message_bytes, " ", channel.max_message_bytes);
    out["process_metrics"] =
        absl::StrCat(server.process.device_memory_capacity_bytes, " ", server.process.threads);
    out["errors"] = absl::StrJoin(DryRun(c).error_lines, "\n");
    return out;
  }

  // Eight sequences of the tiny vocabulary: four prompt tokens and three to five response
  // tokens each.
  static std::vector<v1::TokenSequence> Sequences() {
    std::vector<v1::TokenSequence> out;
    for (int b = 0; b < 8; ++b) {
      v1::TokenSequence seq;
      seq.set_id(absl::StrCat("s", b));
      for (int t = 0; t < 4 + 3 + b % 3; ++t) seq.add_token_ids(3 + (b * 5 + t * 3) % 13);
      seq.set_prompt_length(4);
      out.push_back(seq);
    }
    return out;
  }

  static Observations ProbeTrainer(const Config& c) {
    Observations out;
    auto settings = config::DeriveSettings(c);
    if (!settings.ok()) return {{"error", settings.status().ToString()}};
    config::TrainerSettings t = settings->trainer;
    t.checkpoint_dir = Fresh("trainer");
    auto trainer = trainer::Trainer::Create(t);
    if (!trainer.ok()) return {{"error", trainer.status().ToString()}};
    const std::vector<v1::TokenSequence> sequences = Sequences();
    v1::ComputeOldLogProbsRequest old_request;
    for (const auto& s : sequences) *old_request.add_sequences() = s;
    old_request.set_temperature(t.logprob_temperature);
    auto old = (*trainer)->ComputeOldLogProbs(old_request);
    if (!old.ok()) return {{"error", old.status().ToString()}};
    out["old_micro_batches"] = absl::StrCat(old->micro_batches());
    for (int step = 1; step <= 3; ++step) {
      v1::TrainStepRequest train;
      train.set_global_step(step);
      train.set_total_training_steps(10);
      train.set_temperature(t.logprob_temperature);
      for (size_t k = 0; k < sequences.size(); ++k) {
        auto* sample = train.add_samples();
        *sample->mutable_sequence() = sequences[k];
        const auto& logp = old->results(static_cast<int>(k)).logprobs();
        for (int j = 0; j < logp.size(); ++j) {
          sample->add_advantages(k % 2 == 0 ? 1.0f : -1.0f);
          // Off the current policy by +-0.1 nats: ratios of 0.90 and 1.11, inside the default
          // clip range of 0.2 and outside a range of 0.05.
          sample->add_old_logprobs(logp.Get(j) + (j % 2 == 0 ? 0.1f : -0.1f));
          sample->add_ref_logprobs(logp.Get(j) - 0.3f);
        }
        sample->set_group_id(absl::StrCat("g", k / 2));
      }
      auto trained = (*trainer)->TrainStep(train);
      if (!trained.ok()) return {{"error", trained.status().ToString()}};
      for (const auto& [name, value] : trained->metrics()) {
        if (!Volatile(name)) out[absl::StrCat("step", step, "/", name)] = absl::StrCat(value);
      }
      v1::SaveCheckpointRequest save;
      save.set_global_step(step);
      if (auto saved = (*trainer)->SaveCheckpoint(save); !saved.ok()) {
        return {{"error", saved.status().ToString()}};
      }
    }
    auto after = (*trainer)->ComputeOldLogProbs(old_request);
    if (!after.ok()) return {{"error", after.status().ToString()}};
    double sum = 0;
    for (const auto& r : after->results()) {
      for (float v : r.logprobs()) sum += v;
    }
    out["logprobs_after"] = absl::StrFormat("%.9g", sum);
    std::vector<std::string> kept;
    for (const auto& entry : fs::directory_iterator(t.checkpoint_dir)) {
      kept.push_back(entry.path().filename().string());
    }
    std::sort(kept.begin(), kept.end());
    out["checkpoints"] = absl::StrJoin(kept, ",");
    return out;
  }

  static std::string Describe(const v1::GenerateRequest& r) {
    std::string text = r.sampling_params().ShortDebugString();
    for (const auto& p : r.prompts()) {
      absl::StrAppend(&text, " [", absl::StrJoin(p.token_ids(), " "), "]x", p.first_sample_index());
    }
    return text;
  }

  static Observations ProbeCoordinator(const Config& c) {
    Observations out;
    auto settings = config::DeriveSettings(c);
    if (!settings.ok()) return {{"error", settings.status().ToString()}};
    config::CoordinatorSettings s = settings->coordinator;
    s.run_dir = Fresh("run");
    s.checkpoint_dir = Fresh("ckpt");
    s.tensorboard_dir = Fresh("tb");
    auto* trainer = new coordinator::FakeTrainer();
    // A checkpoint at step 0 wherever the coordinator looks, so that resuming runs.
    trainer->checkpoint.emplace();
    auto* reference = new coordinator::FakeReference();
    auto* reward = new coordinator::FakeReward();
    // Sample 0 of every prompt scores 1, the others 0.
    reward->score_fn = [](const v1::RewardItem& item) {
      return absl::EndsWith(item.id(), "/0") ? 1.0 : 0.0;
    };
    std::map<std::string, std::shared_ptr<coordinator::FakeRollout::State>> states;
    for (const std::string& address : s.rollout_addresses) {
      states[address] = std::make_shared<coordinator::FakeRollout::State>();
      states[address]->logprobs = true;  // as real replicas' samples do
    }
    trainer->on_publish = [&states](uint64_t version) {
      for (auto& [address, state] : states) {
        absl::MutexLock lock(&state->mu);
        state->version = state->sample_version = version;
      }
    };
    coordinator::CoordinatorClients clients;
    clients.trainer.reset(trainer);
    clients.reference.reset(reference);
    clients.reward.reset(reward);
    clients.rollout_factory = [&states](const std::string& address) {
      return std::make_unique<coordinator::FakeRollout>(states.at(address));
    };
    prometheus::Registry registry;
    auto coordinator = coordinator::Coordinator::Create(s, std::move(clients), registry);
    if (!coordinator.ok()) return {{"error", coordinator.status().ToString()}};
    const absl::Status run = (*coordinator)->Run();
    out["error"] = run.ToString();
    int calls = 0;
    std::string generate;
    for (auto& [address, state] : states) {
      absl::MutexLock lock(&state->mu);
      calls += static_cast<int>(state->requests.size());
      for (const auto& r : state->requests)
        absl::StrAppend(&generate, address, ": ", Describe(r), "\n");
    }
    out["generate"] = generate;
    out["generate_calls"] = absl::StrCat(calls);
    std::string score;
    for (const auto& r : reward->requests) {
      absl::StrAppend(&score, "timeout ", r.timeout_seconds(),
                      r.use_reward_model() ? " use_reward_model" : "");
      for (const auto& item : r.items())
        absl::StrAppend(&score, " ", item.data_source(), ":", item.prompt());
      absl::StrAppend(&score, "\n");
    }
    out["score"] = score;
    std::string train;
    for (const auto& r : trainer->train_requests) {
      absl::StrAppend(&train, "step ", r.global_step(), " of ", r.total_training_steps(), " t ",
                      r.temperature(), " samples ", r.samples_size(), " adv");
      for (const auto& sample : r.samples()) {
        absl::StrAppend(&train, " ", sample.advantage());
        // Per-token advantages (reinforce_plus_plus's discounted returns).
        if (sample.advantages_size() > 0) {
          absl::StrAppend(&train, "/", absl::StrJoin(sample.advantages(), ","));
        }
      }
      // The rollout correction's weights and rejected tokens, and bypass mode's old log-probs.
      absl::StrAppend(&train, " old_from_rollout ", r.old_logprobs_from_rollout(), " w");
      for (const auto& sample : r.samples()) {
        absl::StrAppend(&train, " [", absl::StrJoin(sample.rollout_is_weights(), ","), "/",
                        absl::StrJoin(sample.old_logprobs(), ","), "/",
                        absl::StrJoin(sample.rejected_tokens(), ","), "]");
      }
      absl::StrAppend(&train, "\n");
    }
    for (const auto& r : trainer->old_requests)
      absl::StrAppend(&train, "old t ", r.temperature(), "\n");
    out["train"] = train;
    out["train_calls"] = absl::StrCat(trainer->train_requests.size());
    std::string sft;
    for (const auto& r : trainer->sft_requests) {
      absl::StrAppend(&sft, "lr ", r.lr(), " n ", r.sequences_size(), ":");
      for (const auto& seq : r.sequences())
        absl::StrAppend(&sft, " ", absl::StrJoin(seq.token_ids(), "."));
      absl::StrAppend(&sft, "\n");
    }
    out["sft"] = sft;
    std::string save;
    for (const auto& r : trainer->save_requests) absl::StrAppend(&save, r.global_step(), " ");
    out["save"] = save;
    std::string load;
    for (const auto& r : trainer->load_requests) absl::StrAppend(&load, "[", r.path(), "]");
    out["load"] = load;
    // metrics.jsonl without what depends on the clock.
    std::string metrics;
    std::ifstream in(fs::path(s.run_dir) / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto record = nlohmann::json::parse(line, nullptr, false);
      if (!record.is_object()) continue;
      for (const auto& [name, value] : record.items()) {
        if (!Volatile(name)) absl::StrAppend(&metrics, name, "=", value.dump(), " ");
      }
      absl::StrAppend(&metrics, "\n");
    }
    out["metrics"] = fs::exists(fs::path(s.run_dir) / "metrics.jsonl") ? metrics : "(no file)";
    out["val_generations"] = ReadFileText(fs::path(s.run_dir) / "val_generations.jsonl");
    // Event files written, by their size class (their names and bytes hold the clock).
    std::string tensorboard;
    if (fs::exists(s.tensorboard_dir)) {
      for (const auto& entry : fs::directory_iterator(s.tensorboard_dir)) {
        absl::StrAppend(&tensorboard, "event file of ",
                        entry.file_size() > 100 ? "records" : "a header", "\n");
      }
    }
    out["tensorboard"] = tensorboard;
    return out;
  }

  static Observations ProbeReplica(const Config& c) {
    Observations out;
    auto settings = config::DeriveSettings(c);
    if (!settings.ok()) return {{"error", settings.status().ToString()}};
    const double memory =
        config::ReplicaMemoryCapacity(c, *dir_ + "/meminfo", "/nonexistent").bytes;
    auto replica = rollout::Replica::Create(rollout::ReplicaOptionsFrom(settings->rollout, memory));
    if (!replica.ok()) return {{"error", replica.status().ToString()}};
    out["slots"] = absl::StrCat((*replica)->slots());
    v1::GenerateRequest request;
    request.set_request_id("probe");
    auto* params = request.mutable_sampling_params();
    params->set_n(2);
    params->set_temperature(0);
    params->set_max_new_tokens(6);
    params->set_seed(1);
    params->set_ignore_eos(true);
    for (int p = 0; p < 4; ++p) {
      auto* prompt = request.add_prompts();
      prompt->set_prompt_id(absl::StrCat("p", p));
      for (int t = 0; t < 10; ++t) prompt->add_token_ids(3 + (p * 7 + t) % 13);
    }
    absl::Mutex mu;
    std::map<std::string, std::string> samples;
    auto submitted = (*replica)->Submit(request, [&](v1::GenerateResponse r) {
      absl::MutexLock lock(&mu);
      samples[absl::StrCat(r.prompt_id(), "/", r.sample_index())] =
          absl::StrJoin(r.sample().token_ids(), " ");
    });
    if (!submitted.ok()) return {{"error", submitted.status().ToString()}};
    {
      absl::MutexLock lock(&mu);
      auto all = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return samples.size() == 8; };
      mu.AwaitWithTimeout(absl::Condition(&all), absl::Minutes(1));
    }
    // The engine finishes its step (and may release the cache) before it delivers.
    const auto stats = (*replica)->EngineStats();
    std::string tokens;
    for (const auto& [id, text] : samples) absl::StrAppend(&tokens, id, ": ", text, "\n");
    out["tokens"] = tokens;
    out["steps"] = absl::StrCat(stats.steps_total);
    out["prefill_forwards"] = absl::StrCat(stats.prefill_forwards_total);
    out["chunked_prefills"] = absl::StrCat(stats.chunked_prefills_total);
    out["kv_cache_bytes_idle"] = absl::StrCat(stats.kv_cache_bytes);
    (*replica)->Shutdown();
    return out;
  }

  static Observations ProbeReference(const Config& c) {
    auto settings = config::DeriveSettings(c);
    if (!settings.ok()) return {{"error", settings.status().ToString()}};
    auto model =
        reference::ReferenceModel::Create(reference::ReferenceOptionsFrom(settings->reference));
    if (!model.ok()) return {{"error", model.status().ToString()}};
    v1::ComputeLogProbsRequest request;
    for (const auto& s : Sequences()) *request.add_sequences() = s;
    request.set_temperature(1.0);
    auto response = (*model)->ComputeLogProbs(request);
    if (!response.ok()) return {{"error", response.status().ToString()}};
    double sum = 0;
    for (const auto& r : response->results()) {
      for (float v : r.logprobs()) sum += v;
    }
    return {{"micro_batches", absl::StrCat(response->micro_batches())},
            {"logprobs", absl::StrFormat("%.6g", sum)}};
  }

  static Observations ProbeReward(const Config& c) {
    auto settings = config::DeriveSettings(c);
    if (!settings.ok()) return {{"error", settings.status().ToString()}};
    std::unique_ptr<reward::RemoteScorer> pool;
    std::string python_workers = "(none)";
    if (!settings->reward.reward_file.empty()) {
      // What rlmesh-reward's main does with custom_reward_function.path.
      reward::PythonRewardPoolOptions options =
          reward::PythonRewardPoolOptionsFrom(settings->reward);
      options.package_dir = std::string(RLMESH_TEST_BUILD_DIR) + "/python";
      auto started = reward::PythonRewardPool::Create(options);
      if (!started.ok()) return {{"error", started.status().ToString()}};
      python_workers = absl::StrCat((*started)->size());
      pool = *std::move(started);
    }
    std::unique_ptr<reward::RewardModelScorer> reward_model;
    if (!settings->reward.reward_model_path.empty()) {
      reward::RewardModelOptions options;
      options.model_path = settings->reward.reward_model_path;
      options.micro_batch_size = settings->reward.reward_model_micro_batch_size;
      auto loaded = reward::RewardModelScorer::Create(options);
      if (!loaded.ok()) return {{"error", loaded.status().ToString()}};
      reward_model = *std::move(loaded);
    }
    reward::RewardModelScorer* model = reward_model.get();
    auto service =
        reward::RewardService::Create(reward::RewardServiceOptionsFrom(settings->reward),
                                      std::move(pool), nullptr, nullptr, std::move(reward_model));
    if (!service.ok()) return {{"error", service.status().ToString()}};
    // A well-formed GSM8K answer that is wrong, and a right one.
    std::vector<reward::RewardItem> items(2);
    items[0] = {"a", "openai/gsm8k", "q", "so #### 5", "4", {}, ""};
    items[1] = {"b", "openai/gsm8k", "q", "so #### 4", "4", {}, ""};
    std::string scores;
    for (const auto& outcome : (*service)->ScoreBatch(items, absl::Now() + absl::Seconds(30))) {
      absl::StrAppend(
          &scores,
          outcome.status.ok() ? absl::StrCat(outcome.result.score) : outcome.status.ToString(),
          " ");
    }
    v1::ScoreRequest three;
    for (const char* id : {"x", "y", "z"}) {
      auto* item = three.add_items();
      item->set_id(id);
      item->set_data_source("openai/gsm8k");
    }
    reward::RewardGrpcOptions grpc;
    grpc.max_batch_size = static_cast<int>(settings->reward.max_batch_size);
    std::string model_scores = "(no reward model)", model_forwards = "(no reward model)";
    if (model != nullptr) {
      model_scores.clear();
      for (const auto& outcome : (*service)->ScoreBatch(items, absl::Now() + absl::Seconds(30),
                                                        /*use_reward_model=*/true)) {
        absl::StrAppend(
            &model_scores,
            outcome.status.ok() ? absl::StrCat(outcome.result.score) : outcome.status.ToString(),
            " ");
      }
      model_forwards = absl::StrCat(model->forwards());
    }
    return {{"scores", scores},
            {"validation", reward::ValidateScoreRequest(three, grpc).ToString()},
            {"python_workers", python_workers},
            {"model_scores", model_scores},
            {"model_forwards", model_forwards}};
  }

  static std::string* dir_;
};

std::string* ConfigKeysTest::dir_ = nullptr;

// Every key has a row and every row a key.
TEST_F(ConfigKeysTest, EveryKeyHasOneRow) {
  std::map<std::string, int> rows;
  for (const Row& row : Rows()) ++rows[row.key];
  for (const auto& spec : config::Schema()) {
    EXPECT_GE(rows[spec.key], 1) << spec.key
                                 << " has no row: add one that shows its effect or "
                                    "its refusal";
  }
  for (const auto& [key, count] : rows) {
    EXPECT_NE(config::FindKey(key), nullptr) << "row of " << key << ", which is no key";
  }
}

class EachKey : public ConfigKeysTest, public ::testing::WithParamInterface<Row> {};

TEST_P(EachKey, ChangesWhatItsHelpSaysOrIsRefusedByName) {
  const Row& row = GetParam();
  const absl::StatusOr<Config> base = Load(row, false);
  ASSERT_TRUE(base.ok()) << base.status();
  const absl::StatusOr<Config> changed = Load(row, true);
  if (row.probe == Probe::kRefused) {
    const std::string mention = row.key + " = ";
    if (!changed.ok()) {
      EXPECT_NE(changed.status().message().find(row.key), std::string::npos) << changed.status();
      return;
    }
    const config::DryRunResult refused = DryRun(*changed);
    bool named = false;
    for (const auto& line : refused.error_lines) named = named || absl::StrContains(line, mention);
    EXPECT_TRUE(named) << row.key << "=" << row.value << " is not refused by name:\n"
                       << refused.report;
    for (const auto& line : DryRun(*base).error_lines) {
      EXPECT_FALSE(absl::StrContains(line, mention)) << "the default is refused too: " << line;
    }
    return;
  }
  ASSERT_TRUE(changed.ok()) << changed.status();
  const Observations before = Run(row.probe, *base);
  const Observations after = Run(row.probe, *changed);
  // A difference must come from the key's effect, not from a run that broke (unless the
  // failure is the effect, as data.truncation=error's).
  if (row.watch != "error") {
    for (const Observations* o : {&before, &after}) {
      auto error = o->find("error");
      EXPECT_TRUE(error == o->end() || error->second == "OK")
          << row.key << ": the " << (o == &before ? "default" : "changed")
          << " run failed: " << error->second;
    }
  }
  if (!row.watch.empty()) {
    ASSERT_TRUE(before.count(row.watch) || after.count(row.watch))
        << "probe " << ProbeName(row.probe) << " has no observation " << row.watch;
    const std::string a = before.count(row.watch) ? before.at(row.watch) : "(absent)";
    const std::string b = after.count(row.watch) ? after.at(row.watch) : "(absent)";
    EXPECT_NE(a, b) << row.key << "=" << row.value << " changed nothing the "
                    << ProbeName(row.probe) << " probe sees in " << row.watch << ": " << a
                    << (before.count("error") ? "\nerror: " + before.at("error") : "");
  } else {
    EXPECT_NE(before, after) << row.key << "=" << row.value << " changed nothing the "
                             << ProbeName(row.probe) << " probe sees";
  }
}

std::string RowName(const ::testing::TestParamInfo<Row>& info) {
  std::string name = absl::StrCat(info.index, "_", info.param.key);
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Schema, EachKey, ::testing::ValuesIn(Rows()), RowName);

}  // namespace
}  // namespace rlmesh::config_keys
