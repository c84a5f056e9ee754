// The key table. verl's keys keep verl's names and defaults
// (verl/trainer/config/_generated_ppo_trainer.yaml); where rlmesh departs from a verl default
// the help line says so. Adding a key: one field in config.h, one line here.
#include "common/config/schema.h"

#include <algorithm>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/config/edit_distance.h"
#include "common/config/schema_builders.h"
#include "common/grpo/rollout_rs_options.h"

namespace rlmesh::config {
namespace {

using namespace schema_internal;  // NOLINT(google-build-using-namespace): the table's DSL

const std::vector<std::string> kLossAggModes = {"token-mean", "seq-mean-token-sum",
                                                "seq-mean-token-mean", "seq-mean-token-sum-norm"};
// verl's estimators; a trailing "+" takes k2's gradient straight through (verl's "k3+").
const std::vector<std::string> kKlTypes = {"kl",         "k1",  "abs",         "mse", "k2",
                                           "low_var_kl", "k3",  "kl+",         "k1+", "abs+",
                                           "mse+",       "k2+", "low_var_kl+", "k3+"};
const std::vector<std::string> kDtypes = {"bf16", "bfloat16", "fp32", "float32", "fp16", "float16"};

// verl's policy-loss modes (common/grpo/policy_losses.h).
const std::vector<std::string> kLossModes = {"vanilla",  "gspo",   "sapo",     "gpg",
                                             "clip_cov", "kl_cov", "geo_mean", "cispo"};

// `spec` refused unless `on(config)` (only then is it read), except at its default or at
// `also_inert` (YAML; a value of verl's that asks for nothing either); `why` says why.
KeySpec ReadOnlyWhen(KeySpec spec, std::function<bool(const Config&)> on, std::string when,
                     std::function<std::string(const Config&)> why,
                     const char* also_inert = nullptr) {
  std::vector<std::string> inert = {ReadBackText(spec, spec.default_value)};
  if (also_inert != nullptr) inert.push_back(ReadBackText(spec, YAML::Load(also_inert)));
  return RefuseIf(spec,
                  absl::StrCat("any value ", when, "; otherwise the default",
                               also_inert ? absl::StrCat(" or verl's ", also_inert) : ""),
                  [get = spec.get, inert, on, why](const Config& c) -> std::string {
                    if (on(c)) return "";
                    if (std::find(inert.begin(), inert.end(), ValueText(get(c))) != inert.end()) {
                      return "";
                    }
                    return why(c);
                  });
}

// `spec` refused unless `on(config)`, with `why` (a constant) as the reason, and the way out
// for whoever turned the mode off on purpose: the default, which asks for nothing.
KeySpec ReadWhen(KeySpec spec, std::function<bool(const Config&)> on, std::string when,
                 std::string why, const char* also_inert = nullptr) {
  const std::string reason = absl::StrCat(why, "; otherwise leave it at its default, ",
                                          ReadBackText(spec, spec.default_value));
  return ReadOnlyWhen(
      std::move(spec), std::move(on), std::move(when), [reason](const Config&) { return reason; },
      also_inert);
}

KeySpec ReadByKlLoss(KeySpec spec, const char* also_inert = nullptr) {
  return ReadWhen(
      std::move(spec), [](const Config& c) { return c.actor_rollout_ref.actor.use_kl_loss; },
      "with actor_rollout_ref.actor.use_kl_loss",
      "only the KL loss reads it: set actor_rollout_ref.actor.use_kl_loss=true", also_inert);
}

KeySpec ReadByKlInReward(KeySpec spec, const char* also_inert = nullptr) {
  return ReadWhen(
      std::move(spec), [](const Config& c) { return c.algorithm.use_kl_in_reward; },
      "with algorithm.use_kl_in_reward",
      "only the in-reward KL penalty reads it: set algorithm.use_kl_in_reward=true", also_inert);
}

KeySpec ReadByAdaptiveKl(KeySpec spec) {
  return ReadWhen(
      std::move(spec),
      [](const Config& c) {
        return c.algorithm.use_kl_in_reward && c.algorithm.kl_ctrl.type == "adaptive";
      },
      "with algorithm.use_kl_in_reward and kl_ctrl.type adaptive",
      "only the adaptive controller reads it: set algorithm.use_kl_in_reward=true and "
      "algorithm.kl_ctrl.type=adaptive");
}

// The schedule the trainer runs: warmup_style replaces lr_scheduler_type when set.
bool CosineSchedule(const Config& c) {
  const auto& o = c.actor_rollout_ref.actor.optim;
  return o.warmup_style.value_or(o.lr_scheduler_type) == "cosine";
}

KeySpec ReadByCosine(KeySpec spec) {
  return ReadWhen(std::move(spec), CosineSchedule,
                  "with actor_rollout_ref.actor.optim.lr_scheduler_type cosine",
                  "only the cosine schedule reads it: set actor_rollout_ref.actor.optim."
                  "lr_scheduler_type=cosine");
}

KeySpec ReadByWarmup(KeySpec spec) {
  return ReadWhen(
      std::move(spec), [](const Config& c) { return c.rlmesh.warmup.sft_steps > 0; },
      "with rlmesh.warmup.sft_steps > 0",
      "only the supervised warm-up reads it: set rlmesh.warmup.sft_steps > 0");
}

KeySpec ReadByQuickstartTask(KeySpec spec) {
  return ReadWhen(
      std::move(spec), [](const Config& c) { return c.rlmesh.quickstart.task != "none"; },
      "with rlmesh.quickstart.task set",
      "only the synthetic task reads it: set rlmesh.quickstart.task=reverse_digits");
}

KeySpec ReadByRolloutIs(KeySpec spec) {
  return ReadWhen(
      std::move(spec),
      [](const Config& c) { return c.algorithm.rollout_correction.rollout_is.has_value(); },
      "with algorithm.rollout_correction.rollout_is set",
      "only the importance weights read it: set algorithm.rollout_correction.rollout_is to "
      "token or sequence");
}

KeySpec ReadBySampling(KeySpec spec) {
  return ReadWhen(
      std::move(spec), [](const Config& c) { return c.actor_rollout_ref.rollout.do_sample; },
      "with actor_rollout_ref.rollout.do_sample",
      "greedy decoding (actor_rollout_ref.rollout.do_sample=false) does not read it");
}

KeySpec ReadByValSampling(KeySpec spec) {
  return ReadWhen(
      std::move(spec),
      [](const Config& c) { return c.actor_rollout_ref.rollout.val_kwargs.do_sample; },
      "with actor_rollout_ref.rollout.val_kwargs.do_sample",
      "greedy validation (actor_rollout_ref.rollout.val_kwargs.do_sample=false) does not "
      "read it");
}

KeySpec ReadByOverlong(KeySpec spec) {
  return ReadOnlyWhen(
      spec, [](const Config& c) { return c.reward_model.reward_kwargs.overlong_buffer_cfg.enable; },
      "with overlong_buffer_cfg.enable",
      [](const Config&) -> std::string {
        return "only the overlong buffer reads it: set reward_model.reward_kwargs."
               "overlong_buffer_cfg.enable=true with reward_manager=dapo";
      });
}

KeySpec ReadByRewardFile(KeySpec spec) {
  return ReadOnlyWhen(
      spec, [](const Config& c) { return c.custom_reward_function.path.has_value(); },
      "with custom_reward_function.path",
      [](const Config&) -> std::string {
        return "only a reward file reads it: set custom_reward_function.path";
      });
}

KeySpec ReadByRewardModel(KeySpec spec) {
  return ReadOnlyWhen(
      spec, [](const Config& c) { return c.reward_model.enable; }, "with reward_model.enable",
      [](const Config&) -> std::string {
        return "only the reward model reads it: set reward_model.enable=true";
      });
}

KeySpec ReadByFilterGroups(KeySpec spec) {
  return ReadOnlyWhen(
      spec, [](const Config& c) { return c.algorithm.filter_groups.enable; },
      "with algorithm.filter_groups.enable",
      [](const Config&) -> std::string {
        return "only dynamic sampling reads it: set algorithm.filter_groups.enable=true";
      });
}

// `spec` refused where loss_mode is none of `modes` (the only modes that read it; verl's
// functions ignore it silently), but at its default or `verl_default` (the value verl's
// actor.yaml writes, where it differs from ours: a config carrying verl's defaults asks for
// nothing).
KeySpec ReadByLossModes(KeySpec spec, std::vector<std::string> modes,
                        const char* verl_default = nullptr) {
  const std::string list = absl::StrJoin(modes, ", ");
  return ReadOnlyWhen(
      spec,
      [modes](const Config& c) {
        const std::string& mode = c.actor_rollout_ref.actor.policy_loss.loss_mode;
        return std::find(modes.begin(), modes.end(), mode) != modes.end();
      },
      absl::StrCat("with loss_mode ", list),
      [list](const Config& c) -> std::string {
        return absl::StrCat("only loss_mode ", list,
                            " reads it; actor_rollout_ref.actor.policy_loss.loss_mode=",
                            c.actor_rollout_ref.actor.policy_loss.loss_mode, " does not");
      },
      verl_default);
}

std::vector<KeySpec> BuildSchema() {
  const std::vector<std::string> kClipModes = {"vanilla", "gspo", "clip_cov", "geo_mean", "cispo"};
  const NumberRange kPositive = AtLeast(1);
  const NumberRange kPort = Between(0, 65535);
  const NumberRange kProbability = Between(0, 1);
  return {
      // data
      StrList(RLMESH_CONFIG_KEY(data.train_files), {}, {},
              "training data, JSONL in verl's schema; empty with rlmesh.quickstart.task set"),
      StrList(RLMESH_CONFIG_KEY(data.val_files), {}, {}, "validation data files"),
      Int(RLMESH_CONFIG_KEY(data.train_batch_size), 1024, kPositive, "prompts per step"),
      RefuseIf(OptInt(RLMESH_CONFIG_KEY(data.gen_batch_size), kPositive,
                      "prompts per generation round of dynamic sampling "
                      "(algorithm.filter_groups); null = data.train_batch_size"),
               "train_batch_size; any value with algorithm.filter_groups.enable",
               [](const Config& c) -> std::string {
                 if (!c.data.gen_batch_size.has_value() || c.algorithm.filter_groups.enable ||
                     *c.data.gen_batch_size == c.data.train_batch_size) {
                   return "";
                 }
                 return "only dynamic sampling generates rounds of another size than "
                        "data.train_batch_size: set algorithm.filter_groups.enable=true, or "
                        "set data.train_batch_size instead";
               }),
      OptInt(RLMESH_CONFIG_KEY(data.val_batch_size), kPositive,
             "prompts per validation batch; null = the whole validation set at once"),
      Int(RLMESH_CONFIG_KEY(data.max_prompt_length), 512, kPositive, "prompt tokens, at most"),
      Int(RLMESH_CONFIG_KEY(data.max_response_length), 512, kPositive,
          "response tokens generated, at most"),
      Str(RLMESH_CONFIG_KEY(data.prompt_key), "prompt", "data column holding the prompt"),
      Str(RLMESH_CONFIG_KEY(data.reward_fn_key), "data_source",
          "data column that selects the reward function"),
      Bool(RLMESH_CONFIG_KEY(data.shuffle), true, "shuffle the training prompts each epoch"),
      Int(RLMESH_CONFIG_KEY(data.seed), 1, AtLeast(0),
          "seed of the training prompts' order (and of nothing else: rlmesh.seed)"),
      Enum(RLMESH_CONFIG_KEY(data.truncation), "error", {"error", "left", "right", "middle"},
           "a prompt longer than max_prompt_length tokens: error, or keep its last (left), "
           "first (right) or first and last halves (middle) of the tokens"),
      Bool(RLMESH_CONFIG_KEY(data.filter_overlong_prompts), false,
           "drop prompts longer than max_prompt_length tokens (chat template applied) when "
           "loading, train and validation alike; the count is logged once"),
      Only(Bool(RLMESH_CONFIG_KEY(data.return_raw_chat), true,
                "the dataset hands out the prompt's messages and the chat template is applied "
                "afterwards (verl's only behaviour since its dataset refactor)"),
           {"true"}, "the coordinator always applies the chat template to the messages itself"),
      Only(Str(RLMESH_CONFIG_KEY(data.image_key), "images", "column of a row's images"), {"images"},
           "multimodal rows are not supported; the key names a column rlmesh never reads"),

      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.nccl_timeout), 600, kPositive,
          "seconds a weight transfer to a replica (any transport) or a collective operation may "
          "take before it fails"),

      // actor_rollout_ref.model
      Str(RLMESH_CONFIG_KEY(actor_rollout_ref.model.path), "",
          "Hugging Face model folder (config.json, safetensors, tokenizer.json)"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.model.enable_gradient_checkpointing), true,
           "recompute each layer's activations in the backward pass"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.model.use_remove_padding), false,
           "pack each micro-batch of the actor and the reference into one row without padding "
           "(attention within each sequence only); verl's default is true"),
      Only(Int(RLMESH_CONFIG_KEY(actor_rollout_ref.model.lora_rank), 0, AtLeast(0),
               "LoRA rank; 0 = train every weight"),
           {"0"}, "LoRA is not built: the trainer updates every weight"),
      Only(Int(RLMESH_CONFIG_KEY(actor_rollout_ref.model.lora_alpha), 16, AtLeast(0),
               "LoRA scaling"),
           {"16"}, "LoRA is not built"),
      Only(Str(RLMESH_CONFIG_KEY(actor_rollout_ref.model.target_modules), "all-linear",
               "modules LoRA adapts"),
           {"all-linear"}, "LoRA is not built"),
      Only(Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.model.use_shm), false,
                "copy the model to /dev/shm before loading it"),
           {"false"}, "each service memory-maps the model from its folder; nothing is copied"),
      Only(Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.model.use_fused_kernels), false,
                "verl's fused log-prob/entropy kernels"),
           {"false"}, "verl's fused kernels are not built; rlmesh runs its own kernels"),
      Only(Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.model.trust_remote_code), false,
                "run the model folder's own Python code"),
           {"false"}, "rlmesh runs its own Llama, Qwen2 and Qwen3 code, never the folder's"),

      // actor_rollout_ref.actor
      Only(Enum(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.strategy), "fsdp",
                {"fsdp", "fsdp2", "megatron"}, "training engine"),
           {"fsdp", "fsdp2"},
           "rlmesh's trainer is its own data-parallel engine; Megatron is not built"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.ppo_mini_batch_size), 256, kPositive,
          "prompts per optimizer step (times rollout.n samples)"),
      OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.ppo_micro_batch_size), kPositive,
             "verl's older global micro-batch in samples, divided by the trainer ranks into "
             "ppo_micro_batch_size_per_gpu; set one of the two"),
      OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu), kPositive,
             "samples per forward/backward on one device; null = the whole per-device "
             "mini-batch"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.use_dynamic_bsz), false,
           "form micro-batches by a token budget instead of a sample count (verl's dynamic "
           "batch size); also the default of the log-prob passes"),
      ReadWhen(
          Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.ppo_max_token_len_per_gpu), 16384,
              kPositive,
              "token budget (prompt + response) of one micro-batch with use_dynamic_bsz; also "
              "the default budget of the log-prob passes"),
          [](const Config& c) {
            // Read by the actor's dynamic batches, and by a log-prob pass's that has no budget
            // of its own.
            const auto& a = c.actor_rollout_ref;
            auto pass = [&a](const std::optional<bool>& dynamic,
                             const std::optional<int64_t>& budget) {
              return dynamic.value_or(a.actor.use_dynamic_bsz) && !budget.has_value();
            };
            return a.actor.use_dynamic_bsz ||
                   pass(a.ref.log_prob_use_dynamic_bsz, a.ref.log_prob_max_token_len_per_gpu) ||
                   pass(a.rollout.log_prob_use_dynamic_bsz,
                        a.rollout.log_prob_max_token_len_per_gpu);
          },
          "with a dynamic batch size that has no budget of its own",
          "only dynamic batch sizes read it: set actor_rollout_ref.actor.use_dynamic_bsz=true "
          "(or a log-prob pass's log_prob_use_dynamic_bsz without its own budget)"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.ppo_epochs), 1, kPositive,
          "passes over each step's batch"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.shuffle), false,
           "shuffle the samples between ppo_epochs"),
      Only(Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.ulysses_sequence_parallel_size), 1,
               kPositive, "sequence-parallel size"),
           {"1"}, "sequence parallelism is not built"),
      Only(Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.use_torch_compile), false,
                "compile the model with torch.compile (verl's default is true)"),
           {"false"}, "rlmesh runs the model eagerly with its own kernels; nothing is compiled"),
      ReadByLossModes(Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.clip_ratio), 0.2, Above(0),
                            "PPO clip range, used where clip_ratio_low/high are null"),
                      kClipModes),
      ReadByLossModes(
          OptFloat(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.clip_ratio_low), Above(0),
                   "ratio clipped below at 1 - clip_ratio_low; null = clip_ratio (verl's "
                   "default 0.2 here is null, so that clip_ratio alone acts)"),
          kClipModes, "0.2"),
      ReadByLossModes(
          OptFloat(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.clip_ratio_high), Above(0),
                   "ratio clipped above at 1 + clip_ratio_high (DAPO uses 0.28); null = "
                   "clip_ratio"),
          kClipModes, "0.2"),
      ReadByLossModes(Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.clip_ratio_c), 3.0, Above(1),
                            "dual-clip bound for negative advantages"),
                      {"vanilla"}),
      Enum(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.loss_agg_mode), "token-mean", kLossAggModes,
           "how token losses are aggregated (the policy term of gspo and sapo is always "
           "seq-mean-token-mean and geo_mean's a mean over sequences, as in verl; entropy and "
           "KL loss follow this key)"),
      ReadWhen(
          OptFloat(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.loss_scale_factor), Above(0),
                   "the constant seq-mean-token-sum-norm divides the mini-batch's summed "
                   "token losses by (Dr. GRPO); null = data.max_response_length, verl's "
                   "padded response length"),
          [](const Config& c) {
            return c.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-sum-norm";
          },
          "with loss_agg_mode seq-mean-token-sum-norm",
          "only seq-mean-token-sum-norm reads it: set actor_rollout_ref.actor.loss_agg_mode="
          "seq-mean-token-sum-norm"),
      Enum(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.policy_loss.loss_mode), "vanilla", kLossModes,
           "policy loss with verl's names and formulas (docs/grpo.md, \"Policy-loss modes\")"),
      ReadByLossModes(
          Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.policy_loss.clip_cov_ratio), 0.0002,
                Above(0), "clip_cov: share of the valid tokens dropped from the loss"),
          {"clip_cov"}),
      ReadByLossModes(
          Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.policy_loss.clip_cov_lb), 1.0,
                AnyNumber(), "clip_cov: tokens whose covariance is above this may be dropped"),
          {"clip_cov"}),
      ReadByLossModes(
          Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.policy_loss.clip_cov_ub), 5.0,
                AnyNumber(), "clip_cov: tokens whose covariance is below this may be dropped"),
          {"clip_cov"}),
      ReadByLossModes(Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.policy_loss.kl_cov_ratio),
                            0.0002, Above(0),
                            "kl_cov: share of the valid tokens (top covariance) that pay the "
                            "absolute log-ratio penalty"),
                      {"kl_cov"}),
      ReadByLossModes(Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.policy_loss.ppo_kl_coef), 0.1,
                            AtLeast(0), "kl_cov: coefficient of that penalty"),
                      {"kl_cov"}),
      ReadByLossModes(Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.tau_pos), 1.0, Above(0),
                            "sapo: gate temperature for tokens with a positive advantage"),
                      {"sapo"}),
      ReadByLossModes(Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.tau_neg), 1.05, Above(0),
                            "sapo: gate temperature for the other tokens"),
                      {"sapo"}),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.entropy_coeff), 0.0, AtLeast(0),
            "entropy bonus coefficient"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.use_kl_loss), false,
           "add a KL loss against the reference policy (GRPO recipes set true)"),
      ReadByKlLoss(Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.kl_loss_coef), 0.001, AtLeast(0),
                         "weight of the KL loss"),
                   "0.0"),
      ReadByKlLoss(Enum(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.kl_loss_type), "low_var_kl",
                        kKlTypes,
                        "KL estimator of the KL loss (k1, abs, k2, k3); a trailing + keeps the "
                        "value and takes k2's gradient (verl's k3+)")),
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
          "linear learning-rate warm-up steps, from lr 0 at the first step"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.optim.lr_warmup_steps_ratio), 0.0,
            kProbability,
            "warm-up steps as a fraction of the run's steps (truncated), where lr_warmup_steps "
            "is -1"),
      Enum(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.optim.lr_scheduler_type), "constant",
           {"constant", "cosine"}, "learning-rate schedule after the warm-up"),
      RefuseIf(
          OptEnum(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.optim.warmup_style),
                  {"constant", "cosine"},
                  "verl's older name of lr_scheduler_type, which it replaces when set (as verl's "
                  "optimizer config does); null = unset"),
          "constant, cosine or null, agreeing with a lr_scheduler_type that is set",
          [](const Config& c) -> std::string {
            const auto& o = c.actor_rollout_ref.actor.optim;
            return o.warmup_style.has_value() && o.lr_scheduler_type != "constant" &&
                           *o.warmup_style != o.lr_scheduler_type
                       ? absl::StrCat(
                             "it disagrees with actor_rollout_ref.actor.optim."
                             "lr_scheduler_type = ",
                             o.lr_scheduler_type, "; set only lr_scheduler_type")
                       : "";
          }),
      ReadByCosine(Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.optim.min_lr_ratio), 0.0,
                         kProbability, "cosine: the learning rate's floor as a fraction of lr")),
      ReadByCosine(Float(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.optim.num_cycles), 0.5,
                         AtLeast(0),
                         "cosine: cosine periods over the steps after the warm-up (0.5 = one "
                         "descent)")),
      Only(Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.optim.total_training_steps), -1,
               OrSentinel(kPositive, -1, "derived"),
               "the schedule's length; verl fills it in from the trainer"),
           {"-1"},
           "the schedule runs over trainer.total_training_steps (or total_epochs x steps "
           "per epoch); set that instead"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.fsdp_config.param_offload), false,
           "the trainer's parameter and gradient shards live in host memory and only the unit "
           "being computed is on the device; turns on the sharded engine (also at one rank). "
           "A cpu trainer has only host memory: the shards stay where they are"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.fsdp_config.optimizer_offload), false,
           "the fp32 master shards and AdamW state live in host memory and the optimizer steps "
           "there; turns on the sharded engine (also at one rank)"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.fsdp_config.offload_policy), false,
           "FSDP2's CPU offload: both param_offload and optimizer_offload"),
      RefuseIf(Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.fsdp_config.fsdp_size), -1,
                   OrSentinel(kPositive, -1, "every rank"),
                   "ranks one shard group spans: -1 (or the group's size) shards every "
                   "parameter, gradient and AdamW state over all trainer ranks; 1 keeps them "
                   "whole on every rank (plain data parallelism); F in between shards them over "
                   "groups of F consecutive ranks, each group holding the whole policy (hybrid "
                   "sharding: a shard's gradients are summed within its group, then across the "
                   "groups)"),
               "-1 or a divisor of trainer.n_gpus_per_node x trainer.nnodes",
               [](const Config& c) -> std::string {
                 const int64_t size = c.actor_rollout_ref.actor.fsdp_config.fsdp_size;
                 const int64_t ranks = c.trainer.n_gpus_per_node * c.trainer.nnodes;
                 return size > 0 && (size > ranks || ranks % size != 0)
                            ? absl::StrCat("shard groups of ", size, " ranks do not tile the ",
                                           ranks,
                                           " trainer ranks (trainer.n_gpus_per_node x "
                                           "trainer.nnodes); use -1 or a divisor of ",
                                           ranks)
                            : "";
               }),
      RefuseIf(
          OptEnum(
              RLMESH_CONFIG_KEY(actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype),
              kDtypes,
              "dtype the trainer computes in; null = rlmesh.dtype; master weights and AdamW "
              "state stay fp32 either way"),
          "bf16, bfloat16, fp32, float32 or null",
          [](const Config& c) -> std::string {
            const auto& v = c.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype;
            return v.has_value() && (*v == "fp16" || *v == "float16")
                       ? "fp16 computation is not built; use bf16 or fp32"
                       : "";
          }),
      RefuseIf(OptEnum(RLMESH_CONFIG_KEY(
                           actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype),
                       kDtypes, "dtype gradients are accumulated and reduced in; null = fp32"),
               "bf16, bfloat16, fp32, float32 or null",
               [](const Config& c) -> std::string {
                 const auto& v = c.actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype;
                 return v.has_value() && (*v == "fp16" || *v == "float16")
                            ? "fp16 gradients are not built; use fp32 or bf16"
                            : "";
               }),
      Only(OptEnum(
               RLMESH_CONFIG_KEY(actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype),
               kDtypes, "dtype of the model's buffers; null = fp32"),
           {"null", "fp32", "float32"},
           "rlmesh's model has no buffers but its rotary tables, which are always computed in "
           "fp32"),
      Only(Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.megatron.tensor_model_parallel_size), 1,
               kPositive, "trainer tensor-parallel size"),
           {"1"}, "tensor parallelism is not built yet; use 1"),
      Only(Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.megatron.pipeline_model_parallel_size), 1,
               kPositive, "trainer pipeline-parallel size"),
           {"1"}, "pipeline parallelism is not built yet; use 1"),
      Only(Int(RLMESH_CONFIG_KEY(actor_rollout_ref.actor.megatron.expert_model_parallel_size), 1,
               kPositive, "trainer expert-parallel size (mixture-of-experts models only)"),
           {"1"}, "expert parallelism is not built yet (nor mixture-of-experts models); use 1"),

      // actor_rollout_ref.ref
      OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.log_prob_micro_batch_size), kPositive,
             "verl's older global micro-batch of the reference, divided by the ranks; set one "
             "of this and log_prob_micro_batch_size_per_gpu"),
      OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu), kPositive,
             "samples per reference forward on one device; null = the micro-batch "
             "of the actor"),
      OptBool(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.log_prob_use_dynamic_bsz),
              "reference forwards by a token budget; null = actor.use_dynamic_bsz"),
      OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.log_prob_max_token_len_per_gpu), kPositive,
             "token budget of one reference forward; null = actor.ppo_max_token_len_per_gpu"),
      Only(Int(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.ulysses_sequence_parallel_size), 1,
               kPositive, "sequence-parallel size of the reference"),
           {"1"}, "sequence parallelism is not built"),
      Only(Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.use_torch_compile), false,
                "compile the reference with torch.compile"),
           {"false"}, "rlmesh runs the model eagerly with its own kernels; nothing is compiled"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.fsdp_config.param_offload), false,
           "the reference's frozen weights live in host memory and each layer goes to the "
           "device for its forward only (on a cpu reference they stay where they are)"),
      Only(OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.megatron.tensor_model_parallel_size),
                  kPositive, "reference tensor-parallel size; null = the actor's"),
           {"null", "1"}, "tensor parallelism is not built yet; use 1 or null"),
      Only(OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.megatron.pipeline_model_parallel_size),
                  kPositive, "reference pipeline-parallel size; null = the actor's"),
           {"null", "1"}, "pipeline parallelism is not built yet; use 1 or null"),
      Only(OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.ref.megatron.expert_model_parallel_size),
                  kPositive, "reference expert-parallel size; null = the actor's"),
           {"null", "1"}, "expert parallelism is not built yet; use 1 or null"),

      // actor_rollout_ref.rollout
      Only(Enum(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.name), "rlmesh",
                {"rlmesh", "vllm", "sglang", "hf", "trtllm"},
                "inference engine; vllm, sglang and hf are served by rlmesh's own engine with "
                "the same sampling semantics, said once at start"),
           {"rlmesh", "vllm", "sglang", "hf"},
           "TensorRT-LLM's engine options have no "
           "counterpart in rlmesh's engine"),
      Only(Enum(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.mode), "async", {"async", "sync"},
                "rollout as a server (async), verl's only mode"),
           {"async"}, "rlmesh's replicas are servers, as verl's async mode; verl removed sync"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.n), 1, kPositive,
          "samples per prompt (a GRPO group; set > 1)"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.temperature), 1.0, Above(0),
            "sampling temperature (also divides the logits of the log-prob passes)"),
      ReadBySampling(Float(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.top_p), 1.0,
                           AboveAtMost(0, 1), "nucleus sampling mass")),
      ReadBySampling(Int(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.top_k), -1,
                         OrSentinel(kPositive, -1, "no limit"),
                         "sample among the k most likely tokens")),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.do_sample), true, "sample (false = greedy)"),
      Only(Int(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.tensor_model_parallel_size), 1,
               kPositive, "rollout tensor-parallel size (verl's default is 2, rlmesh's is 1)"),
           {"1"}, "tensor parallelism is not built yet; use 1"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.max_num_seqs), 256, kPositive,
          "sequences decoded at once per rollout replica, at most (KV-cache slots)"),
      Float(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.gpu_memory_utilization), 0.5,
            AboveAtMost(0, 1),
            "fraction of the device's memory (on cpu: of the memory limit) a replica's weights "
            "and KV cache may take; fewer slots than max_num_seqs if the cache does not fit"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.max_num_batched_tokens), 8192, kPositive,
          "tokens one engine step processes at most (prefill and decode together)"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.enable_chunked_prefill), true,
           "prefill a prompt longer than the token budget over several steps; false = such a "
           "prompt is refused"),
      OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.max_model_len), kPositive,
             "prompt + response tokens of one sequence; null = data.max_prompt_length + "
             "data.max_response_length"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.free_cache_engine), true,
           "release the KV cache when a replica is idle and allocate it again for the next "
           "generation"),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.enforce_eager), false,
           "accepted either way: rlmesh's engine has no graph capture and always decodes "
           "eagerly (said once at start)"),
      Only(Enum(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.load_format), "auto",
                {"auto", "safetensors", "dummy", "dummy_dtensor", "hf", "pt", "dtensor"},
                "how a replica gets its first weights (verl's default is dummy)"),
           {"auto", "safetensors"},
           "replicas read the model folder's safetensors themselves; use auto or safetensors"),
      Only(Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.layered_summon), false,
                "gather LoRA weights layer by layer for the rollout"),
           {"false"}, "LoRA is not built"),
      OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.log_prob_micro_batch_size), kPositive,
             "verl's older global micro-batch of the old-log-prob pass, divided by the ranks; "
             "set one of this and log_prob_micro_batch_size_per_gpu"),
      OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu),
             kPositive,
             "samples per old-log-prob forward on one device; null = the "
             "micro-batch of the actor"),
      OptBool(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.log_prob_use_dynamic_bsz),
              "old-log-prob forwards by a token budget; null = actor.use_dynamic_bsz"),
      OptInt(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu), kPositive,
             "token budget of one old-log-prob forward; null = actor.ppo_max_token_len_per_gpu"),
      ReadByValSampling(Float(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.val_kwargs.temperature),
                              0.0, AtLeast(0), "validation temperature")),
      ReadByValSampling(Float(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.val_kwargs.top_p), 1.0,
                              AboveAtMost(0, 1), "validation nucleus mass")),
      ReadByValSampling(Int(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.val_kwargs.top_k), -1,
                            OrSentinel(kPositive, -1, "no limit"), "validation top-k")),
      Bool(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.val_kwargs.do_sample), false,
           "sample during validation (false = greedy)"),
      Int(RLMESH_CONFIG_KEY(actor_rollout_ref.rollout.val_kwargs.n), 1, kPositive,
          "samples per validation prompt"),

      // algorithm
      RefuseIf(
          Enum(RLMESH_CONFIG_KEY(algorithm.adv_estimator), "grpo",
               {"grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized", "opo", "gpg",
                "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gae", "remax",
                "optimal_token_baseline", "tir_optimal_token_baseline"},
               "advantage estimator, with verl's names and formulas (docs/grpo.md, \"Advantage "
               "estimators\")"),
          "grpo, grpo_vectorized, grpo_passk (n >= 2), rloo, rloo_vectorized, opo, gpg, "
          "reinforce_plus_plus, reinforce_plus_plus_baseline",
          [](const Config& c) -> std::string {
            const std::string& e = c.algorithm.adv_estimator;
            if (e == "gae") return "gae needs a critic (a value model), which rlmesh does not have";
            if (e == "remax") {
              return "remax needs an extra greedy generation of every prompt as its baseline, "
                     "which the loop does not run yet; use rloo or grpo";
            }
            if (e == "optimal_token_baseline" || e == "tir_optimal_token_baseline") {
              return "the optimal token baseline needs the actor's sum of squared "
                     "probabilities per token, which the trainer does not compute";
            }
            if (e == "grpo_passk" && c.actor_rollout_ref.rollout.n < 2) {
              return "grpo_passk compares the best two samples of a group: set "
                     "actor_rollout_ref.rollout.n >= 2";
            }
            return "";
          }),
      RefuseIf(Bool(RLMESH_CONFIG_KEY(algorithm.filter_groups.enable), false,
                    "DAPO's dynamic sampling: drop the groups whose filter_groups.metric has no "
                    "spread and generate rounds of data.gen_batch_size prompts until "
                    "data.train_batch_size groups are left"),
               "with filter_groups.metric set, in the synchronous loop (rlmesh.max_staleness=0)",
               [](const Config& c) -> std::string {
                 const auto& f = c.algorithm.filter_groups;
                 if (!f.enable) return "";
                 if (!f.metric.has_value()) {
                   return "needs algorithm.filter_groups.metric (acc, score, seq_reward or "
                          "seq_final_reward)";
                 }
                 if (c.rlmesh.max_staleness > 0) {
                   return "dynamic sampling runs in the synchronous loop; set "
                          "rlmesh.max_staleness=0";
                 }
                 if (*f.metric == "seq_final_reward" && c.algorithm.use_kl_in_reward) {
                   return "seq_final_reward with algorithm.use_kl_in_reward needs the reference's "
                          "pass before the filter, which runs after it; use seq_reward";
                 }
                 return "";
               }),
      ReadByFilterGroups(OptEnum(RLMESH_CONFIG_KEY(algorithm.filter_groups.metric),
                                 {"acc", "score", "seq_reward", "seq_final_reward"},
                                 "what must vary within a group for it to be kept: acc and score "
                                 "the scorer's score, seq_reward the score after the overlong "
                                 "shaping, seq_final_reward that minus the in-reward KL")),
      ReadByFilterGroups(Int(RLMESH_CONFIG_KEY(algorithm.filter_groups.max_num_gen_batches), 0,
                             AnyNumber(),
                             "generation rounds a step may take before it fails; <= 0 = no "
                             "limit")),
      RefuseIf(Bool(RLMESH_CONFIG_KEY(algorithm.norm_adv_by_std_in_grpo), true,
                    "divide group advantages by the group std (false = Dr. GRPO); read by grpo "
                    "and grpo_passk"),
               "true with every estimator; false with grpo or grpo_passk",
               [](const Config& c) -> std::string {
                 const std::string& e = c.algorithm.adv_estimator;
                 if (c.algorithm.norm_adv_by_std_in_grpo || e == "grpo" || e == "grpo_passk") {
                   return "";
                 }
                 return e == "grpo_vectorized"
                            ? "verl's grpo_vectorized always divides by the std; use "
                              "adv_estimator=grpo for Dr. GRPO"
                            : absl::StrCat("adv_estimator=", e,
                                           " has no std normalisation to turn off (only grpo "
                                           "and grpo_passk read this key)");
               }),
      Bool(RLMESH_CONFIG_KEY(algorithm.use_kl_in_reward), false,
           "subtract a KL penalty from the rewards (no gradient)"),
      ReadByKlInReward(Enum(RLMESH_CONFIG_KEY(algorithm.kl_penalty), "kl", kKlTypes,
                            "KL estimator of the in-reward penalty; it has no gradient, so a "
                            "trailing + changes nothing")),
      ReadByKlInReward(Enum(RLMESH_CONFIG_KEY(algorithm.kl_ctrl.type), "fixed",
                            {"fixed", "adaptive"}, "in-reward KL coefficient controller")),
      ReadByKlInReward(Float(RLMESH_CONFIG_KEY(algorithm.kl_ctrl.kl_coef), 0.001, AtLeast(0),
                             "in-reward KL coefficient (initial value for adaptive)"),
                       "0.0"),
      ReadByAdaptiveKl(Float(RLMESH_CONFIG_KEY(algorithm.kl_ctrl.target_kl), 0.1, Above(0),
                             "adaptive controller's target KL")),
      ReadByAdaptiveKl(Int(RLMESH_CONFIG_KEY(algorithm.kl_ctrl.horizon), 10000, kPositive,
                           "adaptive controller's horizon in samples")),
      RefuseIf(Float(RLMESH_CONFIG_KEY(algorithm.gamma), 1.0, kProbability,
                     "discount factor of reinforce_plus_plus's returns"),
               "1.0 with every estimator; any value with reinforce_plus_plus",
               [](const Config& c) -> std::string {
                 return c.algorithm.gamma == 1.0 ||
                                c.algorithm.adv_estimator == "reinforce_plus_plus"
                            ? ""
                            : absl::StrCat(
                                  "only reinforce_plus_plus discounts (gae, which also "
                                  "does, needs a critic); adv_estimator=",
                                  c.algorithm.adv_estimator, " reads no discount");
               }),
      Only(Float(RLMESH_CONFIG_KEY(algorithm.lam), 1.0, kProbability, "GAE lambda"), {"1.0"},
           "only gae reads it, and gae needs a critic, which rlmesh does not have"),
      RefuseIf(
          OptEnum(RLMESH_CONFIG_KEY(algorithm.rollout_correction.rollout_is), {"token", "sequence"},
                  "importance weights pi_old / pi_rollout on each token's policy-gradient "
                  "loss, per token or per sequence; null = none (rollout_corr/* metrics are "
                  "logged either way)"),
          "token, sequence or null; null with bypass_mode",
          [](const Config& c) -> std::string {
            const auto& rc = c.algorithm.rollout_correction;
            return rc.bypass_mode && rc.rollout_is.has_value()
                       ? "bypass_mode's ppo_clip loss applies no importance weights (its "
                         "PPO ratio is already pi / pi_rollout); set rollout_is to null"
                       : "";
          }),
      ReadByRolloutIs(Float(RLMESH_CONFIG_KEY(algorithm.rollout_correction.rollout_is_threshold),
                            2.0, Above(0),
                            "upper truncation of the importance weights; 1 / threshold is the "
                            "lower bound the metrics count")),
      ReadByRolloutIs(
          Bool(RLMESH_CONFIG_KEY(algorithm.rollout_correction.rollout_is_batch_normalize), false,
               "divide the truncated weights by their batch mean (over tokens, or over "
               "sequences at sequence level)")),
      RefuseIf(
          OptStr(RLMESH_CONFIG_KEY(algorithm.rollout_correction.rollout_rs),
                 "rejection sampling: tokens or responses whose divergence between the trainer's "
                 "and the rollout's log-probs is out of bounds leave the update; verl's options "
                 "(token_k1, token_k2, token_k3, seq_sum_k1, ..., seq_max_k3), comma-separated"),
          "null, or verl's options with rollout_rs_threshold (not with bypass_mode)",
          [](const Config& c) -> std::string {
            const auto& rc = c.algorithm.rollout_correction;
            if (!rc.rollout_rs.has_value()) return "";
            if (rc.bypass_mode) {
              return "in bypass mode the old log-probs are the rollout's, so no token is ever "
                     "out of bounds; set rollout_rs to null";
            }
            if (!rc.rollout_rs_threshold.has_value()) {
              return "needs rollout_rs_threshold (verl has no default bound)";
            }
            const auto parsed = grpo::ParseRolloutRs(*rc.rollout_rs, *rc.rollout_rs_threshold);
            return parsed.ok() ? "" : std::string(parsed.status().message());
          }),
      RefuseIf(OptStr(RLMESH_CONFIG_KEY(algorithm.rollout_correction.rollout_rs_threshold),
                      "rejection-sampling bounds: one for every option or one per option "
                      "(comma-separated); a k1 option takes \"lower_upper\" or an upper bound "
                      "whose reciprocal is the lower"),
               "null, or bounds > 0 with rollout_rs",
               [](const Config& c) -> std::string {
                 const auto& rc = c.algorithm.rollout_correction;
                 return rc.rollout_rs_threshold.has_value() && !rc.rollout_rs.has_value()
                            ? "bounds without rollout_rs reject nothing; set rollout_rs too"
                            : "";
               }),
      Bool(RLMESH_CONFIG_KEY(algorithm.rollout_correction.bypass_mode), false,
           "train with the rollout's log-probs as the old policy's (no old-log-prob pass), even "
           "in an on-policy update"),
      Only(Enum(RLMESH_CONFIG_KEY(algorithm.rollout_correction.loss_type), "ppo_clip",
                {"ppo_clip", "reinforce"}, "bypass mode's policy loss"),
           {"ppo_clip"}, "bypass mode's REINFORCE loss is not built yet (issue #14)"),

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
      RefuseIf(StrList(RLMESH_CONFIG_KEY(trainer.logger), {"console", "jsonl"},
                       {"console", "jsonl", "wandb", "tensorboard", "swanlab", "mlflow", "clearml",
                        "vemlp_wandb", "file"},
                       "metric sinks: console (a line per step), jsonl (metrics.jsonl in "
                       "rlmesh.run_dir), tensorboard (event files in rlmesh.tensorboard_dir); "
                       "verl's default adds wandb"),
               "console, jsonl and tensorboard",
               [](const Config& c) -> std::string {
                 for (const std::string& sink : c.trainer.logger) {
                   if (sink == "file") {
                     return "verl's file logger (a JSON line per step) is jsonl here: "
                            "metrics.jsonl in rlmesh.run_dir; use jsonl";
                   }
                   if (sink != "console" && sink != "jsonl" && sink != "tensorboard") {
                     return absl::StrCat(
                         sink,
                         " is a hosted tracker this build does not send to (nothing leaves "
                         "the cluster); log to jsonl (metrics.jsonl, every metric per step) "
                         "and tensorboard (event files any TensorBoard reads) instead");
                   }
                 }
                 return "";
               }),
      Int(RLMESH_CONFIG_KEY(trainer.log_val_generations), 0, AtLeast(0),
          "validation samples (prompt, response, score) logged at each validation, chosen as "
          "verl chooses them; to the console and metrics.jsonl's sibling val_generations.jsonl"),
      Str(RLMESH_CONFIG_KEY(trainer.default_local_dir),
          "checkpoints/${trainer.project_name}/${trainer.experiment_name}", "checkpoint folder"),
      Enum(RLMESH_CONFIG_KEY(trainer.resume_mode), "auto", {"auto", "disable", "resume_path"},
           "auto = latest checkpoint in default_local_dir; resume_path = resume_from_path"),
      ReadWhen(
          OptStr(RLMESH_CONFIG_KEY(trainer.resume_from_path),
                 "checkpoint folder (global_step_N) for resume_mode resume_path"),
          [](const Config& c) { return c.trainer.resume_mode == "resume_path"; },
          "with trainer.resume_mode resume_path",
          "only trainer.resume_mode=resume_path reads it (auto takes the latest checkpoint "
          "in trainer.default_local_dir)"),
      OptInt(RLMESH_CONFIG_KEY(trainer.max_actor_ckpt_to_keep), kPositive,
             "checkpoints kept; null = all"),
      Int(RLMESH_CONFIG_KEY(trainer.n_gpus_per_node), 1, kPositive,
          "trainer ranks per node, one per device: on cuda local rank i takes GPU i and the "
          "group runs over NCCL (with fewer GPUs than ranks they share them, over Gloo through "
          "host copies); on cpu they are processes that split the cores. rlmesh run starts "
          "them all (verl's default is 8)"),
      Int(RLMESH_CONFIG_KEY(trainer.nnodes), 1, kPositive,
          "nodes of trainer ranks: the group has n_gpus_per_node x nnodes ranks. rlmesh run "
          "starts every rank on its machine and refuses more than 1; the Helm chart runs one "
          "rank per pod (trainer.replicas)"),
      Bool(RLMESH_CONFIG_KEY(trainer.balance_batch), true,
           "in a trainer group, give each mini-batch's rows to the ranks balanced by tokens "
           "(verl's sequence-length balancing); false: in order. Only the ranks' loads change "
           "(rlmesh/rank_tokens/*), not the update"),
      Only(Int(RLMESH_CONFIG_KEY(trainer.critic_warmup), 0, AtLeast(0),
               "steps that train only the critic"),
           {"0"}, "GRPO has no critic to warm up"),

      // reward
      RefuseIf(Bool(RLMESH_CONFIG_KEY(reward_model.enable), false,
                    "score training samples with the reward model at reward_model.model.path (a "
                    "Hugging Face ...ForSequenceClassification checkpoint, run in the reward "
                    "service): its score replaces the rule score, as in verl; validation keeps "
                    "the rule scorers"),
               "false; true with reward_model.model.path, without custom_reward_function.path "
               "or the overlong buffer",
               [](const Config& c) -> std::string {
                 if (!c.reward_model.enable) return "";
                 if (!c.reward_model.model.path.has_value() || c.reward_model.model.path->empty()) {
                   return "needs reward_model.model.path";
                 }
                 if (c.custom_reward_function.path.has_value()) {
                   return "with custom_reward_function.path verl scores with the file, which "
                          "reaches a generative reward model itself; rlmesh's reward files "
                          "cannot call the reward model: set one of the two";
                 }
                 if (c.reward_model.reward_kwargs.overlong_buffer_cfg.enable) {
                   return "verl's DAPO manager returns the reward model's scores unshaped, so "
                          "the overlong buffer would shape validation only: disable one";
                 }
                 return "";
               }),
      ReadByRewardModel(OptStr(RLMESH_CONFIG_KEY(reward_model.model.path),
                               "folder of the reward model: config.json (LlamaFor-, Qwen2For- or "
                               "Qwen3ForSequenceClassification, num_labels 1), weights and "
                               "tokenizer.json")),
      ReadByRewardModel(OptInt(RLMESH_CONFIG_KEY(reward_model.micro_batch_size_per_gpu), kPositive,
                               "sequences per forward of the reward model; null = a request's "
                               "samples at once")),
      RefuseIf(Enum(RLMESH_CONFIG_KEY(reward_model.reward_manager), "naive",
                    {"naive", "batch", "dapo", "prime"},
                    "how samples reach the scoring function: naive scores each sample; dapo "
                    "also shapes long responses (reward_kwargs.overlong_buffer_cfg)"),
               "naive; dapo with reward_kwargs.overlong_buffer_cfg.enable",
               [](const Config& c) -> std::string {
                 const std::string& m = c.reward_model.reward_manager;
                 if (m == "batch" || m == "prime") {
                   return "batch and prime change how a custom reward function is called (batch: "
                          "once with lists; prime: in its own process pool); rlmesh calls "
                          "custom_reward_function.name once per sample, as naive does, in "
                          "rlmesh.reward.python_workers processes";
                 }
                 if (m == "dapo" && !c.reward_model.reward_kwargs.overlong_buffer_cfg.enable) {
                   return "with the built-in scorers dapo differs from naive only by the "
                          "overlong buffer: set reward_model.reward_kwargs.overlong_buffer_cfg."
                          "enable=true, or use naive";
                 }
                 return "";
               }),
      RefuseIf(Bool(RLMESH_CONFIG_KEY(reward_model.reward_kwargs.overlong_buffer_cfg.enable), false,
                    "DAPO's overlong shaping: a response longer than max_resp_len - len loses "
                    "up to penalty_factor, linearly over the buffer (training and validation)"),
               "with reward_manager dapo",
               [](const Config& c) -> std::string {
                 const auto& kw = c.reward_model.reward_kwargs;
                 if (!kw.overlong_buffer_cfg.enable) return "";
                 if (c.reward_model.reward_manager != "dapo") {
                   return "only the dapo reward manager takes it (verl's naive manager refuses "
                          "the argument): set reward_model.reward_manager=dapo";
                 }
                 if (!kw.overlong_buffer_cfg.len.has_value()) {
                   return "needs reward_model.reward_kwargs.overlong_buffer_cfg.len";
                 }
                 const int64_t max_len = kw.max_resp_len.value_or(c.data.max_response_length);
                 if (max_len < *kw.overlong_buffer_cfg.len) {
                   return absl::StrCat("max_resp_len ", max_len,
                                       " is shorter than overlong_buffer_cfg.len ",
                                       *kw.overlong_buffer_cfg.len);
                 }
                 return "";
               }),
      ReadByOverlong(OptInt(RLMESH_CONFIG_KEY(reward_model.reward_kwargs.overlong_buffer_cfg.len),
                            kPositive, "tokens of the overlong buffer")),
      ReadByOverlong(
          Float(RLMESH_CONFIG_KEY(reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor),
                1.0, AtLeast(0), "the penalty at the end of the buffer")),
      ReadByOverlong(Bool(RLMESH_CONFIG_KEY(reward_model.reward_kwargs.overlong_buffer_cfg.log),
                          false,
                          "report reward/overlong_reward/mean and reward/overlong/mean (the "
                          "share of samples penalised) each step")),
      ReadByOverlong(OptInt(RLMESH_CONFIG_KEY(reward_model.reward_kwargs.max_resp_len), kPositive,
                            "where the overlong buffer ends; null = data.max_response_length")),
      RefuseIf(
          OptStr(RLMESH_CONFIG_KEY(custom_reward_function.path),
                 "Python file defining the scoring function, verl's compute_score(data_source, "
                 "solution_str, ground_truth, extra_info); it scores every sample, run by "
                 "the reward service in rlmesh.reward.python_workers processes of "
                 "rlmesh.reward.python. null = the built-in scorers"),
          "null; a file when rlmesh.reward.custom_address is empty",
          [](const Config& c) -> std::string {
            if (!c.custom_reward_function.path.has_value()) return "";
            if (c.custom_reward_function.path->empty()) {
              return "expected the path of a Python file, or null";
            }
            if (!c.rlmesh.reward.custom_address.empty()) {
              return "rlmesh.reward.custom_address also replaces the built-in scorers: set "
                     "one of the two";
            }
            return "";
          }),
      ReadByRewardFile(Str(RLMESH_CONFIG_KEY(custom_reward_function.name), "compute_score",
                           "function name in custom_reward_function.path")),
      ReadByRewardFile(
          JsonMap(RLMESH_CONFIG_KEY(custom_reward_function.reward_kwargs),
                  "keyword arguments added to every call of the function, as verl's "
                  "custom_reward_function.reward_kwargs (compute_score(..., **reward_kwargs)); the "
                  "function must take each of them (checked when the reward service starts), and "
                  "none may be one that rlmesh passes per item. Set one with "
                  "+custom_reward_function.reward_kwargs.NAME=VALUE")),

      // rlmesh: process-wide
      Str(RLMESH_CONFIG_KEY(rlmesh.host), "127.0.0.1",
          "address the services bind (their --host overrides it) and dial each other at"),
      Enum(RLMESH_CONFIG_KEY(rlmesh.chat_template), "auto",
           {"auto", "raw", "chatml", "qwen3", "llama3"},
           "prompt formatting: auto = tokenizer_config.json's chat_template; raw = message text as "
           "is"),
      Str(RLMESH_CONFIG_KEY(rlmesh.run_dir), "runs/${trainer.experiment_name}",
          "folder for logs, metrics and the run's files"),
      Str(RLMESH_CONFIG_KEY(rlmesh.tensorboard_dir),
          "tensorboard_log/${trainer.project_name}/${trainer.experiment_name}",
          "folder of the TensorBoard event files with trainer.logger: tensorboard (verl's "
          "default folder; verl reads it from $TENSORBOARD_DIR)"),
      Enum(RLMESH_CONFIG_KEY(rlmesh.device), "cpu", {"cpu", "cuda"}, "compute device"),
      Enum(RLMESH_CONFIG_KEY(rlmesh.dtype), "float32", {"float32", "bfloat16"},
           "parameter and activation dtype (bfloat16 keeps fp32 master weights)"),
      Int(RLMESH_CONFIG_KEY(rlmesh.num_threads), 0, AtLeast(0),
          "intra-op CPU threads per process; 0 = all cores"),
      Int(RLMESH_CONFIG_KEY(rlmesh.seed), 1, AtLeast(0),
          "seed of every random draw of the run except the prompt order (data.seed): "
          "sampling, the warm-up's examples, the actor's shuffle, the synthetic task"),
      Float(RLMESH_CONFIG_KEY(rlmesh.device_memory_gb), 0.0, AtLeast(0),
            "memory of one device in GiB, for the dry-run's estimate and the services' "
            "rlmesh_process_device_memory_capacity_bytes; 0 = detect"),

      // rlmesh: services
      Only(Str(RLMESH_CONFIG_KEY(rlmesh.rollout.address), "",
               "no use: replicas are found through rlmesh.rollout.addresses, register_with or "
               "discovery_dns"),
           {"\"\""},
           "replicas are found through rlmesh.rollout.addresses, register_with or "
           "discovery_dns, and listen at rlmesh.host and rlmesh.rollout.port"),
      Int(RLMESH_CONFIG_KEY(rlmesh.rollout.port), 50051, kPort, "rollout gRPC port; 0 = any free"),
      Int(RLMESH_CONFIG_KEY(rlmesh.rollout.metrics_port), 9101, kPort,
          "rollout Prometheus port; 0 = any free"),
      CpuList(RLMESH_CONFIG_KEY(rlmesh.rollout.cpus),
              "CPUs each rollout replica runs on, as taskset -c writes them (\"0-3,8\"); with "
              "rlmesh.num_threads = 0 it runs as many LibTorch threads (the trainer ranks of one "
              "machine divide them). Empty: every CPU the process may use"),
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
          "samples (prompts x n) one Generate call may ask of a replica; the coordinator splits "
          "larger shares"),
      Int(RLMESH_CONFIG_KEY(rlmesh.rollout.max_queued_samples), 8192, kPositive,
          "samples a replica holds at once over every open Generate call; a call that would go "
          "beyond is refused with RESOURCE_EXHAUSTED naming the limit, and the coordinator "
          "waits and sends it again"),
      Float(RLMESH_CONFIG_KEY(rlmesh.rollout.heartbeat_s), 2.0, Above(0),
            "seconds between the coordinator's status probes of each replica: one that does not "
            "answer within rlmesh.rpc.keepalive_timeout_s gets no more work until it answers "
            "again, then it is re-synced and re-admitted"),
      Float(RLMESH_CONFIG_KEY(rlmesh.rollout.evict_after_s), 300.0, Above(0),
            "seconds a replica may stay unanswering before it leaves the pool (it comes back by "
            "registering again)"),
      Float(RLMESH_CONFIG_KEY(rlmesh.rollout.ready_wait_s), 300.0, Above(0),
            "seconds a step waits for a ready replica when none is left (at the first step: "
            "for the first to register, as pods start), or for room while every replica "
            "refuses work for being full, before it fails UNAVAILABLE or RESOURCE_EXHAUSTED; "
            "the coordinator says every 30 s that it waits"),
      RefuseIf(
          Enum(RLMESH_CONFIG_KEY(rlmesh.rollout.inflight_update), "keep", {"keep", "recompute"},
               "what a replica's running samples do with their KV cache when new weights "
               "arrive mid-generation (rlmesh.partial_rollout): keep it, the positions "
               "cached before staying the older weights' (vLLM's pause with mode=keep), or "
               "recompute it with the new weights before decoding on (what verl's partial "
               "rollouts do by resubmitting)"),
          "keep, or recompute with rlmesh.partial_rollout = true",
          [](const Config& c) -> std::string {
            return c.rlmesh.rollout.inflight_update == "recompute" && !c.rlmesh.partial_rollout
                       ? "weights change during a generation only with "
                         "rlmesh.partial_rollout = true"
                       : "";
          }),
      Int(RLMESH_CONFIG_KEY(rlmesh.rollout.max_restarts), 3, AtLeast(0),
          "times `rlmesh run` restarts a rollout replica that died, when it runs more than one "
          "(waiting 1, 2, 4 ... s, at most 30 s); 0 = a replica's death stops the run"),
      Str(RLMESH_CONFIG_KEY(rlmesh.reward.address), "",
          "host:port the coordinator dials the reward service at; empty = rlmesh.host and "
          "rlmesh.reward.port"),
      Int(RLMESH_CONFIG_KEY(rlmesh.reward.port), 50052, kPort, "reward gRPC port; 0 = any free"),
      Int(RLMESH_CONFIG_KEY(rlmesh.reward.metrics_port), 9102, kPort,
          "reward Prometheus port; 0 = any free"),
      CpuList(RLMESH_CONFIG_KEY(rlmesh.reward.cpus),
              "CPUs the reward service runs on, as taskset -c writes them (\"0-3,8\"); with "
              "rlmesh.num_threads = 0 it runs as many LibTorch threads (the trainer ranks of one "
              "machine divide them). Empty: every CPU the process may use"),
      Str(RLMESH_CONFIG_KEY(rlmesh.reward.custom_address), "",
          "host:port of an external RewardService used instead of the built-in one"),
      Float(RLMESH_CONFIG_KEY(rlmesh.reward.timeout_s), 30.0, Above(0),
            "deadline of one scoring call"),
      RefuseIf(Float(RLMESH_CONFIG_KEY(rlmesh.reward.format_score), 0.0, AnyNumber(),
                     "score of a well-formed but wrong answer from the GSM8K scorer (data sources "
                     "openai/gsm8k and rlmesh/arithmetic), as verl's gsm8k scorer; the other "
                     "built-in scorers give 0 or 1"),
               "any value with the built-in scorers; 0 with a reward file or a custom_address that "
               "scores every item",
               [](const Config& c) -> std::string {
                 const auto& r = c.rlmesh.reward;
                 if (r.format_score == 0.0) return "";
                 if (c.custom_reward_function.path.has_value()) {
                   return "custom_reward_function.path scores every item, and the built-in GSM8K "
                          "scorer that reads it runs for none";
                 }
                 if (!r.custom_address.empty() && r.custom_data_sources.empty()) {
                   return "rlmesh.reward.custom_address scores every item (custom_data_sources is "
                          "empty), and the built-in GSM8K scorer that reads it runs for none";
                 }
                 return "";
               }),
      Int(RLMESH_CONFIG_KEY(rlmesh.reward.num_workers), 4, kPositive, "scoring threads"),
      Int(RLMESH_CONFIG_KEY(rlmesh.reward.max_batch_size), 65536, Between(1, 1 << 30),
          "items one Score request may carry; larger requests are refused"),
      RefuseIf(StrList(RLMESH_CONFIG_KEY(rlmesh.reward.custom_data_sources), {}, {},
                       "data sources sent to rlmesh.reward.custom_address; empty = every item"),
               "empty; any list with rlmesh.reward.custom_address",
               [](const Config& c) -> std::string {
                 return !c.rlmesh.reward.custom_data_sources.empty() &&
                                c.rlmesh.reward.custom_address.empty()
                            ? "it names the data sources sent to rlmesh.reward.custom_address, "
                              "which is empty: set it to the custom RewardService's host:port"
                            : "";
               }),
      ReadByRewardFile(Str(RLMESH_CONFIG_KEY(rlmesh.reward.python), "/usr/bin/python3",
                           "the interpreter that runs custom_reward_function.path; it needs the "
                           "grpcio and protobuf modules (Debian: python3-grpcio, "
                           "python3-protobuf)")),
      ReadByRewardFile(Int(RLMESH_CONFIG_KEY(rlmesh.reward.python_workers), 4, kPositive,
                           "Python processes scoring with custom_reward_function.path, one item "
                           "each at a time; a call past rlmesh.reward.timeout_s is killed and its "
                           "process replaced")),
      OptFloat(RLMESH_CONFIG_KEY(rlmesh.reward.failed_item_score), AnyNumber(),
               "score of a sample whose scoring still fails after the retries (the scorer "
               "raised, timed out or was unreachable), counted in rlmesh/reward_failed/<kind>; "
               "null = the step stops instead"),
      Str(RLMESH_CONFIG_KEY(rlmesh.reference.address), "",
          "gRPC target the coordinator dials the reference at (host:port, or a list "
          "ipv4:host:port,host:port); calls go round robin, and every replica the name "
          "resolves to or the list holds is sent the warmed-up policy; empty = rlmesh.host and "
          "rlmesh.reference.port"),
      Int(RLMESH_CONFIG_KEY(rlmesh.reference.port), 50053, kPort,
          "reference gRPC port; 0 = any free"),
      Int(RLMESH_CONFIG_KEY(rlmesh.reference.metrics_port), 9103, kPort,
          "reference Prometheus port; 0 = any free"),
      CpuList(RLMESH_CONFIG_KEY(rlmesh.reference.cpus),
              "CPUs each reference rank runs on, as taskset -c writes them (\"0-3,8\"); with "
              "rlmesh.num_threads = 0 it runs as many LibTorch threads (the trainer ranks of one "
              "machine divide them). Empty: every CPU the process may use"),
      Int(RLMESH_CONFIG_KEY(rlmesh.reference.world_size), 1, Between(1, 1024),
          "ranks of the reference group: each holds 1/world_size of the frozen weights (full "
          "sharding, gathered one unit at a time for each forward) and scores its share of "
          "every batch; rlmesh run starts them all on this machine (on cuda placed as the "
          "trainer's ranks: rank i on GPU i over NCCL, or sharing fewer GPUs over Gloo)"),
      Int(RLMESH_CONFIG_KEY(rlmesh.reference.rank), 0, AtLeast(0),
          "this reference process's rank in its group of rlmesh.reference.world_size; rank 0 "
          "serves the coordinator (rlmesh run sets it per process)"),
      Str(RLMESH_CONFIG_KEY(rlmesh.reference.group_host), "127.0.0.1",
          "address of reference rank 0, where the reference ranks rendezvous"),
      Int(RLMESH_CONFIG_KEY(rlmesh.reference.group_port), 29510, kPort,
          "port of the reference group's store on rank 0 (c10d TCPStore); 0 = any free, which "
          "rank 0 prints"),
      Str(RLMESH_CONFIG_KEY(rlmesh.trainer.address), "",
          "host:port the coordinator dials the trainer at; empty = rlmesh.host and "
          "rlmesh.trainer.port"),
      Int(RLMESH_CONFIG_KEY(rlmesh.trainer.port), 50054, kPort, "trainer gRPC port; 0 = any free"),
      Int(RLMESH_CONFIG_KEY(rlmesh.trainer.metrics_port), 9104, kPort,
          "trainer Prometheus port; 0 = any free"),
      CpuList(RLMESH_CONFIG_KEY(rlmesh.trainer.cpus),
              "CPUs each trainer rank runs on, as taskset -c writes them (\"0-3,8\"); with "
              "rlmesh.num_threads = 0 it runs as many LibTorch threads (the trainer ranks of one "
              "machine divide them). Empty: every CPU the process may use"),
      Int(RLMESH_CONFIG_KEY(rlmesh.trainer.rank), 0, OrSentinel(AtLeast(0), -1, "from POD_NAME"),
          "this trainer process's rank in the group of trainer.n_gpus_per_node x "
          "trainer.nnodes; rank 0 serves the coordinator (rlmesh run sets it per process). -1: "
          "the ordinal at the end of $POD_NAME, as a StatefulSet names its pods (the Helm chart)"),
      Str(RLMESH_CONFIG_KEY(rlmesh.trainer.group_host), "127.0.0.1",
          "address of trainer rank 0, where the ranks rendezvous"),
      Int(RLMESH_CONFIG_KEY(rlmesh.trainer.group_port), 29500, kPort,
          "port of the group's store on rank 0 (c10d TCPStore); 0 = any free, which rank 0 "
          "prints"),
      Only(Str(RLMESH_CONFIG_KEY(rlmesh.coordinator.address), "",
               "no use: replicas register with rlmesh.rollout.register_with"),
           {"\"\""},
           "the coordinator listens at rlmesh.host and rlmesh.coordinator.port, and "
           "replicas find it through rlmesh.rollout.register_with"),
      Int(RLMESH_CONFIG_KEY(rlmesh.coordinator.port), 50050, kPort,
          "coordinator gRPC port; 0 = any free"),
      Int(RLMESH_CONFIG_KEY(rlmesh.coordinator.metrics_port), 9100, kPort,
          "coordinator Prometheus port; 0 = any free"),
      CpuList(RLMESH_CONFIG_KEY(rlmesh.coordinator.cpus),
              "CPUs the coordinator runs on, as taskset -c writes them (\"0-3,8\"); with "
              "rlmesh.num_threads = 0 it runs as many LibTorch threads (the trainer ranks of one "
              "machine divide them). Empty: every CPU the process may use"),

      // rlmesh: training loop
      Enum(RLMESH_CONFIG_KEY(rlmesh.weight_sync.transport), "shm",
           {"shm", "tcp", "nccl", "cuda_ipc", "grpc"},
           "how new weights reach the rollout replicas: shm (shared memory on the trainer's host; "
           "replicas that cannot map it, on other hosts or pods, take the TCP chain), tcp (every "
           "replica through a chain of TCP connections, each forwarding to the next), nccl (GPU "
           "broadcast; replicas and references on the trainer's node with a GPU take cuda_ipc "
           "instead, by themselves), cuda_ipc (replicas on the trainer's node copy each tensor "
           "straight from the trainer's GPU memory, mapped with CUDA IPC; a replica on another "
           "node takes the version inline, counted as a fallback), grpc (inline in the RPCs)"),
      Int(RLMESH_CONFIG_KEY(rlmesh.weight_sync.bucket_bytes), 256 << 20, AtLeast(1 << 10),
          "bytes per weight-transfer bucket"),
      Int(RLMESH_CONFIG_KEY(rlmesh.max_staleness), 0, AtLeast(0),
          "policy versions a sample may lag: 0 = synchronous on-policy; k > 0 generates up to k "
          "steps ahead of the update, on weights exactly k versions old (docs/grpo.md)"),
      RefuseIf(Bool(RLMESH_CONFIG_KEY(rlmesh.partial_rollout), false,
                    "partial rollouts (verl's async_training.partial_rollout): with "
                    "rlmesh.max_staleness > 0 each new version is published while later steps "
                    "generate, and the replicas apply it between two decode steps, so running "
                    "samples finish on newer weights (each records where a version took over; "
                    "rlmesh.rollout.inflight_update says what happens to its KV cache); false: "
                    "a publish waits for the generation it would cut (docs/grpo.md)"),
               "false, or true with rlmesh.max_staleness >= 1",
               [](const Config& c)
                   -> std::
                       string {
                         return c.rlmesh.partial_rollout && c.rlmesh.max_staleness == 0
                                    ? "the synchronous loop (rlmesh.max_staleness = 0) publishes "
                                      "between "
                                      "steps, when nothing generates; set rlmesh.max_staleness >= 1"
                                    : "";
                       }),
      Int(RLMESH_CONFIG_KEY(rlmesh.warmup.sft_steps), 0, AtLeast(0),
          "supervised warm-up steps before GRPO"),
      ReadByWarmup(
          Float(RLMESH_CONFIG_KEY(rlmesh.warmup.lr), 3e-3, Above(0), "warm-up learning rate")),
      ReadByWarmup(Int(RLMESH_CONFIG_KEY(rlmesh.warmup.batch_size), 64, kPositive,
                       "warm-up examples per step")),
      ReadByWarmup(Enum(RLMESH_CONFIG_KEY(rlmesh.warmup.target), "ground_truth",
                        {"ground_truth", "shuffled_ground_truth"},
                        "warm-up response: the answer, or its characters shuffled (teaches "
                        "format, not order)")),

      // rlmesh: liveness of every gRPC connection
      Float(RLMESH_CONFIG_KEY(rlmesh.rpc.keepalive_s), 10.0, Above(0),
            "seconds between HTTP/2 keepalive pings on every gRPC connection, from both ends"),
      Float(RLMESH_CONFIG_KEY(rlmesh.rpc.keepalive_timeout_s), 5.0, Above(0),
            "seconds a ping may go unanswered before the connection is dropped and its calls "
            "fail UNAVAILABLE: a frozen peer is found within keepalive_s + keepalive_timeout_s"),
      Int(RLMESH_CONFIG_KEY(rlmesh.rpc.max_message_bytes), 1 << 30, Between(1 << 20, 2147483647),
          "largest gRPC message every server receives or sends and every channel accepts; a "
          "larger request is refused with RESOURCE_EXHAUSTED before it is parsed (inline "
          "weight updates need room for a bucket, rlmesh.weight_sync.bucket_bytes)"),

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

      // rlmesh: the quickstart's synthetic task
      Enum(RLMESH_CONFIG_KEY(rlmesh.quickstart.task), "none", {"none", "reverse_digits"},
           "synthetic task generated in place of data files; none = use data.train_files"),
      ReadByQuickstartTask(Int(RLMESH_CONFIG_KEY(rlmesh.quickstart.num_train), 10000, kPositive,
                               "synthetic training prompts")),
      ReadByQuickstartTask(Int(RLMESH_CONFIG_KEY(rlmesh.quickstart.num_val), 200, kPositive,
                               "synthetic held-out prompts (scored greedily)")),
      ReadByQuickstartTask(Int(RLMESH_CONFIG_KEY(rlmesh.quickstart.min_digits), 3, Between(1, 18),
                               "shortest digit string")),
      ReadByQuickstartTask(
          Int(RLMESH_CONFIG_KEY(rlmesh.quickstart.max_digits), 6, Between(1, 18),
              "longest digit string (18 at most: the prompts are 64-bit integers)")),
  };
}

// verl keys and sections rlmesh has nothing for. Each is an error naming the reason, so that
// a recipe's key is never met with a misleading "did you mean". A trailing ".*" covers a
// whole section. `inert`, where set, is verl's default written as YAML: a value that asks
// for nothing rlmesh lacks, accepted and dropped, so that a config carrying verl's defaults
// loads.
struct NotBuilt {
  const char* key;
  const char* reason;
  const char* inert = nullptr;
};
const NotBuilt kNotBuilt[] = {
    {"actor_rollout_ref.actor.megatron.*",
     "Megatron's options: rlmesh's trainer is not Megatron (only the tensor, pipeline and expert "
     "parallel sizes are keys, and they must be 1)"},
    {"actor_rollout_ref.ref.megatron.*",
     "Megatron's options: rlmesh's reference is not Megatron (only the tensor, pipeline and "
     "expert parallel sizes are keys)"},
    {"actor_rollout_ref.actor.optim.override_optimizer_config.*",
     "rlmesh's trainer runs AdamW with the optim.* keys only"},
    {"actor_rollout_ref.actor.optim.lr_decay_style",
     "Megatron's schedule key; rlmesh's schedule is actor_rollout_ref.actor.optim."
     "lr_scheduler_type"},
    {"actor_rollout_ref.actor.optim.lr_decay_steps", "Megatron's schedule key"},
    {"actor_rollout_ref.model.override_config.*",
     "the model's sizes come from its config.json as it is"},
    {"actor_rollout_ref.model.lora.*", "LoRA is not built: the trainer updates every weight"},
    {"actor_rollout_ref.rollout.engine_kwargs.*",
     "vLLM's and SGLang's engine arguments have no counterpart in rlmesh's engine"},
    {"actor_rollout_ref.rollout.multi_turn.*", "multi-turn rollouts and tools are not built"},
    {"actor_rollout_ref.rollout.agent.*", "agent loops are not built; each sample is one turn"},
    {"actor_rollout_ref.actor.checkpoint.*",
     "checkpoints always hold the model, the optimizer and the RNG (docs/services.md)"},
    {"actor_rollout_ref.actor.profiler.*", "verl's profiler is not built"},
    {"reward_model.reward_kwargs.*",
     "reward_kwargs other than overlong_buffer_cfg.{enable,len,penalty_factor,log} and "
     "max_resp_len are arguments of verl's reward managers that rlmesh's scorers do not take"},
    {"reward_model.model.*",
     "the reward model reads only reward_model.model.path: its tokenizer is the folder's own "
     "(no input_tokenizer switch), its code rlmesh's (no external_lib or trust_remote_code)"},
    {"reward_model.sandbox_fusion.*", "code-execution rewards are not built"},
    {"critic.enable", "GRPO has no critic", "false"},
    {"critic.*", "GRPO has no critic"},
    {"global_profiler.*", "verl's profiler is not built"},
    {"ray_kwargs.*", "rlmesh does not run on Ray: `rlmesh run` or the Helm chart start it"},
    {"ray_init.*", "rlmesh does not run on Ray: `rlmesh run` or the Helm chart start it"},
    {"transfer_queue.*", "rlmesh moves batches over its own gRPC API"},
    {"async_training.*",
     "verl's fully-async recipe keys are not mapped; rlmesh's asynchronous mode is "
     "rlmesh.max_staleness, with rlmesh.partial_rollout for verl's partial_rollout "
     "(docs/grpo.md)"},
    {"trainer.val_only", "validation-only runs are not built", "false"},
    {"trainer.use_legacy_worker_impl", "rlmesh has one trainer implementation", "auto"},
    {"trainer.rollout_data_dir",
     "rollouts are not dumped to files; trainer.log_val_generations logs validation samples to "
     "val_generations.jsonl",
     "null"},
    {"trainer.validation_data_dir",
     "validation generations are logged by trainer.log_val_generations to "
     "val_generations.jsonl, not to a folder of their own",
     "null"},
    {"reward_model.strategy",
     "the reward model runs in rlmesh's reward service (reward_model.enable), not in an FSDP "
     "or Megatron worker",
     "fsdp"},
    {"trainer.device", "the device is rlmesh.device"},
    {"trainer.esi_redundant_time", "rlmesh has no ESI deadline"},
    {"trainer.ray_wait_register_center_timeout", "rlmesh does not run on Ray"},
    {"data.custom_cls.*",
     "rlmesh reads verl's schema itself; custom dataset classes are not built"},
    {"data.dataloader_num_workers", "prompts are tokenized once at start-up", "8"},
    {"data.train_max_samples", "the whole of data.train_files is used", "-1"},
    {"data.val_max_samples", "the whole of data.val_files is used", "-1"},
    {"data.return_full_prompt", "the coordinator keeps the prompts itself", "false"},
    {"data.return_raw_input_ids", "the coordinator keeps the prompts itself", "false"},
    {"data.apply_chat_template_kwargs.*", "the chat template is rlmesh.chat_template"},
    {"actor_rollout_ref.hybrid_engine",
     "rlmesh always runs the rollout as separate replicas (not colocated with the trainer)"},
    {"actor_rollout_ref.rollout.dtype", "every model copy computes in rlmesh.dtype"},
    {"actor_rollout_ref.rollout.calculate_log_probs",
     "replicas always return the sampled tokens' log-probs", "false"},
    {"actor_rollout_ref.rollout.enable_prefix_caching", "prefix caching is not built"},
    {"actor_rollout_ref.rollout.disable_log_stats", "vLLM's engine statistics do not exist here",
     "true"},
    {"actor_rollout_ref.rollout.ignore_eos", "sampling always stops at the end-of-sequence token",
     "false"},
    {"actor_rollout_ref.rollout.prompt_length", "prompts are bounded by data.max_prompt_length"},
    {"actor_rollout_ref.rollout.response_length",
     "responses are bounded by data.max_response_length"},
};

std::string LastComponent(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

}  // namespace

std::string ValueText(const YAML::Node& value) {
  if (value.IsNull()) return "null";
  if (value.IsScalar()) return value.Scalar();
  if (value.IsSequence()) {
    std::vector<std::string> items;
    for (const YAML::Node& item : value) items.push_back(ValueText(item));
    return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
  }
  return DescribeValue(value);
}

namespace {

// The first entry of kNotBuilt that covers `key`, or null.
const NotBuilt* FindNotBuilt(const std::string& key) {
  for (const NotBuilt& entry : kNotBuilt) {
    const std::string pattern = entry.key;
    if (absl::EndsWith(pattern, ".*")) {
      const std::string prefix = pattern.substr(0, pattern.size() - 1);  // keeps the dot
      if ((absl::StartsWith(key, prefix) || key == prefix.substr(0, prefix.size() - 1)) &&
          FindKey(key) == nullptr) {
        return &entry;
      }
    } else if (key == pattern) {
      return &entry;
    }
  }
  return nullptr;
}

}  // namespace

std::string ReadBackText(const KeySpec& spec, const YAML::Node& value) {
  Config scratch;
  return spec.set(value, scratch).ok() ? ValueText(spec.get(scratch)) : ValueText(value);
}

const char* NotBuiltVerlKey(const std::string& key) {
  const NotBuilt* entry = FindNotBuilt(key);
  return entry == nullptr ? nullptr : entry->reason;
}

bool IsInertNotBuiltValue(const std::string& key, const YAML::Node& value) {
  const NotBuilt* entry = FindNotBuilt(key);
  if (entry == nullptr || entry->inert == nullptr) return false;
  const YAML::Node inert = YAML::Load(entry->inert);
  if (inert.IsMap()) return value.IsMap() && value.size() == 0;
  return ValueText(value) == ValueText(inert);
}

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

namespace {

std::string SectionOf(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}

std::string TopLevelOf(const std::string& key) { return key.substr(0, key.find('.')); }

// `typed` is a misspelling of `name`: the same words (split at '_') but for one, which is one
// edit away (two for a word of eight letters or more). "ppo_mini_batch_sise" is a typo of
// "ppo_mini_batch_size"; "ppo_micro_batch_size" is not one of "ppo_mini_batch_size": it is
// another word, which means another thing.
bool IsTypoOf(const std::string& typed, const std::string& name) {
  const std::vector<std::string> a = absl::StrSplit(typed, '_');
  const std::vector<std::string> b = absl::StrSplit(name, '_');
  if (a.size() != b.size()) return EditDistance(typed, name) <= 1;
  int differing = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    const size_t allowed = std::max(a[i].size(), b[i].size()) >= 8 ? 2 : 1;
    if (++differing > 1 || EditDistance(a[i], b[i]) > allowed) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> SuggestKey(const std::string& key) {
  // No key is this long, nor a typo of one; the edit distances below cost the key's length
  // times every key's, so a 200 KB key would take a second.
  if (key.size() > 256) return std::nullopt;
  const std::string last = LastComponent(key);
  const std::string section = SectionOf(key);
  const KeySpec* best = nullptr;
  size_t best_distance = 0;
  for (const KeySpec& spec : Schema()) {
    const std::string spec_last = LastComponent(spec.key);
    const std::string spec_section = SectionOf(spec.key);
    // A misspelt name in its own (or a misspelt) section, or the right name in another
    // section of the same group (actor.temperature for rollout.temperature). A name that is
    // merely spelt alike in an unrelated place is not suggested.
    // A name of several words (max_num_seqs) means the same anywhere; a one-word name (name,
    // path) only within its group.
    const bool same_section = EditDistance(section, spec_section) <= 1;
    const bool specific = last.find('_') != std::string::npos;
    const bool close = (same_section && IsTypoOf(last, spec_last)) ||
                       (last == spec_last && (specific || TopLevelOf(key) == TopLevelOf(spec.key)));
    if (!close) continue;
    const size_t distance = EditDistance(key, spec.key);
    if (best == nullptr || distance < best_distance) {
      best = &spec;
      best_distance = distance;
    }
  }
  if (best == nullptr) return std::nullopt;
  return best->key;
}

}  // namespace rlmesh::config
