// The rlmesh configuration: one YAML file with verl's key names for what both systems share
// (data.*, actor_rollout_ref.*, algorithm.*, trainer.*, reward_model.*,
// custom_reward_function.*) and an rlmesh.* section for what is ours, plus dotted overrides
// `key=value` typed after it as verl/Hydra users type them.
//
// Every key, its type, default, allowed values and help live in one table (schema.cc); the
// fields below are bound to it there, so a key is added with one struct field and one table
// line. A value-initialised Config holds zeros: obtain defaults from DefaultConfig() or
// LoadConfig*(). Cross-key consistency (batch divisibility, parallel sizes, memory) is
// checked by the dry-run (common/config/dry_run.h), not here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rlmesh::config {

struct MegatronParallel {
  int64_t tensor_model_parallel_size{};
  int64_t pipeline_model_parallel_size{};
  int64_t expert_model_parallel_size{};
};

// The reference's sizes; null = the actor's, as verl defaults them.
struct RefMegatronParallel {
  std::optional<int64_t> tensor_model_parallel_size;
  std::optional<int64_t> pipeline_model_parallel_size;
  std::optional<int64_t> expert_model_parallel_size;
};

struct MixedPrecisionConfig {
  std::optional<std::string> param_dtype;
  std::optional<std::string> reduce_dtype;
  std::optional<std::string> buffer_dtype;
};

struct FsdpConfig {
  bool param_offload{};
  bool optimizer_offload{};
  bool offload_policy{};
  int64_t fsdp_size{};
  MixedPrecisionConfig mixed_precision;
};

struct RefFsdpConfig {
  bool param_offload{};
};

struct DataConfig {
  std::vector<std::string> train_files;
  std::vector<std::string> val_files;
  int64_t train_batch_size{};
  std::optional<int64_t> gen_batch_size;  // prompts per generation round (dynamic sampling)
  std::optional<int64_t> val_batch_size;
  int64_t max_prompt_length{};
  int64_t max_response_length{};
  std::string prompt_key;
  std::string reward_fn_key;
  bool shuffle{};
  int64_t seed{};
  std::string truncation;
  bool filter_overlong_prompts{};
  bool return_raw_chat{};
  std::string image_key;
};

struct ModelPathConfig {
  std::string path;
  bool enable_gradient_checkpointing{};
  bool use_remove_padding{};
  int64_t lora_rank{};
  int64_t lora_alpha{};
  std::string target_modules;
  bool use_shm{};
  bool use_fused_kernels{};
  bool trust_remote_code{};
};

struct OptimConfig {
  double lr{};
  double weight_decay{};
  std::vector<double> betas;
  int64_t lr_warmup_steps{};
  double lr_warmup_steps_ratio{};
  std::string lr_scheduler_type;
  std::optional<std::string> warmup_style;
  double min_lr_ratio{};
  double num_cycles{};
  int64_t total_training_steps{};
};

// actor_rollout_ref.actor.policy_loss (verl's PolicyLossConfig).
struct PolicyLossConfig {
  std::string loss_mode;
  double clip_cov_ratio{};
  double clip_cov_lb{};
  double clip_cov_ub{};
  double kl_cov_ratio{};
  double ppo_kl_coef{};
};

struct ActorConfig {
  std::string strategy;
  int64_t ppo_mini_batch_size{};
  std::optional<int64_t> ppo_micro_batch_size;
  std::optional<int64_t> ppo_micro_batch_size_per_gpu;
  bool use_dynamic_bsz{};
  int64_t ppo_max_token_len_per_gpu{};
  int64_t ppo_epochs{};
  bool shuffle{};
  int64_t ulysses_sequence_parallel_size{};
  bool use_torch_compile{};
  double clip_ratio{};
  std::optional<double> clip_ratio_low;
  std::optional<double> clip_ratio_high;
  double clip_ratio_c{};
  std::string loss_agg_mode;
  std::optional<double> loss_scale_factor;  // seq-mean-token-sum-norm's divisor
  PolicyLossConfig policy_loss;
  double tau_pos{};  // sapo's gate temperatures
  double tau_neg{};
  double entropy_coeff{};
  bool use_kl_loss{};
  double kl_loss_coef{};
  std::string kl_loss_type;
  double grad_clip{};
  OptimConfig optim;
  FsdpConfig fsdp_config;
  MegatronParallel megatron;
};

struct RefConfig {
  std::optional<int64_t> log_prob_micro_batch_size;
  std::optional<int64_t> log_prob_micro_batch_size_per_gpu;
  std::optional<bool> log_prob_use_dynamic_bsz;
  std::optional<int64_t> log_prob_max_token_len_per_gpu;
  int64_t ulysses_sequence_parallel_size{};
  bool use_torch_compile{};
  RefFsdpConfig fsdp_config;
  RefMegatronParallel megatron;
};

struct ValKwargs {
  double temperature{};
  double top_p{};
  int64_t top_k{};
  bool do_sample{};
  int64_t n{};
};

struct RolloutConfig {
  std::string name;
  std::string mode;
  int64_t n{};
  double temperature{};
  double top_p{};
  int64_t top_k{};
  bool do_sample{};
  int64_t tensor_model_parallel_size{};
  int64_t max_num_seqs{};
  double gpu_memory_utilization{};
  int64_t max_num_batched_tokens{};
  bool enable_chunked_prefill{};
  std::optional<int64_t> max_model_len;
  bool free_cache_engine{};
  bool enforce_eager{};
  std::string load_format;
  bool layered_summon{};
  std::optional<int64_t> log_prob_micro_batch_size;
  std::optional<int64_t> log_prob_micro_batch_size_per_gpu;
  std::optional<bool> log_prob_use_dynamic_bsz;
  std::optional<int64_t> log_prob_max_token_len_per_gpu;
  ValKwargs val_kwargs;
};

struct ActorRolloutRefConfig {
  int64_t nccl_timeout{};
  ModelPathConfig model;
  ActorConfig actor;
  RefConfig ref;
  RolloutConfig rollout;
};

struct KlCtrlConfig {
  std::string type;
  double kl_coef{};
  double target_kl{};
  int64_t horizon{};
};

// algorithm.rollout_correction: verl's correction for the gap between the policy that sampled
// (the rollout's log-probs) and the one trained on (docs/grpo.md, "Rollout correction").
struct RolloutCorrectionConfig {
  std::optional<std::string> rollout_is;  // token | sequence | null
  double rollout_is_threshold{};
  bool rollout_is_batch_normalize{};
  std::optional<std::string> rollout_rs;  // refused unless null (rejection sampling)
  std::optional<std::string> rollout_rs_threshold;
  bool bypass_mode{};
  std::string loss_type;
};

// algorithm.filter_groups (DAPO's dynamic sampling).
struct FilterGroupsConfig {
  bool enable{};
  std::optional<std::string> metric;
  int64_t max_num_gen_batches{};
};

struct AlgorithmConfig {
  FilterGroupsConfig filter_groups;
  std::string adv_estimator;
  bool norm_adv_by_std_in_grpo{};
  bool use_kl_in_reward{};
  std::string kl_penalty;
  KlCtrlConfig kl_ctrl;
  double gamma{};
  double lam{};
  RolloutCorrectionConfig rollout_correction;
};

struct TrainerConfig {
  int64_t total_epochs{};
  std::optional<int64_t> total_training_steps;
  int64_t save_freq{};
  int64_t test_freq{};
  bool val_before_train{};
  std::string project_name;
  std::string experiment_name;
  std::vector<std::string> logger;
  std::string default_local_dir;
  std::string resume_mode;
  std::optional<std::string> resume_from_path;
  std::optional<int64_t> max_actor_ckpt_to_keep;
  int64_t n_gpus_per_node{};
  int64_t nnodes{};
  bool balance_batch{};
  int64_t critic_warmup{};
  int64_t log_val_generations{};
};

// reward_model.reward_kwargs.overlong_buffer_cfg (DAPO's reward manager).
struct OverlongBufferConfig {
  bool enable{};
  std::optional<int64_t> len;
  double penalty_factor{};
  bool log{};
};

struct RewardKwargsConfig {
  OverlongBufferConfig overlong_buffer_cfg;
  std::optional<int64_t> max_resp_len;
};

struct RewardModelModelConfig {
  std::optional<std::string> path;
};

struct RewardModelConfig {
  bool enable{};
  std::string reward_manager;
  RewardKwargsConfig reward_kwargs;
  RewardModelModelConfig model;
  std::optional<int64_t> micro_batch_size_per_gpu;
};

struct CustomRewardFunctionConfig {
  std::optional<std::string> path;
  std::string name;
  std::string reward_kwargs;  // a JSON object: keyword arguments of every call
};

// Where one service listens. An empty address means rlmesh.host:port.
struct ServiceEndpoint {
  std::string address;
  int64_t port{};
  int64_t metrics_port{};
  std::string cpus;
};

struct RolloutServiceConfig : ServiceEndpoint {
  int64_t replicas{};
  std::vector<std::string> addresses;
  std::string discovery_dns;
  double discovery_interval_s{};
  int64_t max_queue{};
  std::string register_with;
  std::string advertise_address;
  std::string replica_id;
  int64_t max_queued_samples{};
  double heartbeat_s{};
  double evict_after_s{};
  double ready_wait_s{};
  int64_t max_restarts{};
  std::string inflight_update;
};

struct RewardServiceConfig : ServiceEndpoint {
  std::string custom_address;
  double timeout_s{};
  double format_score{};
  int64_t num_workers{};
  int64_t max_batch_size{};
  std::vector<std::string> custom_data_sources;
  std::string python;
  int64_t python_workers{};
  std::optional<double> failed_item_score;
};

struct WeightSyncConfig {
  std::string transport;
  int64_t bucket_bytes{};
};

struct WarmupConfig {
  int64_t sft_steps{};
  double lr{};
  int64_t batch_size{};
  std::string target;
};

// HTTP/2 keepalive of every gRPC connection, both ends.
struct RpcConfig {
  double keepalive_s{};
  double keepalive_timeout_s{};
  int64_t max_message_bytes{};
};

struct TlsConfig {
  bool enabled{};
  bool insecure_plaintext{};
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  std::string server_name;
};

// Model sizes for the dry-run (and make-tiny-model) when no config.json is available.
struct ModelSizeConfig {
  std::string architecture;
  int64_t hidden_size{};
  int64_t intermediate_size{};
  int64_t num_hidden_layers{};
  int64_t num_attention_heads{};
  int64_t num_key_value_heads{};
  int64_t head_dim{};
  int64_t vocab_size{};
  int64_t max_position_embeddings{};
  int64_t num_experts{};
  bool tie_word_embeddings{};
};

// The synthetic task of the quickstart (no data files needed).
struct QuickstartConfig {
  std::string task;
  int64_t num_train{};
  int64_t num_val{};
  int64_t min_digits{};
  int64_t max_digits{};
};

// The reference's endpoint and its group of ranks.
struct ReferenceServiceConfig : ServiceEndpoint {
  int64_t world_size{};
  int64_t rank{};
  std::string group_host;
  int64_t group_port{};
};

// The trainer's endpoint and its group of ranks.
struct TrainerServiceConfig : ServiceEndpoint {
  int64_t rank{};
  std::string group_host;
  int64_t group_port{};
};

struct RlmeshConfig {
  std::string host;
  std::string chat_template;
  std::string run_dir;
  std::string tensorboard_dir;
  std::string device;
  std::string dtype;
  int64_t num_threads{};
  int64_t seed{};
  double device_memory_gb{};
  RolloutServiceConfig rollout;
  RewardServiceConfig reward;
  ReferenceServiceConfig reference;
  TrainerServiceConfig trainer;
  ServiceEndpoint coordinator;
  WeightSyncConfig weight_sync;
  int64_t max_staleness{};
  bool partial_rollout{};
  WarmupConfig warmup;
  RpcConfig rpc;
  TlsConfig tls;
  ModelSizeConfig model;
  QuickstartConfig quickstart;
};

struct Config {
  DataConfig data;
  ActorRolloutRefConfig actor_rollout_ref;
  AlgorithmConfig algorithm;
  TrainerConfig trainer;
  RewardModelConfig reward_model;
  CustomRewardFunctionConfig custom_reward_function;
  RlmeshConfig rlmesh;
};

// Every key at its default, with ${...} references resolved.
Config DefaultConfig();

// Reads the YAML file, then applies `overrides` ("dotted.key=value", value in YAML syntax:
// 8, 3e-4, true, [0.9,0.999], a string) in order, then resolves ${dotted.key} references in
// string values. Errors are InvalidArgument (NotFound for a missing file) and list every
// problem found, one per line: unknown keys with the closest known key, wrong types and
// out-of-range values naming the key and the value, and file:line for values from the file.
absl::StatusOr<Config> LoadConfig(const std::string& yaml_path,
                                  const std::vector<std::string>& overrides);
// The same for YAML text; `source_name` stands for the file name in messages.
absl::StatusOr<Config> LoadConfigFromString(const std::string& yaml_text,
                                            const std::vector<std::string>& overrides,
                                            const std::string& source_name = "<config>");

// The resolved config as YAML, every key in table order; LoadConfigFromString of it yields
// an equal config.
std::string ConfigToYaml(const Config& config);

}  // namespace rlmesh::config
