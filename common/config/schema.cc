// The key table. verl's keys keep verl's names and defaults
// (verl/trainer/config/_generated_ppo_trainer.yaml); where rlmesh departs from a verl default
// the help line says so. Adding a key: one field in config.h, one line here.
#include "common/config/schema.h"

#include <algorithm>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "common/config/edit_distance.h"
#include "common/config/schema_builders.h"

namespace rlmesh::config {
namespace {

using namespace schema_internal;  // NOLINT(google-build-using-namespace): the table's DSL

const std::vector<std::string> kLossAggModes = {"token-mean", "seq-mean-token-sum",
                                                "seq-mean-token-mean", "seq-mean-token-sum-norm"};
const std::vector<std::string> kKlTypes = {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"};

std::vector<KeySpec> BuildSchema() {
  const NumberRange kPositive = AtLeast(1);
  const NumberRange kPort = Between(0, 65535);
  const NumberRange kProbability = Between(0, 1);
  return {
      // data
      StrList(RLMESH_CONFIG_KEY(data.train_files), {}, {},
              "training data, JSONL in verl's schema; empty with rlmesh.quickstart.task set"),
      StrList(RLMESH_CONFIG_KEY(data.val_files), {}, {}, "validation data files"),
      Int(RLMESH_CONFIG_KEY(data.train_batch_size), 1024, kPositive, "prompts per step"),
      OptInt(RLMESH_CONFIG_KEY(data.val_batch_size), kPositive,
             "prompts per validation batch; null = the whole validation set at once"),
      Int(RLMESH_CONFIG_KEY(data.max_prompt_length), 512, kPositive, "prompt tokens, at most"),
      Int(RLMESH_CONFIG_KEY(data.max_response_length), 512, kPositive,
          "response tokens generated, at most"),
      Str(RLMESH_CONFIG_KEY(data.prompt_key), "prompt", "data column holding the prompt"),
      Str(RLMESH_CONFIG_KEY(data.reward_fn_key), "data_source",
          "data column that selects the reward function"),
      Bool(RLMESH_CONFIG_KEY(data.shuffle), true, "shuffle the training prompts each epoch"),
      Int(RLMESH_CONFIG_KEY(data.seed), 1, AtLeast(0), "seed of the prompt shuffling"),
      Enum(RLMESH_CONFIG_KEY(data.truncation), "error", {"error", "left", "right", "middle"},
           "what to do with a prompt longer than max_prompt_length"),
      Bool(RLMESH_CONFIG_KEY(data.filter_overlong_prompts), false,
           "drop prompts longer than max_prompt_length when loading"),

      // actor_rollout_ref.model
      Str(RLMESH_CONFIG_KEY(actor_rollout_ref.model.path), "",
          "Hugging Face model folder (config.json, safetensors, tokenizer.json)"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.model.enable_gradient_checkpointing), true,
           "recompute each layer's activations in the backward pass"),

      // actor_rollout_ref.actor
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.ppo_mini_batch_size), 256, kPositive,
          "prompts per optimizer step (times rollout.n samples)"),
      OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu), kPositive,
             "samples per forward/backward on one device; null = the whole per-device "
             "mini-batch"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.ppo_epochs), 1, kPositive,
          "passes over each step's batch"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.shuffle), false,
           "shuffle the samples between ppo_epochs"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.clip_ratio), 0.2, Above(0),
            "PPO clip range, used where clip_ratio_low/high are not set"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.clip_ratio_low), 0.2, Above(0),
            "ratio clipped below at 1 - clip_ratio_low"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.clip_ratio_high), 0.2, Above(0),
            "ratio clipped above at 1 + clip_ratio_high (DAPO uses 0.28)"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.clip_ratio_c), 3.0, Above(1),
            "dual-clip bound for negative advantages"),
      Enum(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.loss_agg_mode), "token-mean", kLossAggModes,
           "how token losses are aggregated"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.entropy_coeff), 0.0, AtLeast(0),
            "entropy bonus coefficient"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.use_kl_loss), false,
           "add a KL loss against the reference policy (GRPO recipes set true)"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.kl_loss_coef), 0.001, AtLeast(0),
            "weight of the KL loss"),
      Enum(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.kl_loss_type), "low_var_kl", kKlTypes,
           "KL estimator of the KL loss (k1, abs, k2, k3)"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.grad_clip), 1.0, Above(0),
            "gradient-norm clip"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.optim.lr), 1e-6, AtLeast(0),
            "AdamW learning rate"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.optim.weight_decay), 0.01, AtLeast(0),
            "AdamW decoupled weight decay"),
      FloatList(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.optim.betas), {0.9, 0.999}, 2,
                AtLeastBelow(0, 1), "AdamW betas"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.optim.lr_warmup_steps), -1,
          OrSentinel(AtLeast(0), -1, "use lr_warmup_steps_ratio"),
          "linear learning-rate warm-up steps"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.optim.lr_warmup_steps_ratio), 0.0,
            kProbability, "warm-up steps as a fraction of the total steps"),
      Enum(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.optim.lr_scheduler_type), "constant",
           {"constant", "cosine"}, "learning-rate schedule after the warm-up"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.megatron.tensor_model_parallel_size), 1,
          kPositive, "trainer tensor-parallel size"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.megatron.pipeline_model_parallel_size), 1,
          kPositive, "trainer pipeline-parallel size"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.megatron.expert_model_parallel_size), 1,
          kPositive, "trainer expert-parallel size (mixture-of-experts models only)"),

      // actor_rollout_ref.ref
      OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu), kPositive,
             "samples per reference forward on one device; null = the micro-batch "
             "of the actor"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.megatron.tensor_model_parallel_size), 1,
          kPositive, "reference tensor-parallel size (must equal the actor's)"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.megatron.pipeline_model_parallel_size), 1,
          kPositive, "reference pipeline-parallel size (must equal the actor's)"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.megatron.expert_model_parallel_size), 1,
          kPositive, "reference expert-parallel size (must equal the actor's)"),

      // actor_rollout_ref.rollout
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.n), 1, kPositive,
          "samples per prompt (a GRPO group; set > 1)"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.temperature), 1.0, Above(0),
            "sampling temperature (also divides the logits of the log-prob passes)"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.top_p), 1.0, AboveAtMost(0, 1),
            "nucleus sampling mass"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.top_k), -1,
          OrSentinel(kPositive, -1, "no limit"), "sample among the k most likely tokens"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.do_sample), true, "sample (false = greedy)"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.tensor_model_parallel_size), 1, kPositive,
          "rollout tensor-parallel size; must equal the actor's (verl's default is 2, "
          "rlmesh's is 1)"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.max_num_seqs), 256, kPositive,
          "sequences decoded at once per rollout replica (sizes the KV cache)"),
      OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu),
             kPositive,
             "samples per old-log-prob forward on one device; null = the "
             "micro-batch of the actor"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.val_kwargs.temperature), 0.0, AtLeast(0),
            "validation temperature"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.val_kwargs.top_p), 1.0, AboveAtMost(0, 1),
            "validation nucleus mass"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.val_kwargs.top_k), -1,
          OrSentinel(kPositive, -1, "no limit"), "validation top-k"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.val_kwargs.do_sample), false,
           "sample during validation (false = greedy)"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.val_kwargs.n), 1, kPositive,
          "samples per validation prompt"),

      // algorithm
      Enum(RLMESH_CONFIG_KEY(algorithm.adv_estimator), "grpo", {"grpo"},
           "advantage estimator; rlmesh implements grpo (verl's default gae needs a critic)"),
      Bool(RLMESH_CONFIG_KEY(algorithm.norm_adv_by_std_in_grpo), true,
           "divide group advantages by the group std (false = Dr. GRPO)"),
      Bool(RLMESH_CONFIG_KEY(algorithm.use_kl_in_reward), false,
           "subtract a KL penalty from the rewards (no gradient)"),
      Enum(RLMESH_CONFIG_KEY(algorithm.kl_penalty), "kl", kKlTypes,
           "KL estimator of the in-reward penalty"),
      Enum(RLMESH_CONFIG_KEY(algorithm.kl_ctrl.type), "fixed", {"fixed", "adaptive"},
           "in-reward KL coefficient controller"),
      Float(RLMESH_CONFIG_KEY(algorithm.kl_ctrl.kl_coef), 0.001, AtLeast(0),
            "in-reward KL coefficient (initial value for adaptive)"),
      Float(RLMESH_CONFIG_KEY(algorithm.kl_ctrl.target_kl), 0.1, Above(0),
            "adaptive controller's target KL"),
      Int(RLMESH_CONFIG_KEY(algorithm.kl_ctrl.horizon), 10000, kPositive,
          "adaptive controller's horizon in samples"),
      Float(RLMESH_CONFIG_KEY(algorithm.gamma), 1.0, kProbability, "discount factor"),
      Float(RLMESH_CONFIG_KEY(algorithm.lam), 1.0, kProbability, "GAE lambda"),

      // trainer
      Int(RLMESH_CONFIG_KEY(trainer.total_epochs), 30, kPositive, "passes over the prompts"),
      OptInt(RLMESH_CONFIG_KEY(trainer.total_training_steps), kPositive,
             "steps to run; null = total_epochs x steps per epoch"),
      Int(RLMESH_CONFIG_KEY(trainer.save_freq), -1, OrSentinel(kPositive, -1, "never"),
          "checkpoint every this many steps (and at the end)"),
      Int(RLMESH_CONFIG_KEY(trainer.test_freq), -1, OrSentinel(kPositive, -1, "never"),
          "validate every this many steps"),
      Bool(RLMESH_CONFIG_KEY(trainer.val_before_train), true, "validate before the first step"),
      Str(RLMESH_CONFIG_KEY(trainer.project_name), "verl_examples", "project name"),
      Str(RLMESH_CONFIG_KEY(trainer.experiment_name), "gsm8k", "experiment (run) name"),
      StrList(RLMESH_CONFIG_KEY(trainer.logger), {"console", "jsonl"}, {"console", "jsonl"},
              "metric sinks: console line per step, JSONL file in rlmesh.run_dir"),
      Str(RLMESH_CONFIG_KEY(trainer.default_local_dir),
          "checkpoints/${trainer.project_name}/${trainer.experiment_name}", "checkpoint folder"),
      Enum(RLMESH_CONFIG_KEY(trainer.resume_mode), "auto", {"auto", "disable", "resume_path"},
           "auto = latest checkpoint in default_local_dir; resume_path = resume_from_path"),
      OptStr(RLMESH_CONFIG_KEY(trainer.resume_from_path),
             "checkpoint folder (global_step_N) for resume_mode resume_path"),
      OptInt(RLMESH_CONFIG_KEY(trainer.max_actor_ckpt_to_keep), kPositive,
             "checkpoints kept; null = all"),
      Int(RLMESH_CONFIG_KEY(trainer.n_gpus_per_node), 8, kPositive,
          "devices (trainer ranks) per node"),
      Int(RLMESH_CONFIG_KEY(trainer.nnodes), 1, kPositive, "nodes"),

      // reward
      Bool(RLMESH_CONFIG_KEY(reward_model.enable), false,
           "score with a reward model instead of rule-based functions"),
      Enum(RLMESH_CONFIG_KEY(reward_model.reward_manager), "naive", {"naive", "batch"},
           "naive: one call per sample; batch: one call per batch"),
      OptStr(RLMESH_CONFIG_KEY(custom_reward_function.path),
             "program implementing the scoring function; null = the built-in scorers"),
      Str(RLMESH_CONFIG_KEY(custom_reward_function.name), "compute_score",
          "function name in custom_reward_function.path"),

      // rlmesh: process-wide
      Str(RLMESH_CONFIG_KEY(rlmesh.host), "127.0.0.1", "address the services bind and dial"),
      Enum(RLMESH_CONFIG_KEY(rlmesh.chat_template), "auto",
           {"auto", "raw", "chatml", "qwen3", "llama3"},
           "prompt formatting: auto = tokenizer_config.json's chat_template; raw = message text as "
           "is"),
      Str(RLMESH_CONFIG_KEY(rlmesh.run_dir), "runs/${trainer.experiment_name}",
          "folder for logs, metrics and the run's files"),
      Enum(RLMESH_CONFIG_KEY(rlmesh.device), "cpu", {"cpu", "cuda"}, "compute device"),
      Enum(RLMESH_CONFIG_KEY(rlmesh.dtype), "float32", {"float32", "bfloat16"},
           "parameter and activation dtype (bfloat16 keeps fp32 master weights)"),
      Int(RLMESH_CONFIG_KEY(rlmesh.num_threads), 0, AtLeast(0),
          "intra-op CPU threads per process; 0 = all cores"),
      Int(RLMESH_CONFIG_KEY(rlmesh.seed), 1, AtLeast(0), "seed of sampling and initialisation"),
      Float(RLMESH_CONFIG_KEY(rlmesh.device_memory_gb), 0.0, AtLeast(0),
            "memory of one device in GiB for the dry-run; 0 = detect"),

      // rlmesh: services
      Str(RLMESH_CONFIG_KEY(rlmesh.rollout.address), "",
          "rollout listen address; empty = host:port"),
      Int(RLMESH_CONFIG_KEY(rlmesh.rollout.port), 50051, kPort, "rollout gRPC port; 0 = any free"),
      Int(RLMESH_CONFIG_KEY(rlmesh.rollout.metrics_port), 9101, kPort,
          "rollout Prometheus port; 0 = any free"),
      Int(RLMESH_CONFIG_KEY(rlmesh.rollout.replicas), 1, kPositive,
          "rollout replicas started by `rlmesh run`"),
      StrList(RLMESH_CONFIG_KEY(rlmesh.rollout.addresses), {}, {},
              "host:port of already running replicas (instead of starting them)"),
      Str(RLMESH_CONFIG_KEY(rlmesh.rollout.discovery_dns), "",
          "DNS name (headless Service) resolving to the replicas; empty = none"),
      Float(RLMESH_CONFIG_KEY(rlmesh.rollout.discovery_interval_s), 10.0, Above(0),
            "seconds between re-resolutions of rlmesh.rollout.discovery_dns"),
      Str(RLMESH_CONFIG_KEY(rlmesh.rollout.register_with), "",
          "coordinator host:port a replica registers with at start and leaves at shutdown; "
          "empty = none (rlmesh run and DNS discovery add replicas themselves)"),
      Str(RLMESH_CONFIG_KEY(rlmesh.rollout.advertise_address), "",
          "host:port the coordinator and trainer reach this replica at; empty = rlmesh.host "
          "and the bound port"),
      Str(RLMESH_CONFIG_KEY(rlmesh.rollout.replica_id), "",
          "stable replica id when registering (e.g. the pod name); empty = the coordinator "
          "assigns one"),
      Int(RLMESH_CONFIG_KEY(rlmesh.rollout.max_queue), 1024, kPositive,
          "samples (prompts x n) one Generate call may ask of a replica; the coordinator splits larger shares"),
      Str(RLMESH_CONFIG_KEY(rlmesh.reward.address), "", "reward listen address; empty = host:port"),
      Int(RLMESH_CONFIG_KEY(rlmesh.reward.port), 50052, kPort, "reward gRPC port; 0 = any free"),
      Int(RLMESH_CONFIG_KEY(rlmesh.reward.metrics_port), 9102, kPort,
          "reward Prometheus port; 0 = any free"),
      Str(RLMESH_CONFIG_KEY(rlmesh.reward.custom_address), "",
          "host:port of an external RewardService used instead of the built-in one"),
      Float(RLMESH_CONFIG_KEY(rlmesh.reward.timeout_s), 30.0, Above(0),
            "deadline of one scoring call"),
      Float(RLMESH_CONFIG_KEY(rlmesh.reward.format_score), 0.0, AnyNumber(),
            "score of a well-formed but wrong answer"),
      Int(RLMESH_CONFIG_KEY(rlmesh.reward.num_workers), 4, kPositive, "scoring threads"),
      Str(RLMESH_CONFIG_KEY(rlmesh.reference.address), "",
          "reference listen address; empty = host:port"),
      Int(RLMESH_CONFIG_KEY(rlmesh.reference.port), 50053, kPort,
          "reference gRPC port; 0 = any free"),
      Int(RLMESH_CONFIG_KEY(rlmesh.reference.metrics_port), 9103, kPort,
          "reference Prometheus port; 0 = any free"),
      Str(RLMESH_CONFIG_KEY(rlmesh.trainer.address), "",
          "trainer listen address; empty = host:port"),
      Int(RLMESH_CONFIG_KEY(rlmesh.trainer.port), 50054, kPort, "trainer gRPC port; 0 = any free"),
      Int(RLMESH_CONFIG_KEY(rlmesh.trainer.metrics_port), 9104, kPort,
          "trainer Prometheus port; 0 = any free"),
      Str(RLMESH_CONFIG_KEY(rlmesh.coordinator.address), "",
          "coordinator listen address; empty = host:port"),
      Int(RLMESH_CONFIG_KEY(rlmesh.coordinator.port), 50050, kPort,
          "coordinator gRPC port; 0 = any free"),
      Int(RLMESH_CONFIG_KEY(rlmesh.coordinator.metrics_port), 9100, kPort,
          "coordinator Prometheus port; 0 = any free"),

      // rlmesh: training loop
      Enum(RLMESH_CONFIG_KEY(rlmesh.weight_sync.transport), "shm", {"shm", "nccl", "grpc"},
           "how new weights reach the rollout replicas: shm (shared memory on the trainer's host; "
           "replicas elsewhere get them inline), nccl (GPU broadcast), grpc (inline in the RPCs)"),
      Int(RLMESH_CONFIG_KEY(rlmesh.weight_sync.bucket_bytes), 256 << 20, AtLeast(1 << 10),
          "bytes per weight-transfer bucket"),
      Int(RLMESH_CONFIG_KEY(rlmesh.max_staleness), 0, AtLeast(0),
          "policy versions a sample may lag (0 = synchronous on-policy)"),
      Int(RLMESH_CONFIG_KEY(rlmesh.warmup.sft_steps), 0, AtLeast(0),
          "supervised warm-up steps before GRPO"),
      Float(RLMESH_CONFIG_KEY(rlmesh.warmup.lr), 3e-3, Above(0), "warm-up learning rate"),
      Int(RLMESH_CONFIG_KEY(rlmesh.warmup.batch_size), 64, kPositive, "warm-up examples per step"),
      Enum(RLMESH_CONFIG_KEY(rlmesh.warmup.target), "ground_truth",
           {"ground_truth", "shuffled_ground_truth"},
           "warm-up response: the answer, or its characters shuffled (teaches format, not order)"),

      // rlmesh: security
      Bool(RLMESH_CONFIG_KEY(rlmesh.tls.enabled), false, "serve and dial gRPC over TLS"),
      Bool(RLMESH_CONFIG_KEY(rlmesh.tls.insecure_plaintext), false,
           "allow plaintext gRPC on a non-loopback rlmesh.host"),
      Str(RLMESH_CONFIG_KEY(rlmesh.tls.cert_file), "", "PEM certificate chain"),
      Str(RLMESH_CONFIG_KEY(rlmesh.tls.key_file), "", "PEM private key"),
      Str(RLMESH_CONFIG_KEY(rlmesh.tls.ca_file), "",
          "PEM CA bundle to verify peers; set = mutual TLS (servers require client certificates)"),
      Str(RLMESH_CONFIG_KEY(rlmesh.tls.server_name), "",
          "name every server certificate carries; empty = the dialed host"),

      // rlmesh: model sizes when actor_rollout_ref.model.path has no config.json
      Enum(RLMESH_CONFIG_KEY(rlmesh.model.architecture), "LlamaForCausalLM",
           {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}, "model family"),
      Int(RLMESH_CONFIG_KEY(rlmesh.model.hidden_size), 0, AtLeast(0), "model width; 0 = unset"),
      Int(RLMESH_CONFIG_KEY(rlmesh.model.intermediate_size), 0, AtLeast(0), "SwiGLU width"),
      Int(RLMESH_CONFIG_KEY(rlmesh.model.num_hidden_layers), 0, AtLeast(0), "decoder layers"),
      Int(RLMESH_CONFIG_KEY(rlmesh.model.num_attention_heads), 0, AtLeast(0), "query heads"),
      Int(RLMESH_CONFIG_KEY(rlmesh.model.num_key_value_heads), 0, AtLeast(0),
          "key/value heads; 0 = num_attention_heads"),
      Int(RLMESH_CONFIG_KEY(rlmesh.model.head_dim), 0, AtLeast(0),
          "per-head width; 0 = hidden_size / num_attention_heads"),
      Int(RLMESH_CONFIG_KEY(rlmesh.model.vocab_size), 0, AtLeast(0), "vocabulary size"),
      Int(RLMESH_CONFIG_KEY(rlmesh.model.max_position_embeddings), 2048, kPositive,
          "longest sequence the model supports"),
      Int(RLMESH_CONFIG_KEY(rlmesh.model.num_experts), 0, AtLeast(0),
          "experts per MoE layer; 0 = dense"),
      Bool(RLMESH_CONFIG_KEY(rlmesh.model.tie_word_embeddings), false,
           "lm_head shares the embedding matrix"),
      Bool(RLMESH_CONFIG_KEY(rlmesh.offload.param), false,
           "keep trainer parameters and gradients in host memory between uses"),
      Bool(RLMESH_CONFIG_KEY(rlmesh.offload.optimizer), false,
           "keep optimizer state (and fp32 master weights) in host memory"),

      // rlmesh: the quickstart's synthetic task
      Enum(RLMESH_CONFIG_KEY(rlmesh.quickstart.task), "none", {"none", "reverse_digits"},
           "synthetic task generated in place of data files; none = use data.train_files"),
      Int(RLMESH_CONFIG_KEY(rlmesh.quickstart.num_train), 10000, kPositive,
          "synthetic training prompts"),
      Int(RLMESH_CONFIG_KEY(rlmesh.quickstart.num_val), 200, kPositive,
          "synthetic held-out prompts (scored greedily)"),
      Int(RLMESH_CONFIG_KEY(rlmesh.quickstart.min_digits), 3, kPositive, "shortest digit string"),
      Int(RLMESH_CONFIG_KEY(rlmesh.quickstart.max_digits), 6, kPositive, "longest digit string"),
  };
}

std::string LastComponent(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

}  // namespace

const std::vector<KeySpec>& Schema() {
  static const auto* schema = new std::vector<KeySpec>(BuildSchema());
  return *schema;
}

const KeySpec* FindKey(const std::string& key) {
  static const auto* index = [] {
    auto* map = new absl::flat_hash_map<std::string, const KeySpec*>();
    for (const KeySpec& spec : Schema()) (*map)[spec.key] = &spec;
    return map;
  }();
  auto it = index->find(key);
  return it == index->end() ? nullptr : it->second;
}

bool IsSection(const std::string& prefix) {
  static const auto* sections = [] {
    auto* set = new std::set<std::string>();
    for (const KeySpec& spec : Schema()) {
      for (size_t dot = spec.key.find('.'); dot != std::string::npos;
           dot = spec.key.find('.', dot + 1)) {
        set->insert(spec.key.substr(0, dot));
      }
    }
    return set;
  }();
  return sections->count(prefix) > 0;
}

std::optional<std::string> SuggestKey(const std::string& key) {
  const std::string last = LastComponent(key);
  const KeySpec* best = nullptr;
  size_t best_score = 0;
  size_t best_full = 0;
  for (const KeySpec& spec : Schema()) {
    // A typo anywhere shows in the full distance; a right name in the wrong section
    // (actor.temperature for rollout.temperature) shows in the last component's.
    const size_t full = EditDistance(key, spec.key);
    const size_t tail = EditDistance(last, LastComponent(spec.key));
    const size_t score = std::min(full, tail);
    if (best == nullptr || score < best_score || (score == best_score && full < best_full)) {
      best = &spec;
      best_score = score;
      best_full = full;
    }
  }
  // Beyond a third of the name it is no longer a typo of it.
  const size_t limit = std::max<size_t>(2, last.size() / 3);
  if (best == nullptr || best_score > limit) return std::nullopt;
  return best->key;
}

}  // namespace rlmesh::config
