// What each process of a run is configured with, derived from the Config in one place.
//
// Every binary loads the YAML once, runs the dry-run's checks (dry_run.h), calls
// DeriveSettings, hands its own part to its domain objects and drops the Config: no service
// keeps the whole config or re-derives a value another service also needs. Values that more
// than one process must agree on (the temperature of log-prob passes, the largest batch a
// request may carry) are computed once, in SharedSettings, and copied into each part from
// there. Values that vary per call (a step's seed, a validation's sampling) travel in the
// requests instead.
//
// Plain data, no LibTorch: enums stay the config's strings and are parsed (and refused with
// the key's name) by the component that owns them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rlmesh::config {

struct Config;  // config.h; only DeriveSettings reads it

// Where a service listens: rlmesh.host and rlmesh.<service>.port / .metrics_port (a
// binary's --host, --port and --metrics_port flags override them), and the CPUs it runs on.
struct ListenSettings {
  std::string host;
  int64_t port = 0;
  int64_t metrics_port = 0;
  std::vector<int> cpus;  // rlmesh.<service>.cpus; empty = every CPU the process may use
};

// Values more than one process must agree on.
struct SharedSettings {
  std::string model_path;   // actor_rollout_ref.model.path
  std::string dtype;        // rlmesh.dtype: compute dtype of every model copy
  std::string device;       // rlmesh.device
  int64_t num_threads = 0;  // rlmesh.num_threads; 0 = LibTorch's default
  // Logits are divided by it before every log-prob pass (old, reference, the update), as verl
  // divides by actor_rollout_ref.rollout.temperature whether or not the rollout samples.
  double logprob_temperature = 1.0;
  // Sequences of one step: data.train_batch_size x rollout.n; the most a log-prob or train
  // request may carry.
  int64_t step_sequences = 0;
  int64_t max_prompt_length = 0;
  int64_t max_response_length = 0;
  uint64_t seed = 1;  // rlmesh.seed: every draw of the run but the prompt order
};

struct RolloutSettings {
  std::string model_path;
  std::string dtype;
  std::string device;
  int64_t num_threads = 0;
  int64_t max_num_seqs = 0;            // KV-cache slots decoded at once
  int64_t max_model_len = 0;           // prompt + response tokens per slot
  int64_t default_max_new_tokens = 0;  // when a request gives none
  int64_t max_queue = 0;               // samples one Generate call may ask for
  int64_t max_queued_samples = 0;      // samples of every open Generate call together
  int64_t max_num_batched_tokens = 0;  // tokens per engine step
  bool enable_chunked_prefill = true;
  bool free_cache_engine = true;
  double gpu_memory_utilization = 0.5;  // of the replica's memory: weights and KV cache
  std::string engine_name;              // rollout.name, said once at start
  bool enforce_eager = false;           // said once at start: there is no graph capture
  // rlmesh.rollout.inflight_update = recompute: running sequences compute their KV cache again
  // when new weights arrive mid-generation.
  bool recompute_kv_on_update = false;
  // Registration with a coordinator (rlmesh.rollout.register_with); empty = none.
  std::string register_with;
  std::string advertise_address;
  std::string replica_id;
};

struct ReferenceSettings {
  std::string model_path;
  std::string dtype;
  std::string device;
  int64_t num_threads = 0;
  int64_t micro_batch_size = 0;     // sequences per forward
  int64_t max_token_len = 0;        // token budget of a forward instead; 0 = by count
  int64_t max_batch_sequences = 0;  // a request with more is refused
  bool remove_padding = false;      // actor_rollout_ref.model.use_remove_padding: packed forwards
  // actor_rollout_ref.ref.fsdp_config.param_offload: the frozen weights live in host memory
  // and each unit goes to the device for its forward only.
  bool param_offload = false;
  // The reference group (rlmesh.reference.world_size ranks): each rank holds 1/world_size of
  // the weights and scores its share of each batch; rank 0 serves the coordinator.
  int64_t world_size = 1;
  int64_t rank = 0;
  std::string group_host;      // rank 0's address
  int64_t group_port = 29510;  // its store's port
  double timeout_s = 600;      // actor_rollout_ref.nccl_timeout: each collective of the group
};

// actor_rollout_ref.actor.* as the trainer's actor runs it; counts are in samples.
struct ActorSettings {
  int64_t ppo_mini_batch_size = 0;        // ppo_mini_batch_size x rollout.n
  int64_t ppo_micro_batch_size = 0;       // per forward/backward
  int64_t log_prob_micro_batch_size = 0;  // per old-log-prob forward
  // Token budgets of verl's dynamic batch size; 0 = micro-batches by the counts above.
  int64_t ppo_max_token_len = 0;
  int64_t log_prob_max_token_len = 0;
  int64_t ppo_epochs = 1;
  bool shuffle = false;
  bool balance_batch = true;  // trainer.balance_batch: rows to ranks balanced by tokens
  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;
  double clip_ratio_c = 3.0;
  std::string loss_agg_mode;
  // seq-mean-token-sum-norm's divisor: actor.loss_scale_factor, else data.max_response_length.
  double loss_scale_factor = 0;
  // policy_loss.* and the sapo temperatures (grpo::PolicyLossOptions).
  std::string loss_mode = "vanilla";
  double tau_pos = 1.0;
  double tau_neg = 1.05;
  double clip_cov_ratio = 0.0002;
  double clip_cov_lb = 1.0;
  double clip_cov_ub = 5.0;
  double kl_cov_ratio = 0.0002;
  double ppo_kl_coef = 0.1;
  double entropy_coeff = 0;
  bool use_kl_loss = false;
  double kl_loss_coef = 0;
  std::string kl_loss_type;
  double grad_clip = 1.0;
  double lr = 0;
  // The schedule over the run's steps (verl's actor.optim.*).
  std::string lr_scheduler_type;  // "constant" or "cosine"
  int64_t lr_warmup_steps = -1;   // < 0: from the ratio
  double lr_warmup_steps_ratio = 0;
  double min_lr_ratio = 0;
  double num_cycles = 0.5;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0;
};

struct TrainerSettings {
  std::string model_path;
  // The dtype the trainer computes in: fsdp_config.mixed_precision.param_dtype, else
  // rlmesh.dtype ("float32" or "bfloat16"). Below float32 the trainer keeps fp32 master
  // weights and fp32 AdamW state.
  std::string dtype;
  std::string reduce_dtype;  // gradients accumulate in it: "float32" or "bfloat16"
  std::string device;
  int64_t num_threads = 0;
  bool gradient_checkpointing = false;
  bool remove_padding = false;  // actor_rollout_ref.model.use_remove_padding: packed forwards
  uint64_t seed = 1;
  double logprob_temperature = 1.0;
  int64_t max_batch_sequences = 0;
  ActorSettings actor;
  // The supervised warm-up's actor (rlmesh.warmup.*).
  double warmup_lr = 0;
  int64_t warmup_batch_size = 0;
  std::string checkpoint_dir;  // trainer.default_local_dir
  std::optional<int64_t> max_checkpoints_to_keep;
  std::string weight_transport;  // rlmesh.weight_sync.transport
  std::string bind_host;         // where replicas reach the trainer's data plane
  int64_t weight_bucket_bytes = 0;
  double weight_timeout_s = 600;  // actor_rollout_ref.nccl_timeout: a transfer to one replica
                                  // and each collective of the group
  // The trainer group: world_size = trainer.n_gpus_per_node x trainer.nnodes ranks.
  int64_t world_size = 1;
  int64_t ranks_per_node = 1;
  int64_t rank = 0;            // rlmesh.trainer.rank, this process's
  std::string group_host;      // rank 0's address
  int64_t group_port = 29500;  // its store's port
  // Full sharding across the group (actor_rollout_ref.actor.fsdp_config): with world_size > 1
  // and fsdp_size -1 (or world_size) each rank holds 1/W of the parameters, gradients and
  // optimizer state; fsdp_size 1 replicates them (plain data parallelism); fsdp_size F in
  // between shards them over groups of F ranks, replicated W / F times (hybrid sharding).
  // Offloading (also offload_policy) runs the sharded engine at any world size, one rank
  // included.
  bool sharded = false;
  // Ranks one shard group spans when sharded: fsdp_size for hybrid sharding; 0 = all.
  int64_t shard_size = 0;
  bool param_offload = false;
  bool optimizer_offload = false;
};

struct RewardSettings {
  int64_t num_workers = 1;
  double timeout_s = 30;
  double format_score = 0;
  std::string custom_address;                    // empty = built-in scorers
  std::vector<std::string> custom_data_sources;  // routed to custom_address; empty = all
  int64_t max_batch_size = 0;                    // items per Score request
  // custom_reward_function: a Python file scored by a pool of python_workers processes of
  // `python`; empty reward_file = none.
  std::string reward_file;
  std::string reward_function;
  std::string reward_kwargs = "{}";  // a JSON object, added to every call of reward_function
  std::string python;
  int64_t python_workers = 0;
  // reward_model.enable: the reward model's folder, scored in batches of
  // reward_model_micro_batch_size (0 = a request's items at once); empty = none.
  std::string reward_model_path;
  int64_t reward_model_micro_batch_size = 0;
  int64_t num_threads = 0;  // rlmesh.num_threads, for the reward model's LibTorch
};

// The sampling of one kind of generation (training steps or validation).
struct SamplingSettings {
  int64_t n = 1;
  double temperature = 1.0;  // 0 = greedy (do_sample false)
  double top_p = 1.0;
  int64_t top_k = -1;
};

struct CoordinatorSettings {
  std::string model_path;  // for the tokenizer and the chat template
  std::string chat_template;
  // rlmesh.num_threads: LibTorch's threads for the advantages, KL and rollout-correction
  // tensors; 0 = every CPU it may use.
  int64_t num_threads = 0;
  // Data.
  std::vector<std::string> train_files;
  std::vector<std::string> val_files;
  std::string prompt_key;
  std::string reward_fn_key;
  int64_t train_batch_size = 0;
  // DAPO's dynamic sampling (algorithm.filter_groups): rounds of gen_batch_size prompts until
  // train_batch_size groups with a spread in `filter_metric` are in hand; off: gen_batch_size
  // is train_batch_size.
  int64_t gen_batch_size = 0;
  bool filter_groups = false;
  std::string filter_metric;
  int64_t max_num_gen_batches = 0;
  std::optional<int64_t> val_batch_size;  // prompts per validation generation; null = all
  int64_t max_prompt_length = 0;
  std::string truncation;  // data.truncation
  bool filter_overlong_prompts = false;
  int64_t max_response_length = 0;
  bool shuffle = true;
  uint64_t data_seed = 1;  // data.seed: the order of the prompts
  uint64_t seed = 1;       // rlmesh.seed: sampling, warm-up picks, the synthetic task
  // The quickstart's synthetic task; "none" = the files above.
  std::string synthetic_task;
  int64_t synthetic_train = 0;
  int64_t synthetic_val = 0;
  int64_t synthetic_min_digits = 0;
  int64_t synthetic_max_digits = 0;
  // The loop.
  int64_t total_epochs = 1;
  std::optional<int64_t> total_training_steps;
  int64_t test_freq = -1;
  int64_t save_freq = -1;
  bool val_before_train = true;
  bool log_console = true;          // trainer.logger has console: a line per step
  bool log_jsonl = true;            // trainer.logger has jsonl: metrics.jsonl
  bool log_tensorboard = false;     // trainer.logger has tensorboard: event files in ...
  std::string tensorboard_dir;      // ... rlmesh.tensorboard_dir
  int64_t log_val_generations = 0;  // samples logged per validation
  std::string run_dir;
  std::string checkpoint_dir;
  std::string resume_mode;
  std::optional<std::string> resume_from_path;
  int64_t max_staleness = 0;
  // rlmesh.partial_rollout: publish while the generation of later steps runs.
  bool partial_rollout = false;
  // The step.
  SamplingSettings train_sampling;
  SamplingSettings val_sampling;
  double logprob_temperature = 1.0;
  std::string adv_estimator = "grpo";  // algorithm.adv_estimator (verl's names)
  bool norm_adv_by_std = true;
  double gamma = 1.0;  // algorithm.gamma (reinforce_plus_plus)
  // algorithm.rollout_correction.*
  std::optional<std::string> rollout_is;
  double rollout_is_threshold = 2.0;
  std::optional<std::string> rollout_rs;  // rejection sampling's options and bounds
  std::optional<std::string> rollout_rs_threshold;
  bool rollout_is_batch_normalize = false;
  bool bypass_mode = false;
  bool use_kl_loss = false;  // the step fetches reference log-probs
  bool use_kl_in_reward = false;
  std::string kl_penalty;
  std::string kl_ctrl_type;
  double kl_coef = 0;
  double target_kl = 0;
  int64_t kl_horizon = 0;
  double reward_timeout_s = 30;
  // The score of a sample still unscored after the retries; unset: the step stops instead.
  std::optional<double> failed_item_score;
  // reward_model.enable: training samples are scored by the reward model (verl: its score
  // replaces the rule score); validation keeps the scorers.
  bool use_reward_model = false;
  // DAPO's overlong shaping (reward_model.reward_kwargs; max_resp_len resolved).
  bool overlong_enable = false;
  int64_t overlong_len = 0;
  double overlong_penalty_factor = 1.0;
  bool overlong_log = false;
  int64_t overlong_max_resp_len = 0;
  int64_t trainer_devices = 1;  // perf/throughput divides by it
  // The supervised warm-up.
  int64_t warmup_steps = 0;
  double warmup_lr = 0;
  int64_t warmup_batch_size = 0;
  std::string warmup_target;
  // The peers, host:port.
  std::string reward_address;
  std::string reference_address;
  std::string trainer_address;
  // The rollout fleet.
  int64_t max_num_seqs = 0;  // capacity assumed of a listed replica
  int64_t max_samples_per_request = 0;
  std::vector<std::string> rollout_addresses;
  std::string discovery_dns;
  int64_t discovery_port = 0;
  double discovery_interval_s = 10;
  double heartbeat_s = 2;          // status probe of every replica
  double evict_after_s = 300;      // an unanswering replica leaves the pool
  double ready_wait_s = 300;       // a step waits this long for a ready (or unfull) replica
  double keepalive_timeout_s = 5;  // deadline of a probe (rlmesh.rpc.keepalive_timeout_s)
};

// What `rlmesh run` starts.
struct LauncherSettings {
  std::string host;
  std::string run_dir;
  int64_t rollout_replicas = 1;
  int64_t trainer_ranks = 1;         // trainer.n_gpus_per_node x trainer.nnodes processes
  int64_t reference_ranks = 1;       // rlmesh.reference.world_size processes
  int64_t rollout_max_restarts = 0;  // of one dead replica, when rollout_replicas > 1
};

struct Settings {
  SharedSettings shared;
  ListenSettings rollout_listen;
  ListenSettings reward_listen;
  ListenSettings reference_listen;
  ListenSettings trainer_listen;
  ListenSettings coordinator_listen;
  RolloutSettings rollout;
  ReferenceSettings reference;
  TrainerSettings trainer;
  RewardSettings reward;
  CoordinatorSettings coordinator;
  LauncherSettings launcher;
};

// Derives every process's settings from a loaded config. InvalidArgument naming the key for
// a value no process can run with.
absl::StatusOr<Settings> DeriveSettings(const Config& config);

// What each process runs with, one "process.setting: value" line each, as `rlmesh dry-run`
// prints it.
std::string SettingsText(const Settings& settings);

// The rank of a trainer pod of a StatefulSet from its name ("<set>-<ordinal>"), for
// rlmesh.trainer.rank = -1. InvalidArgument naming the pod when the name ends in no ordinal.
absl::StatusOr<int64_t> RankFromPodName(absl::string_view pod_name);

}  // namespace rlmesh::config
