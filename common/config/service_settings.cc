#include "common/config/service_settings.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/config.h"
#include "common/config/value_parse.h"
#include "common/status/status_macros.h"

namespace rlmesh::config {
namespace {

// Where a service is dialed: its address, or rlmesh.host and its port.
std::string Address(const ServiceEndpoint& endpoint, const std::string& host) {
  return endpoint.address.empty() ? absl::StrCat(host, ":", endpoint.port) : endpoint.address;
}

SharedSettings DeriveShared(const Config& c) {
  SharedSettings s;
  s.model_path = c.actor_rollout_ref.model.path;
  s.dtype = c.rlmesh.dtype;
  s.device = c.rlmesh.device;
  s.num_threads = c.rlmesh.num_threads;
  s.logprob_temperature = c.actor_rollout_ref.rollout.temperature;
  s.step_sequences = c.data.train_batch_size * c.actor_rollout_ref.rollout.n;
  s.max_prompt_length = c.data.max_prompt_length;
  s.max_response_length = c.data.max_response_length;
  s.seed = static_cast<uint64_t>(c.rlmesh.seed);
  return s;
}

RolloutSettings DeriveRollout(const Config& c, const SharedSettings& shared) {
  RolloutSettings r;
  r.model_path = shared.model_path;
  r.dtype = shared.dtype;
  r.device = shared.device;
  r.num_threads = shared.num_threads;
  r.max_num_seqs = c.actor_rollout_ref.rollout.max_num_seqs;
  r.max_model_len = c.actor_rollout_ref.rollout.max_model_len.value_or(shared.max_prompt_length +
                                                                       shared.max_response_length);
  r.max_num_batched_tokens = c.actor_rollout_ref.rollout.max_num_batched_tokens;
  r.enable_chunked_prefill = c.actor_rollout_ref.rollout.enable_chunked_prefill;
  r.free_cache_engine = c.actor_rollout_ref.rollout.free_cache_engine;
  r.gpu_memory_utilization = c.actor_rollout_ref.rollout.gpu_memory_utilization;
  r.engine_name = c.actor_rollout_ref.rollout.name;
  r.enforce_eager = c.actor_rollout_ref.rollout.enforce_eager;
  r.recompute_kv_on_update = c.rlmesh.rollout.inflight_update == "recompute";
  r.default_max_new_tokens = shared.max_response_length;
  r.max_queue = c.rlmesh.rollout.max_queue;
  r.max_queued_samples = c.rlmesh.rollout.max_queued_samples;
  r.register_with = c.rlmesh.rollout.register_with;
  r.advertise_address = c.rlmesh.rollout.advertise_address;
  r.replica_id = c.rlmesh.rollout.replica_id;
  return r;
}

// Trainer ranks: verl's per-GPU sizes are per rank, its older global ones are divided by them.
int64_t Ranks(const Config& c) {
  return std::max<int64_t>(1, c.trainer.n_gpus_per_node * c.trainer.nnodes);
}

// A per-device micro-batch: the _per_gpu key, else verl's older global key divided by the
// ranks (as verl's fsdp_workers normalize it), else `fallback`. The dry-run refuses both set.
int64_t PerDevice(const std::optional<int64_t>& per_gpu, const std::optional<int64_t>& global,
                  int64_t ranks, int64_t fallback) {
  if (per_gpu.has_value()) return *per_gpu;
  if (global.has_value()) return std::max<int64_t>(1, *global / ranks);
  return fallback;
}

// The token budget of a log-prob pass: its own keys, defaulting to the actor's (verl's
// oc.select defaults); 0 when it goes by counts.
int64_t LogProbBudget(const std::optional<bool>& use_dynamic,
                      const std::optional<int64_t>& max_token_len, const ActorConfig& actor) {
  if (!use_dynamic.value_or(actor.use_dynamic_bsz)) return 0;
  return max_token_len.value_or(actor.ppo_max_token_len_per_gpu);
}

ReferenceSettings DeriveReference(const Config& c, const SharedSettings& shared,
                                  int64_t actor_micro_batch) {
  const auto& ref = c.actor_rollout_ref.ref;
  ReferenceSettings r;
  r.model_path = shared.model_path;
  r.dtype = shared.dtype;
  r.device = shared.device;
  r.num_threads = shared.num_threads;
  r.micro_batch_size = PerDevice(ref.log_prob_micro_batch_size_per_gpu,
                                 ref.log_prob_micro_batch_size, Ranks(c), actor_micro_batch);
  r.max_token_len = LogProbBudget(ref.log_prob_use_dynamic_bsz, ref.log_prob_max_token_len_per_gpu,
                                  c.actor_rollout_ref.actor);
  r.max_batch_sequences = shared.step_sequences;
  r.param_offload = ref.fsdp_config.param_offload;
  r.remove_padding = c.actor_rollout_ref.model.use_remove_padding;
  r.world_size = c.rlmesh.reference.world_size;
  r.rank = c.rlmesh.reference.rank;
  r.group_host = c.rlmesh.reference.group_host;
  r.group_port = c.rlmesh.reference.group_port;
  r.timeout_s = c.actor_rollout_ref.nccl_timeout;
  return r;
}

ActorSettings DeriveActor(const Config& c) {
  const auto& a = c.actor_rollout_ref.actor;
  const auto& rollout = c.actor_rollout_ref.rollout;
  ActorSettings s;
  s.ppo_mini_batch_size = a.ppo_mini_batch_size * rollout.n;
  const int64_t ranks = Ranks(c);
  s.ppo_micro_batch_size = PerDevice(a.ppo_micro_batch_size_per_gpu, a.ppo_micro_batch_size, ranks,
                                     s.ppo_mini_batch_size / ranks);
  s.log_prob_micro_batch_size =
      PerDevice(rollout.log_prob_micro_batch_size_per_gpu, rollout.log_prob_micro_batch_size, ranks,
                s.ppo_micro_batch_size);
  s.ppo_max_token_len = a.use_dynamic_bsz ? a.ppo_max_token_len_per_gpu : 0;
  s.log_prob_max_token_len =
      LogProbBudget(rollout.log_prob_use_dynamic_bsz, rollout.log_prob_max_token_len_per_gpu, a);
  s.ppo_epochs = a.ppo_epochs;
  s.shuffle = a.shuffle;
  s.balance_batch = c.trainer.balance_batch;
  // verl's fallback: an unset bound takes clip_ratio.
  s.clip_ratio_low = a.clip_ratio_low.value_or(a.clip_ratio);
  s.clip_ratio_high = a.clip_ratio_high.value_or(a.clip_ratio);
  s.clip_ratio_c = a.clip_ratio_c;
  s.loss_agg_mode = a.loss_agg_mode;
  s.loss_scale_factor =
      a.loss_scale_factor.value_or(static_cast<double>(c.data.max_response_length));
  s.loss_mode = a.policy_loss.loss_mode;
  s.tau_pos = a.tau_pos;
  s.tau_neg = a.tau_neg;
  s.clip_cov_ratio = a.policy_loss.clip_cov_ratio;
  s.clip_cov_lb = a.policy_loss.clip_cov_lb;
  s.clip_cov_ub = a.policy_loss.clip_cov_ub;
  s.kl_cov_ratio = a.policy_loss.kl_cov_ratio;
  s.ppo_kl_coef = a.policy_loss.ppo_kl_coef;
  s.entropy_coeff = a.entropy_coeff;
  s.use_kl_loss = a.use_kl_loss;
  s.kl_loss_coef = a.kl_loss_coef;
  s.kl_loss_type = a.kl_loss_type;
  s.grad_clip = a.grad_clip;
  s.lr = a.optim.lr;
  // verl's older warmup_style, when set, names the schedule (its dataclass copies it over
  // lr_scheduler_type); the dry-run refuses the two disagreeing.
  s.lr_scheduler_type = a.optim.warmup_style.value_or(a.optim.lr_scheduler_type);
  s.lr_warmup_steps = a.optim.lr_warmup_steps;
  s.lr_warmup_steps_ratio = a.optim.lr_warmup_steps_ratio;
  s.min_lr_ratio = a.optim.min_lr_ratio;
  s.num_cycles = a.optim.num_cycles;
  s.beta1 = a.optim.betas.at(0);
  s.beta2 = a.optim.betas.at(1);
  s.weight_decay = a.optim.weight_decay;
  return s;
}

// verl's precision names (bf16, fp32, ...) as rlmesh.dtype's ("bfloat16", "float32").
std::string DtypeName(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return "bfloat16";
  if (name == "fp16" || name == "float16") return "float16";
  return "float32";
}

TrainerSettings DeriveTrainer(const Config& c, const SharedSettings& shared) {
  TrainerSettings t;
  const auto& precision = c.actor_rollout_ref.actor.fsdp_config.mixed_precision;
  t.model_path = shared.model_path;
  t.dtype = precision.param_dtype.has_value() ? DtypeName(*precision.param_dtype) : shared.dtype;
  t.reduce_dtype = DtypeName(precision.reduce_dtype.value_or("fp32"));
  t.device = shared.device;
  t.num_threads = shared.num_threads;
  t.gradient_checkpointing = c.actor_rollout_ref.model.enable_gradient_checkpointing;
  t.remove_padding = c.actor_rollout_ref.model.use_remove_padding;
  t.seed = shared.seed;
  t.logprob_temperature = shared.logprob_temperature;
  t.max_batch_sequences = shared.step_sequences;
  t.actor = DeriveActor(c);
  t.warmup_lr = c.rlmesh.warmup.lr;
  t.warmup_batch_size = c.rlmesh.warmup.batch_size;
  t.checkpoint_dir = c.trainer.default_local_dir;
  t.max_checkpoints_to_keep = c.trainer.max_actor_ckpt_to_keep;
  t.weight_transport = c.rlmesh.weight_sync.transport;
  t.bind_host = c.rlmesh.host;
  t.weight_bucket_bytes = c.rlmesh.weight_sync.bucket_bytes;
  t.weight_timeout_s = static_cast<double>(c.actor_rollout_ref.nccl_timeout);
  t.world_size = Ranks(c);
  t.ranks_per_node = c.trainer.n_gpus_per_node;
  t.rank = c.rlmesh.trainer.rank;
  t.group_host = c.rlmesh.trainer.group_host;
  t.group_port = c.rlmesh.trainer.group_port;
  const auto& fsdp = c.actor_rollout_ref.actor.fsdp_config;
  t.param_offload = fsdp.param_offload || fsdp.offload_policy;
  t.optimizer_offload = fsdp.optimizer_offload || fsdp.offload_policy;
  t.sharded = (t.world_size > 1 && fsdp.fsdp_size != 1) || t.param_offload || t.optimizer_offload;
  t.shard_size = fsdp.fsdp_size > 0 ? std::min<int64_t>(fsdp.fsdp_size, t.world_size) : 0;
  return t;
}

RewardSettings DeriveReward(const Config& c) {
  RewardSettings r;
  r.num_workers = c.rlmesh.reward.num_workers;
  r.timeout_s = c.rlmesh.reward.timeout_s;
  r.format_score = c.rlmesh.reward.format_score;
  r.custom_address = c.rlmesh.reward.custom_address;
  r.custom_data_sources = c.rlmesh.reward.custom_data_sources;
  r.max_batch_size = c.rlmesh.reward.max_batch_size;
  r.reward_file = c.custom_reward_function.path.value_or("");
  r.reward_function = c.custom_reward_function.name;
  r.reward_kwargs = c.custom_reward_function.reward_kwargs;
  r.python = c.rlmesh.reward.python;
  r.python_workers = c.rlmesh.reward.python_workers;
  if (c.reward_model.enable) {
    r.reward_model_path = c.reward_model.model.path.value_or("");
    r.reward_model_micro_batch_size = c.reward_model.micro_batch_size_per_gpu.value_or(0);
  }
  r.num_threads = c.rlmesh.num_threads;
  return r;
}

SamplingSettings Sampling(int64_t n, bool do_sample, double temperature, double top_p,
                          int64_t top_k) {
  SamplingSettings s;
  s.n = n;
  s.temperature = do_sample ? temperature : 0.0;
  s.top_p = top_p;
  s.top_k = top_k;
  return s;
}

CoordinatorSettings DeriveCoordinator(const Config& c, const SharedSettings& shared) {
  CoordinatorSettings s;
  s.model_path = shared.model_path;
  s.chat_template = c.rlmesh.chat_template;
  s.num_threads = shared.num_threads;
  s.train_files = c.data.train_files;
  s.val_files = c.data.val_files;
  s.prompt_key = c.data.prompt_key;
  s.reward_fn_key = c.data.reward_fn_key;
  s.train_batch_size = c.data.train_batch_size;
  s.gen_batch_size = c.data.gen_batch_size.value_or(c.data.train_batch_size);
  s.filter_groups = c.algorithm.filter_groups.enable;
  s.filter_metric = c.algorithm.filter_groups.metric.value_or("");
  s.max_num_gen_batches = c.algorithm.filter_groups.max_num_gen_batches;
  s.val_batch_size = c.data.val_batch_size;
  s.max_prompt_length = shared.max_prompt_length;
  s.truncation = c.data.truncation;
  s.filter_overlong_prompts = c.data.filter_overlong_prompts;
  s.max_response_length = shared.max_response_length;
  s.shuffle = c.data.shuffle;
  s.data_seed = static_cast<uint64_t>(c.data.seed);
  s.seed = shared.seed;
  s.synthetic_task = c.rlmesh.quickstart.task;
  s.synthetic_train = c.rlmesh.quickstart.num_train;
  s.synthetic_val = c.rlmesh.quickstart.num_val;
  s.synthetic_min_digits = c.rlmesh.quickstart.min_digits;
  s.synthetic_max_digits = c.rlmesh.quickstart.max_digits;
  s.total_epochs = c.trainer.total_epochs;
  s.total_training_steps = c.trainer.total_training_steps;
  s.test_freq = c.trainer.test_freq;
  s.save_freq = c.trainer.save_freq;
  s.val_before_train = c.trainer.val_before_train;
  const auto& logger = c.trainer.logger;
  s.log_console = std::find(logger.begin(), logger.end(), "console") != logger.end();
  s.log_jsonl = std::find(logger.begin(), logger.end(), "jsonl") != logger.end();
  s.log_tensorboard = std::find(logger.begin(), logger.end(), "tensorboard") != logger.end();
  s.tensorboard_dir = c.rlmesh.tensorboard_dir;
  s.log_val_generations = c.trainer.log_val_generations;
  s.run_dir = c.rlmesh.run_dir;
  s.checkpoint_dir = c.trainer.default_local_dir;
  s.resume_mode = c.trainer.resume_mode;
  s.resume_from_path = c.trainer.resume_from_path;
  s.max_staleness = c.rlmesh.max_staleness;
  s.partial_rollout = c.rlmesh.partial_rollout;
  const auto& rollout = c.actor_rollout_ref.rollout;
  s.train_sampling =
      Sampling(rollout.n, rollout.do_sample, rollout.temperature, rollout.top_p, rollout.top_k);
  const auto& val = rollout.val_kwargs;
  s.val_sampling = Sampling(val.n, val.do_sample, val.temperature, val.top_p, val.top_k);
  s.logprob_temperature = shared.logprob_temperature;
  s.adv_estimator = c.algorithm.adv_estimator;
  s.norm_adv_by_std = c.algorithm.norm_adv_by_std_in_grpo;
  s.gamma = c.algorithm.gamma;
  const auto& correction = c.algorithm.rollout_correction;
  s.rollout_is = correction.rollout_is;
  s.rollout_is_threshold = correction.rollout_is_threshold;
  s.rollout_rs = correction.rollout_rs;
  s.rollout_rs_threshold = correction.rollout_rs_threshold;
  s.rollout_is_batch_normalize = correction.rollout_is_batch_normalize;
  s.bypass_mode = correction.bypass_mode;
  s.use_kl_loss = c.actor_rollout_ref.actor.use_kl_loss;
  s.use_kl_in_reward = c.algorithm.use_kl_in_reward;
  s.kl_penalty = c.algorithm.kl_penalty;
  s.kl_ctrl_type = c.algorithm.kl_ctrl.type;
  s.kl_coef = c.algorithm.kl_ctrl.kl_coef;
  s.target_kl = c.algorithm.kl_ctrl.target_kl;
  s.kl_horizon = c.algorithm.kl_ctrl.horizon;
  s.reward_timeout_s = c.rlmesh.reward.timeout_s;
  s.failed_item_score = c.rlmesh.reward.failed_item_score;
  s.use_reward_model = c.reward_model.enable;
  const auto& overlong = c.reward_model.reward_kwargs.overlong_buffer_cfg;
  s.overlong_enable = overlong.enable;
  s.overlong_len = overlong.len.value_or(0);
  s.overlong_penalty_factor = overlong.penalty_factor;
  s.overlong_log = overlong.log;
  s.overlong_max_resp_len =
      c.reward_model.reward_kwargs.max_resp_len.value_or(c.data.max_response_length);
  // verl divides by every GPU of the run; here by the trainer's devices, the ones the tokens
  // of perf/throughput are trained on (one until the trainer group of issue #13).
  s.trainer_devices = c.trainer.n_gpus_per_node * c.trainer.nnodes;
  s.warmup_steps = c.rlmesh.warmup.sft_steps;
  s.warmup_lr = c.rlmesh.warmup.lr;
  s.warmup_batch_size = c.rlmesh.warmup.batch_size;
  s.warmup_target = c.rlmesh.warmup.target;
  s.reward_address = Address(c.rlmesh.reward, c.rlmesh.host);
  s.reference_address = Address(c.rlmesh.reference, c.rlmesh.host);
  s.trainer_address = Address(c.rlmesh.trainer, c.rlmesh.host);
  s.max_num_seqs = rollout.max_num_seqs;
  s.max_samples_per_request = c.rlmesh.rollout.max_queue;
  s.rollout_addresses = c.rlmesh.rollout.addresses;
  s.heartbeat_s = c.rlmesh.rollout.heartbeat_s;
  s.evict_after_s = c.rlmesh.rollout.evict_after_s;
  s.ready_wait_s = c.rlmesh.rollout.ready_wait_s;
  s.keepalive_timeout_s = c.rlmesh.rpc.keepalive_timeout_s;
  s.discovery_dns = c.rlmesh.rollout.discovery_dns;
  s.discovery_port = c.rlmesh.rollout.port;
  s.discovery_interval_s = c.rlmesh.rollout.discovery_interval_s;
  return s;
}

}  // namespace

absl::StatusOr<Settings> DeriveSettings(const Config& config) {
  Settings s;
  s.shared = DeriveShared(config);
  s.rollout = DeriveRollout(config, s.shared);
  s.trainer = DeriveTrainer(config, s.shared);
  s.reference = DeriveReference(config, s.shared, s.trainer.actor.ppo_micro_batch_size);
  s.reward = DeriveReward(config);
  s.coordinator = DeriveCoordinator(config, s.shared);
  auto listen = [&](const ServiceEndpoint& e, const char* name) -> absl::StatusOr<ListenSettings> {
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(e.cpus);
    if (!cpus.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rlmesh.", name, ".cpus: ", cpus.status().message()));
    }
    return ListenSettings{config.rlmesh.host, e.port, e.metrics_port, *std::move(cpus)};
  };
  ASSIGN_OR_RETURN(s.rollout_listen, listen(config.rlmesh.rollout, "rollout"));
  ASSIGN_OR_RETURN(s.reward_listen, listen(config.rlmesh.reward, "reward"));
  ASSIGN_OR_RETURN(s.reference_listen, listen(config.rlmesh.reference, "reference"));
  ASSIGN_OR_RETURN(s.trainer_listen, listen(config.rlmesh.trainer, "trainer"));
  ASSIGN_OR_RETURN(s.coordinator_listen, listen(config.rlmesh.coordinator, "coordinator"));
  s.launcher.host = config.rlmesh.host;
  s.launcher.run_dir = config.rlmesh.run_dir;
  s.launcher.rollout_replicas = std::max<int64_t>(1, config.rlmesh.rollout.replicas);
  s.launcher.rollout_max_restarts = config.rlmesh.rollout.max_restarts;
  s.launcher.trainer_ranks = s.trainer.world_size;
  s.launcher.reference_ranks = s.reference.world_size;
  return s;
}

namespace {

// Text printed as it is (a JSON object, which reads as YAML).
struct Verbatim {
  std::string text;
};

// Collects "<prefix>.<name>: <value>" lines.
class Lines {
 public:
  explicit Lines(std::string* out) : out_(out) {}
  void Section(const std::string& name) { prefix_ = name; }
  template <typename T>
  void Add(const char* name, const T& value) {
    absl::StrAppend(out_, "  ", prefix_, ".", name, ": ", Text(value), "\n");
  }

 private:
  static std::string Text(const std::string& v) { return absl::StrCat("\"", v, "\""); }
  static std::string Text(const char* v) { return Text(std::string(v)); }
  static std::string Text(const Verbatim& v) { return v.text; }
  static std::string Text(bool v) { return v ? "true" : "false"; }
  static std::string Text(double v) { return absl::StrCat(v); }
  static std::string Text(int64_t v) { return absl::StrCat(v); }
  static std::string Text(uint64_t v) { return absl::StrCat(v); }
  static std::string Text(const std::optional<int64_t>& v) {
    return v.has_value() ? absl::StrCat(*v) : "null";
  }
  static std::string Text(const std::optional<double>& v) {
    return v.has_value() ? absl::StrCat(*v) : "null";
  }
  static std::string Text(const std::optional<std::string>& v) {
    return v.has_value() ? Text(*v) : "null";
  }
  static std::string Text(const std::vector<std::string>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i ? ", " : "", Text(v[i]));
    return out + "]";
  }
  static std::string Text(const SamplingSettings& s) {
    return absl::StrCat("{n: ", s.n, ", temperature: ", s.temperature, ", top_p: ", s.top_p,
                        ", top_k: ", s.top_k, "}");
  }
  static std::string Text(const ListenSettings& l) {
    return absl::StrCat(
        l.host, ":", l.port, " (metrics :", l.metrics_port, ")",
        l.cpus.empty() ? "" : absl::StrCat(" on cpus ", absl::StrJoin(l.cpus, ",")));
  }

  std::string* out_;
  std::string prefix_;
};

}  // namespace

std::string SettingsText(const Settings& s) {
  std::string out;
  Lines l(&out);
  l.Section("listen");
  l.Add("rollout", s.rollout_listen);
  l.Add("reward", s.reward_listen);
  l.Add("reference", s.reference_listen);
  l.Add("trainer", s.trainer_listen);
  l.Add("coordinator", s.coordinator_listen);
  const RolloutSettings& r = s.rollout;
  l.Section("rollout");
  l.Add("model_path", r.model_path);
  l.Add("dtype", r.dtype);
  l.Add("device", r.device);
  l.Add("num_threads", r.num_threads);
  l.Add("engine", r.engine_name);
  l.Add("enforce_eager", r.enforce_eager);
  l.Add("recompute_kv_on_update", r.recompute_kv_on_update);
  l.Add("max_num_seqs", r.max_num_seqs);
  l.Add("max_model_len", r.max_model_len);
  l.Add("default_max_new_tokens", r.default_max_new_tokens);
  l.Add("max_num_batched_tokens", r.max_num_batched_tokens);
  l.Add("enable_chunked_prefill", r.enable_chunked_prefill);
  l.Add("free_cache_engine", r.free_cache_engine);
  l.Add("gpu_memory_utilization", r.gpu_memory_utilization);
  l.Add("max_queue", r.max_queue);
  l.Add("max_queued_samples", r.max_queued_samples);
  l.Add("register_with", r.register_with);
  l.Add("advertise_address", r.advertise_address);
  l.Add("replica_id", r.replica_id);
  const ReferenceSettings& f = s.reference;
  l.Section("reference");
  l.Add("model_path", f.model_path);
  l.Add("dtype", f.dtype);
  l.Add("device", f.device);
  l.Add("num_threads", f.num_threads);
  l.Add("micro_batch_size", f.micro_batch_size);
  l.Add("max_token_len", f.max_token_len);
  l.Add("max_batch_sequences", f.max_batch_sequences);
  l.Add("param_offload", f.param_offload);
  l.Add("remove_padding", f.remove_padding);
  l.Add("world_size", f.world_size);
  l.Add("rank", f.rank);
  l.Add("group_host", f.group_host);
  l.Add("group_port", f.group_port);
  l.Add("timeout_s", f.timeout_s);
  const TrainerSettings& t = s.trainer;
  l.Section("trainer");
  l.Add("model_path", t.model_path);
  l.Add("dtype", t.dtype);
  l.Add("reduce_dtype", t.reduce_dtype);
  l.Add("device", t.device);
  l.Add("num_threads", t.num_threads);
  l.Add("gradient_checkpointing", t.gradient_checkpointing);
  l.Add("remove_padding", t.remove_padding);
  l.Add("seed", t.seed);
  l.Add("logprob_temperature", t.logprob_temperature);
  l.Add("max_batch_sequences", t.max_batch_sequences);
  l.Add("warmup_lr", t.warmup_lr);
  l.Add("warmup_batch_size", t.warmup_batch_size);
  l.Add("checkpoint_dir", t.checkpoint_dir);
  l.Add("max_checkpoints_to_keep", t.max_checkpoints_to_keep);
  l.Add("weight_transport", t.weight_transport);
  l.Add("bind_host", t.bind_host);
  l.Add("weight_bucket_bytes", t.weight_bucket_bytes);
  l.Add("weight_timeout_s", t.weight_timeout_s);
  l.Add("world_size", t.world_size);
  l.Add("ranks_per_node", t.ranks_per_node);
  l.Add("rank", t.rank);
  l.Add("group_host", t.group_host);
  l.Add("group_port", t.group_port);
  l.Add("sharded", t.sharded);
  l.Add("shard_size", t.shard_size);
  l.Add("param_offload", t.param_offload);
  l.Add("optimizer_offload", t.optimizer_offload);
  const ActorSettings& a = t.actor;
  l.Section("trainer.actor");
  l.Add("ppo_mini_batch_size", a.ppo_mini_batch_size);
  l.Add("ppo_micro_batch_size", a.ppo_micro_batch_size);
  l.Add("log_prob_micro_batch_size", a.log_prob_micro_batch_size);
  l.Add("ppo_max_token_len", a.ppo_max_token_len);
  l.Add("log_prob_max_token_len", a.log_prob_max_token_len);
  l.Add("ppo_epochs", a.ppo_epochs);
  l.Add("shuffle", a.shuffle);
  l.Add("balance_batch", a.balance_batch);
  l.Add("clip_ratio_low", a.clip_ratio_low);
  l.Add("clip_ratio_high", a.clip_ratio_high);
  l.Add("clip_ratio_c", a.clip_ratio_c);
  l.Add("loss_agg_mode", a.loss_agg_mode);
  l.Add("loss_scale_factor", a.loss_scale_factor);
  l.Add("loss_mode", a.loss_mode);
  l.Add("tau_pos", a.tau_pos);
  l.Add("tau_neg", a.tau_neg);
  l.Add("clip_cov_ratio", a.clip_cov_ratio);
  l.Add("clip_cov_lb", a.clip_cov_lb);
  l.Add("clip_cov_ub", a.clip_cov_ub);
  l.Add("kl_cov_ratio", a.kl_cov_ratio);
  l.Add("ppo_kl_coef", a.ppo_kl_coef);
  l.Add("entropy_coeff", a.entropy_coeff);
  l.Add("use_kl_loss", a.use_kl_loss);
  l.Add("kl_loss_coef", a.kl_loss_coef);
  l.Add("kl_loss_type", a.kl_loss_type);
  l.Add("grad_clip", a.grad_clip);
  l.Add("lr", a.lr);
  l.Add("lr_scheduler_type", a.lr_scheduler_type);
  l.Add("lr_warmup_steps", a.lr_warmup_steps);
  l.Add("lr_warmup_steps_ratio", a.lr_warmup_steps_ratio);
  l.Add("min_lr_ratio", a.min_lr_ratio);
  l.Add("num_cycles", a.num_cycles);
  l.Add("betas", absl::StrCat("[", a.beta1, ", ", a.beta2, "]"));
  l.Add("weight_decay", a.weight_decay);
  const RewardSettings& w = s.reward;
  l.Section("reward");
  l.Add("num_workers", w.num_workers);
  l.Add("timeout_s", w.timeout_s);
  l.Add("format_score", w.format_score);
  l.Add("custom_address", w.custom_address);
  l.Add("custom_data_sources", w.custom_data_sources);
  l.Add("max_batch_size", w.max_batch_size);
  l.Add("reward_file", w.reward_file);
  l.Add("reward_function", w.reward_function);
  l.Add("reward_kwargs", Verbatim{w.reward_kwargs});
  l.Add("python", w.python);
  l.Add("python_workers", w.python_workers);
  l.Add("reward_model_path", w.reward_model_path);
  l.Add("reward_model_micro_batch_size", w.reward_model_micro_batch_size);
  const CoordinatorSettings& c = s.coordinator;
  l.Section("coordinator");
  l.Add("model_path", c.model_path);
  l.Add("chat_template", c.chat_template);
  l.Add("num_threads", c.num_threads);
  l.Add("train_files", c.train_files);
  l.Add("val_files", c.val_files);
  l.Add("prompt_key", c.prompt_key);
  l.Add("reward_fn_key", c.reward_fn_key);
  l.Add("train_batch_size", c.train_batch_size);
  l.Add("gen_batch_size", c.gen_batch_size);
  l.Add("filter_groups", c.filter_groups);
  l.Add("filter_metric", c.filter_metric);
  l.Add("max_num_gen_batches", c.max_num_gen_batches);
  l.Add("val_batch_size", c.val_batch_size);
  l.Add("max_prompt_length", c.max_prompt_length);
  l.Add("max_response_length", c.max_response_length);
  l.Add("truncation", c.truncation);
  l.Add("filter_overlong_prompts", c.filter_overlong_prompts);
  l.Add("shuffle", c.shuffle);
  l.Add("data_seed", c.data_seed);
  l.Add("seed", c.seed);
  l.Add("synthetic_task", c.synthetic_task);
  l.Add("synthetic_train", c.synthetic_train);
  l.Add("synthetic_val", c.synthetic_val);
  l.Add("synthetic_min_digits", c.synthetic_min_digits);
  l.Add("synthetic_max_digits", c.synthetic_max_digits);
  l.Add("total_epochs", c.total_epochs);
  l.Add("total_training_steps", c.total_training_steps);
  l.Add("test_freq", c.test_freq);
  l.Add("save_freq", c.save_freq);
  l.Add("val_before_train", c.val_before_train);
  l.Add("log_console", c.log_console);
  l.Add("log_jsonl", c.log_jsonl);
  l.Add("log_val_generations", c.log_val_generations);
  l.Add("run_dir", c.run_dir);
  l.Add("log_tensorboard", c.log_tensorboard);
  l.Add("tensorboard_dir", c.tensorboard_dir);
  l.Add("checkpoint_dir", c.checkpoint_dir);
  l.Add("resume_mode", c.resume_mode);
  l.Add("resume_from_path", c.resume_from_path);
  l.Add("train_sampling", c.train_sampling);
  l.Add("val_sampling", c.val_sampling);
  l.Add("logprob_temperature", c.logprob_temperature);
  l.Add("adv_estimator", c.adv_estimator);
  l.Add("norm_adv_by_std", c.norm_adv_by_std);
  l.Add("gamma", c.gamma);
  l.Add("rollout_is", c.rollout_is);
  l.Add("rollout_is_threshold", c.rollout_is_threshold);
  l.Add("rollout_rs", c.rollout_rs);
  l.Add("rollout_rs_threshold", c.rollout_rs_threshold);
  l.Add("rollout_is_batch_normalize", c.rollout_is_batch_normalize);
  l.Add("bypass_mode", c.bypass_mode);
  l.Add("use_kl_loss", c.use_kl_loss);
  l.Add("use_kl_in_reward", c.use_kl_in_reward);
  l.Add("kl_penalty", c.kl_penalty);
  l.Add("kl_ctrl", absl::StrCat(c.kl_ctrl_type, " coef ", c.kl_coef, " target ", c.target_kl,
                                " horizon ", c.kl_horizon));
  l.Add("reward_timeout_s", c.reward_timeout_s);
  l.Add("failed_item_score", c.failed_item_score);
  l.Add("use_reward_model", c.use_reward_model);
  l.Add("overlong_enable", c.overlong_enable);
  l.Add("overlong_len", c.overlong_len);
  l.Add("overlong_penalty_factor", c.overlong_penalty_factor);
  l.Add("overlong_log", c.overlong_log);
  l.Add("overlong_max_resp_len", c.overlong_max_resp_len);
  l.Add("trainer_devices", c.trainer_devices);
  l.Add("warmup_steps", c.warmup_steps);
  l.Add("warmup_lr", c.warmup_lr);
  l.Add("warmup_batch_size", c.warmup_batch_size);
  l.Add("warmup_target", c.warmup_target);
  l.Add("reward_address", c.reward_address);
  l.Add("reference_address", c.reference_address);
  l.Add("trainer_address", c.trainer_address);
  l.Add("max_num_seqs", c.max_num_seqs);
  l.Add("max_samples_per_request", c.max_samples_per_request);
  l.Add("rollout_addresses", c.rollout_addresses);
  l.Add("discovery_dns", c.discovery_dns);
  l.Add("discovery_port", c.discovery_port);
  l.Add("discovery_interval_s", c.discovery_interval_s);
  l.Add("heartbeat_s", c.heartbeat_s);
  l.Add("evict_after_s", c.evict_after_s);
  l.Add("ready_wait_s", c.ready_wait_s);
  l.Add("keepalive_timeout_s", c.keepalive_timeout_s);
  l.Add("max_staleness", c.max_staleness);
  l.Add("partial_rollout", c.partial_rollout);
  l.Section("launcher");
  l.Add("host", s.launcher.host);
  l.Add("run_dir", s.launcher.run_dir);
  l.Add("rollout_replicas", s.launcher.rollout_replicas);
  l.Add("rollout_max_restarts", s.launcher.rollout_max_restarts);
  l.Add("trainer_ranks", s.launcher.trainer_ranks);
  l.Add("reference_ranks", s.launcher.reference_ranks);
  return out;
}

absl::StatusOr<int64_t> RankFromPodName(absl::string_view pod_name) {
  const size_t dash = pod_name.rfind('-');
  int64_t rank = -1;
  if (dash == absl::string_view::npos || !absl::SimpleAtoi(pod_name.substr(dash + 1), &rank) ||
      rank < 0 ||
      pod_name.substr(dash + 1).find_first_not_of("0123456789") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rlmesh.trainer.rank = -1 takes the rank from POD_NAME, a StatefulSet pod's name "
        "ending in -<ordinal>; got \"",
        pod_name, "\""));
  }
  return rank;
}

}  // namespace rlmesh::config
