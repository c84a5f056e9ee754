// The actor: the trainer service's domain object that owns the optimizer of a policy and
// runs verl's dp_actor steps on it — old log-probs, the GRPO update (mini-batches,
// micro-batches with gradient accumulation, epochs, optional shuffling), a supervised step,
// and saving/restoring its optimizer and RNG state. It knows nothing about gRPC.
//
// The policy is given as a module (for its parameters) and a forward function, so any
// network — the LibTorch CausalLm or a test's lookup table — can be trained. The actor keeps
// the module alive but does not otherwise own its weights: loading and saving them is the
// caller's job. All public methods are thread-safe (serialized by an internal mutex); they
// return InvalidArgument for a malformed batch (naming the field) and Internal for a LibTorch
// failure inside the policy.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/grpo/grpo.h"
#include "common/grpo/policy_losses.h"
#include "services/trainer/actor_batch.h"
#include "services/trainer/fsdp.h"
#include "services/trainer/master_weights.h"

namespace rlmesh::dist {
class Group;
}  // namespace rlmesh::dist

namespace rlmesh::trainer {

// (input_ids [B, T] int64, attention_mask [B, T], position_ids [B, T] int64) -> logits
// [B, T, V], floating. Logits at position t score the token at t + 1.
using PolicyForward =
    std::function<torch::Tensor(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                const torch::Tensor& position_ids)>;

// Padding-free: (input_ids [1, N] int64, position_ids [1, N] int64, cu_seqlens [S + 1] int64
// on the CPU) -> logits [1, N, V], floating; see CausalLmImpl::ForwardPacked.
using PackedPolicyForward =
    std::function<torch::Tensor(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                                const torch::Tensor& cu_seqlens)>;

// Mirrors actor_rollout_ref.actor.* (and rollout.temperature) of the verl config.
struct ActorOptions {
  int64_t ppo_mini_batch_size = 256;      // samples per optimizer step (prompts x rollout.n)
  int64_t ppo_micro_batch_size = 8;       // samples per forward/backward (gradient accumulation)
  int64_t log_prob_micro_batch_size = 0;  // samples per forward in ComputeLogProbs; 0: micro
  // verl's dynamic batch size: micro-batches by a token budget instead of the counts above
  // (micro_batches.h); 0 = off.
  int64_t ppo_max_token_len = 0;       // of the update (actor.use_dynamic_bsz)
  int64_t log_prob_max_token_len = 0;  // of ComputeLogProbs (rollout.log_prob_use_dynamic_bsz)
  int64_t ppo_epochs = 1;
  // model.use_remove_padding: every forward packs its micro-batch into one row (the packed
  // forward Create is given); results equal the padded forward's to rounding.
  bool remove_padding = false;
  // trainer.balance_batch: in a group, each mini-batch's rows go to the ranks balanced by
  // tokens (SplitAcrossRanks); false: in order (SplitInOrder). The result is the same.
  bool balance_batch = true;
  bool shuffle = false;  // permute the batch (per epoch) before splitting into mini-batches
  uint64_t seed = 1;     // seeds that permutation
  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;
  double clip_ratio_c = 3.0;
  grpo::LossAggMode loss_agg_mode = grpo::LossAggMode::kTokenMean;
  // policy_loss.loss_mode and what its modes read (grpo::PolicyLossOptions, verl's defaults).
  grpo::PolicyLossMode loss_mode = grpo::PolicyLossMode::kVanilla;
  double tau_pos = 1.0;  // sapo
  double tau_neg = 1.05;
  double clip_cov_ratio = 0.0002;  // clip_cov
  double clip_cov_lb = 1.0;
  double clip_cov_ub = 5.0;
  double kl_cov_ratio = 0.0002;  // kl_cov
  double ppo_kl_coef = 0.1;
  // seq-mean-token-sum-norm divisor, > 0 in that mode: the trainer sets
  // actor.loss_scale_factor, by default data.max_response_length (verl's padded length).
  double loss_scale_factor = -1;
  double entropy_coeff = 0.0;
  bool use_kl_loss = false;
  double kl_loss_coef = 0.001;
  grpo::KlEstimator kl_loss_type = grpo::KlType::kLowVarKl;
  double grad_clip = 1.0;    // max total L2 norm of the gradient; <= 0 disables clipping
  double temperature = 1.0;  // logits are divided by it before log-softmax, as in verl
  double lr = 1e-6;          // AdamW
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0.01;
  double adam_eps = 1e-8;
};

struct LogProbs {
  torch::Tensor log_probs;    // [B, T] float of the logits' dtype; 0 in column 0
  torch::Tensor entropy;      // [B, T] entropy of the distribution predicting each token, or
                              // undefined when not asked for
  int64_t micro_batches = 0;  // forward passes taken
};

struct SftResult {
  double loss = 0;       // token-mean cross-entropy over response tokens
  double grad_norm = 0;  // total L2 norm before clipping
  bool skipped = false;  // the norm was not finite and the optimizer step was skipped
};

class Actor {
 public:
  // Checks the options (sizes >= 1, mini-batch divisible by micro-batch, temperature > 0,
  // clip ratios as grpo::PolicyLoss requires, lr >= 0, betas in [0, 1)) and builds AdamW over
  // the module's parameters that require grad, or over `masters` when the policy is kept in a
  // lower precision (master_weights.h; shared with the other actors of the same policy).
  //
  // With a `group` of W > 1 ranks (data parallelism; not owned, outlives the actor) every rank
  // holds the whole policy and is given the whole batch; each mini-batch (and each log-prob
  // pass) is split across the ranks by SplitAcrossRanks, each rank cuts its share into
  // micro-batches of ppo_micro_batch_size (per rank, as verl's _per_gpu), the loss normalizers
  // are the whole mini-batch's, and gradients and metrics are summed across ranks before the
  // identical optimizer step on every rank. So the result equals W = 1's up to the order of
  // floating-point sums. ppo_mini_batch_size must then be a multiple of W (and, without a token
  // budget, its share per rank a multiple of ppo_micro_batch_size).
  //
  // With `sharded` parameters (fsdp.h; the policy's forward gathers them, and `masters` is
  // then null) the optimizer steps on this rank's fp32 shards; gradients arrive there
  // reduce-scattered during the backward pass, the clipping norm is the whole group's, and
  // every rank runs the same number of forward passes (the most any rank needs: a token
  // budget cuts that rank's rows into more micro-batches, and a rank with too few rows runs
  // a pass that contributes nothing), since each pass gathers every unit on every rank.
  static absl::StatusOr<std::unique_ptr<Actor>> Create(
      const ActorOptions& options, std::shared_ptr<torch::nn::Module> policy, PolicyForward forward,
      std::shared_ptr<MasterWeights> masters = nullptr, dist::Group* group = nullptr,
      std::shared_ptr<ShardedParameters> sharded = nullptr, PackedPolicyForward packed = nullptr);

  // Per-token log-probs (and entropies when with_entropy) of the batch under the current
  // policy, with no gradient, in micro-batches of log_prob_micro_batch_size (or by the
  // log_prob_max_token_len budget). Reads input_ids, attention_mask, position_ids and
  // response_mask only. In a group each rank computes its share of the rows and every rank
  // returns the whole batch's (float32); micro_batches counts the whole group's passes.
  absl::StatusOr<LogProbs> ComputeLogProbs(const ActorBatch& batch, bool with_entropy = false);

  // One GRPO update as verl's dp_actor.update_policy: ppo_epochs passes over the batch, each
  // split into mini-batches of ppo_mini_batch_size (B must be a multiple), each one optimizer
  // step accumulated over micro-batches. Returns the metrics (see docs/grpo.md), among them
  // rlmesh/micro_batches/update_actor, the forward/backward passes it took. As in verl, an
  // on-policy update (one mini-batch, one epoch) takes the current policy's log-probs as the
  // old ones (ratio 1); with old_from_rollout (bypass mode: batch.old_log_probs are the
  // rollout's) it keeps batch.old_log_probs, which are then the correction.
  // `step` (the global step) seeds clip_cov's choice of tokens with options.seed, so that a
  // resumed run picks what the uninterrupted one would have.
  absl::StatusOr<std::map<std::string, double>> UpdatePolicy(const ActorBatch& batch,
                                                             bool old_from_rollout = false,
                                                             int64_t step = 0);

  // One supervised step: token-mean cross-entropy (temperature 1) on the response tokens of
  // the whole batch, accumulated over micro-batches, gradient clipping, one AdamW step.
  absl::StatusOr<SftResult> SftStep(const ActorBatch& batch);

  // Writes <dir>/actor_optimizer.pt and <dir>/actor_rng.pt, and with master weights
  // <dir>/actor_master_weights.pt (each to a temporary file that is then renamed, so a crash
  // never leaves a half-written file); creates dir if needed.
  absl::Status SaveState(const std::string& dir);
  // Restores what SaveState wrote; NotFound when a file is missing.
  //
  // Sharded, rank r of W writes actor_shard_<r>_of_<W>.pt (its shards of the fp32 masters
  // and AdamW moments) and rank 0 actor_rng.pt. LoadState reads the state of any world size,
  // sharded or whole: the saved units are joined and cut again for this group (resharding),
  // or mapped onto the whole parameters; reading a sharded state into a whole policy needs
  // SetShardingUnits.
  absl::Status LoadState(const std::string& dir);
  // The policy's sharding units (CausalLmImpl::UnitParameters), for a whole policy's
  // LoadState of a sharded state.
  void SetShardingUnits(std::vector<std::vector<torch::Tensor>> units);

  // The learning rate of the next optimizer steps (the schedule's value for this update);
  // reported as actor/lr. Starts at ActorOptions::lr.
  void SetLearningRate(double lr);

  // Frees the optimizer's per-parameter state (AdamW's two moments and step counts); the
  // next step starts it afresh. The trainer calls it on the warm-up's actor once GRPO begins.
  void ReleaseOptimizerState();

  // The most bytes of training state this rank has held at an optimizer step (just after it,
  // before the gradients are cleared), counted from the storages themselves: the policy's
  // parameters (a sharded unit's released storage holds none) and their gradients, the
  // optimizer's parameters (masters or shards), their gradients and AdamW's moments, and
  // the sharded gradient and parameter shards. 0 before the first step.
  int64_t peak_state_bytes() const;

  // Optimizer steps skipped because the gradient norm was not finite, since creation.
  int64_t nonfinite_steps_total() const;
  const ActorOptions& options() const { return options_; }

 private:
  struct Totals;  // per-mini-batch normalizers, see actor.cc
  struct StepMetrics;
  // The micro-batches of the update or of a log-prob pass over `batch` (at least min_count
  // of them with a token budget, when the rows allow).
  absl::StatusOr<std::vector<std::vector<int64_t>>> Plan(const ActorBatch& batch, bool log_prob,
                                                         int64_t min_count = 0) const;
  // Sharded: `plan` as every rank runs it: the passes the busiest rank needs. Returns the
  // passes to add that compute nothing (after re-planning by tokens to fill them where it can).
  absl::StatusOr<int64_t> EqualizePasses(const ActorBatch& batch, bool log_prob,
                                         std::vector<std::vector<int64_t>>* plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sharded: a forward (and, with `backward`, a backward of zero) on row 0 of `batch`, which
  // takes part in every collective a real pass has and changes nothing.
  absl::Status EmptyPass(const ActorBatch& batch, bool backward) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Actor(const ActorOptions& options, std::shared_ptr<torch::nn::Module> policy,
        PolicyForward forward, std::unique_ptr<torch::optim::AdamW> optimizer,
        std::shared_ptr<MasterWeights> masters, dist::Group* group,
        std::shared_ptr<ShardedParameters> sharded, PackedPolicyForward packed);
  // Clears every gradient the next optimizer step would see.
  void ZeroGrad() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a backward pass (moves the gradients into the masters' accumulators, if any).
  void AfterBackward() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ScoreTokens on rows of the batch with the policy (packed with remove_padding).
  absl::StatusOr<TokenScores> Score(const ActorBatch& rows, double temperature, EntropyNeed entropy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The policy's logits, checked to be [b, t, V] floating: forward_(ids, attention_mask,
  // position_ids), or with `packed` packed_forward_(ids, position_ids, cu_seqlens).
  absl::StatusOr<torch::Tensor> Logits(const torch::Tensor& ids, const torch::Tensor& second,
                                       const torch::Tensor& third, bool packed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One GRPO mini-batch (rows `index`): accumulate gradients, clip, step.
  absl::Status UpdateMiniBatch(const ActorBatch& batch, const torch::Tensor& index, bool on_policy,
                               at::Generator* generator, StepMetrics* metrics)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The gradients in final form (the masters' fp32 gradients when there are masters), summed
  // across the group's ranks together with `partials` (this rank's share of the step's
  // metric sums, summed in place); then clips, steps (or skips when the norm is not finite)
  // and returns the norm.
  absl::StatusOr<double> ReduceClipAndStep(bool* skipped, std::vector<double>* partials)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Each rank's rows of a batch whose rows have `tokens` tokens (SplitAcrossRanks or
  // SplitInOrder; all of them alone), and this rank's of them as an index on `device`.
  std::vector<std::vector<int64_t>> Split(const std::vector<int64_t>& tokens) const;
  torch::Tensor Mine(const std::vector<std::vector<int64_t>>& split,
                     const torch::Device& device) const;
  // The rows of `batch` this rank works on: an index into the batch.
  torch::Tensor MyRows(const ActorBatch& batch) const;
  int world_size() const;
  // Sharded and whole state files into this actor's optimizer (see LoadState).
  absl::Status LoadShardedState(const std::string& dir) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadWholeStateIntoShards(const std::string& dir) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadShardedStateIntoWhole(const std::string& dir) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The state bytes peak_state_bytes() counts, now.
  int64_t StateBytes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ActorOptions options_;
  const std::shared_ptr<torch::nn::Module> policy_;
  const PolicyForward forward_;
  const PackedPolicyForward packed_forward_;          // empty unless remove_padding
  const std::shared_ptr<MasterWeights> masters_;      // null when the policy is fp32 or sharded
  const std::shared_ptr<ShardedParameters> sharded_;  // null when whole
  dist::Group* const group_;                          // null alone
  mutable absl::Mutex mu_;
  std::unique_ptr<torch::optim::AdamW> optimizer_ ABSL_GUARDED_BY(mu_);
  at::Generator shuffle_generator_ ABSL_GUARDED_BY(mu_);
  int64_t nonfinite_steps_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_state_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::vector<torch::Tensor>> sharding_units_ ABSL_GUARDED_BY(mu_);
  double lr_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rlmesh::trainer
