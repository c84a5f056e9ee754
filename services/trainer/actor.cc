#include "services/trainer/actor.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dist/group.h"
#include "common/status/status_macros.h"
#include "services/trainer/actor_state_io.h"
#include "services/trainer/micro_batches.h"

namespace rlmesh::trainer {

// Normalizers of one mini-batch, so that the sum over its micro-batches of
// weight * AggLoss(micro-batch) equals AggLoss over the whole mini-batch.
struct Actor::Totals {
  double tokens = 0;      // response tokens
  double valid_rows = 0;  // rows with at least one response token
  double rows = 0;        // all rows (geo_mean's row mean)
};

// Sums over the optimizer steps of one UpdatePolicy; reported as means.
struct Actor::StepMetrics {
  double pg_loss = 0, kl_loss = 0, entropy = 0;
  double clipfrac = 0, ppo_kl = 0, clipfrac_lower = 0;
  double grad_norm = 0;
  int64_t steps = 0;
  int64_t nonfinite = 0;
  int64_t micro_batches = 0;
  int64_t forward_tokens = 0;
  std::vector<int64_t> rank_tokens;  // in a group: each rank's tokens over the mini-batches
};

namespace {

grpo::PolicyLossOptions PolicyOptions(const ActorOptions& o) {
  grpo::PolicyLossOptions p;
  p.mode = o.loss_mode;
  p.clip_low = o.clip_ratio_low;
  p.clip_high = o.clip_ratio_high;
  p.clip_c = o.clip_ratio_c;
  p.agg = o.loss_agg_mode;
  p.loss_scale_factor = o.loss_scale_factor;
  p.tau_pos = o.tau_pos;
  p.tau_neg = o.tau_neg;
  p.clip_cov_ratio = o.clip_cov_ratio;
  p.clip_cov_lb = o.clip_cov_lb;
  p.clip_cov_ub = o.clip_cov_ub;
  p.kl_cov_ratio = o.kl_cov_ratio;
  p.ppo_kl_coef = o.ppo_kl_coef;
  return p;
}

// A seed for one mini-batch's draws from the run's seed and where the mini-batch is.
uint64_t MixSeed(uint64_t seed, std::initializer_list<int64_t> where) {
  uint64_t h = seed ^ 0x9e3779b97f4a7c15ULL;
  for (int64_t v : where) {
    h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
  }
  return h;
}

absl::Status CheckOptions(const ActorOptions& o) {
  auto bad = [](absl::string_view key, absl::string_view expected, double got) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor option ", key, ": expected ", expected, ", got ", got));
  };
  if (o.ppo_mini_batch_size < 1) return bad("ppo_mini_batch_size", ">= 1", o.ppo_mini_batch_size);
  if (o.ppo_micro_batch_size < 1) {
    return bad("ppo_micro_batch_size", ">= 1", o.ppo_micro_batch_size);
  }
  if (o.ppo_max_token_len == 0 && o.ppo_mini_batch_size % o.ppo_micro_batch_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "actor option ppo_micro_batch_size: expected a divisor of ppo_mini_batch_size ",
        o.ppo_mini_batch_size, ", got ", o.ppo_micro_batch_size));
  }
  if (o.log_prob_micro_batch_size < 0) {
    return bad("log_prob_micro_batch_size", ">= 0", o.log_prob_micro_batch_size);
  }
  if (o.ppo_epochs < 1) return bad("ppo_epochs", ">= 1", o.ppo_epochs);
  if (o.ppo_max_token_len < 0) return bad("ppo_max_token_len", ">= 0", o.ppo_max_token_len);
  if (o.log_prob_max_token_len < 0) {
    return bad("log_prob_max_token_len", ">= 0", o.log_prob_max_token_len);
  }
  if (!(o.temperature > 0)) return bad("temperature", "> 0", o.temperature);
  if (!(o.lr >= 0)) return bad("lr", ">= 0", o.lr);
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return bad("beta1", "a value in [0, 1)", o.beta1);
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return bad("beta2", "a value in [0, 1)", o.beta2);
  if (!(o.weight_decay >= 0)) return bad("weight_decay", ">= 0", o.weight_decay);
  if (!(o.adam_eps > 0)) return bad("adam_eps", "> 0", o.adam_eps);
  if (!std::isfinite(o.entropy_coeff))
    return bad("entropy_coeff", "a finite value", o.entropy_coeff);
  if (!std::isfinite(o.kl_loss_coef)) return bad("kl_loss_coef", "a finite value", o.kl_loss_coef);
  if (o.loss_agg_mode == grpo::LossAggMode::kSeqMeanTokenSumNorm && !(o.loss_scale_factor > 0)) {
    return bad("loss_scale_factor",
               "> 0 with seq-mean-token-sum-norm (the trainer sets "
               "data.max_response_length)",
               o.loss_scale_factor);
  }
  // The clip ratios and the loss mode's own options, where the mode reads them.
  if (auto s = grpo::CheckPolicyLossOptions(PolicyOptions(o)); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("actor option ", s.message()));
  }
  return absl::OkStatus();
}

// Runs f, turning a LibTorch (or other) exception into Internal with context.
template <typename F>
auto Guard(absl::string_view what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

double Scalar(const torch::Tensor& t) { return t.detach().item<double>(); }

bool fs_exists(const std::string& dir, const char* file) {
  return std::filesystem::is_regular_file(std::filesystem::path(dir) / file);
}

// The batch on the device of the policy's parameters (a no-op when it is already there).
ActorBatch OnDeviceOf(torch::nn::Module& policy, const ActorBatch& batch) {
  const auto device = policy.parameters().front().device();
  auto move = [&](const torch::Tensor& t) { return t.defined() ? t.to(device) : t; };
  return {move(batch.input_ids),     move(batch.attention_mask),    move(batch.position_ids),
          move(batch.response_mask), move(batch.old_log_probs),     move(batch.ref_log_probs),
          move(batch.advantages),    move(batch.rollout_is_weights)};
}

// The weight of a micro-batch's AggLoss within its mini-batch's AggLoss.
double MicroWeight(grpo::LossAggMode mode, double tokens, double valid_rows, double total_tokens,
                   double total_valid_rows) {
  switch (mode) {
    case grpo::LossAggMode::kTokenMean:
      return total_tokens > 0 ? tokens / total_tokens : 0;
    case grpo::LossAggMode::kSeqMeanTokenSum:
    case grpo::LossAggMode::kSeqMeanTokenMean:
      return total_valid_rows > 0 ? valid_rows / total_valid_rows : 0;
    case grpo::LossAggMode::kSeqMeanTokenSumNorm:
      return 1;
  }
  return 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Actor>> Actor::Create(
    const ActorOptions& options, std::shared_ptr<torch::nn::Module> policy, PolicyForward forward,
    std::shared_ptr<MasterWeights> masters, dist::Group* group,
    std::shared_ptr<ShardedParameters> sharded, PackedPolicyForward packed) {
  RETURN_IF_ERROR(CheckOptions(options));
  if (options.remove_padding && !packed) {
    return absl::InvalidArgumentError(
        "actor option remove_padding: needs the policy's packed forward, none was given");
  }
  if (sharded != nullptr && masters != nullptr) {
    return absl::InvalidArgumentError("policy: sharded parameters keep their own master weights");
  }
  const int64_t ranks = group != nullptr ? group->world_size() : 1;
  if (options.ppo_mini_batch_size % ranks != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor option ppo_mini_batch_size: expected a multiple of the ", ranks,
                     " trainer ranks (each takes an equal share of a mini-batch), got ",
                     options.ppo_mini_batch_size));
  }
  if (ranks > 1 && options.ppo_max_token_len == 0 &&
      (options.ppo_mini_batch_size / ranks) % options.ppo_micro_batch_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "actor option ppo_micro_batch_size: expected a divisor of the mini-batch share of each "
        "of the ",
        ranks, " ranks, ", options.ppo_mini_batch_size / ranks, ", got ",
        options.ppo_micro_batch_size));
  }
  if (policy == nullptr) return absl::InvalidArgumentError("policy: module is null");
  if (!forward) return absl::InvalidArgumentError("policy: forward function is empty");
  std::vector<torch::Tensor> params;
  if (sharded != nullptr) {
    params = sharded->masters();
  } else if (masters != nullptr) {
    params = masters->masters();
  } else {
    for (const auto& p : policy->parameters()) {
      if (p.requires_grad()) params.push_back(p);
    }
  }
  if (params.empty()) return absl::InvalidArgumentError("policy: has no trainable parameters");
  auto adamw = torch::optim::AdamWOptions(options.lr)
                   .betas({options.beta1, options.beta2})
                   .eps(options.adam_eps)
                   .weight_decay(options.weight_decay);
  auto optimizer = std::make_unique<torch::optim::AdamW>(std::move(params), adamw);
  return std::unique_ptr<Actor>(new Actor(options, std::move(policy), std::move(forward),
                                          std::move(optimizer), std::move(masters), group,
                                          std::move(sharded), std::move(packed)));
}

Actor::Actor(const ActorOptions& options, std::shared_ptr<torch::nn::Module> policy,
             PolicyForward forward, std::unique_ptr<torch::optim::AdamW> optimizer,
             std::shared_ptr<MasterWeights> masters, dist::Group* group,
             std::shared_ptr<ShardedParameters> sharded, PackedPolicyForward packed)
    : options_(options),
      policy_(std::move(policy)),
      forward_(std::move(forward)),
      packed_forward_(std::move(packed)),
      masters_(std::move(masters)),
      sharded_(std::move(sharded)),
      group_(group),
      optimizer_(std::move(optimizer)),
      shuffle_generator_(at::detail::createCPUGenerator(options.seed)),
      lr_(options.lr) {}

void Actor::SetLearningRate(double lr) {
  absl::MutexLock lock(&mu_);
  lr_ = lr;
  for (auto& group : optimizer_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
}

void Actor::ReleaseOptimizerState() {
  absl::MutexLock lock(&mu_);
  optimizer_->state().clear();
}

int Actor::world_size() const { return group_ != nullptr ? group_->world_size() : 1; }

namespace {

std::vector<int64_t> RowTokens(const ActorBatch& batch) {
  const auto per_row = batch.attention_mask.to(torch::kCPU).to(torch::kInt64).sum(1).contiguous();
  return {per_row.data_ptr<int64_t>(), per_row.data_ptr<int64_t>() + per_row.numel()};
}

// Each rank's tokens under `split`.
std::vector<int64_t> Loads(const std::vector<std::vector<int64_t>>& split,
                           const std::vector<int64_t>& tokens) {
  std::vector<int64_t> loads;
  for (const auto& rows : split) {
    int64_t sum = 0;
    for (int64_t row : rows) sum += tokens[static_cast<size_t>(row)];
    loads.push_back(sum);
  }
  return loads;
}

}  // namespace

std::vector<std::vector<int64_t>> Actor::Split(const std::vector<int64_t>& tokens) const {
  if (!options_.balance_batch) {
    return SplitInOrder(static_cast<int64_t>(tokens.size()), world_size());
  }
  return SplitAcrossRanks(tokens, world_size());
}

torch::Tensor Actor::Mine(const std::vector<std::vector<int64_t>>& split,
                          const torch::Device& device) const {
  return torch::tensor(split[static_cast<size_t>(group_ != nullptr ? group_->rank() : 0)],
                       torch::kInt64)
      .to(device);
}

torch::Tensor Actor::MyRows(const ActorBatch& batch) const {
  return Mine(Split(RowTokens(batch)), batch.input_ids.device());
}

int64_t Actor::peak_state_bytes() const {
  absl::MutexLock lock(&mu_);
  return peak_state_bytes_;
}

int64_t Actor::StateBytes() const {
  std::set<const c10::StorageImpl*> seen;
  int64_t bytes = 0;
  auto add = [&](const torch::Tensor& t) {
    if (!t.defined() || !t.has_storage()) return;
    const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    if (seen.insert(impl).second) bytes += static_cast<int64_t>(impl->nbytes());
  };
  for (const auto& p : policy_->parameters()) {
    add(p);
    add(p.grad());
  }
  for (const auto& group : optimizer_->param_groups()) {
    for (const auto& p : group.params()) {
      add(p);
      add(p.grad());
      auto it = optimizer_->state().find(OptimizerStateKey(*optimizer_, p));
      if (it == optimizer_->state().end()) continue;
      const auto& state = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      add(state.exp_avg());
      add(state.exp_avg_sq());
      add(state.max_exp_avg_sq());
    }
  }
  if (sharded_ != nullptr) bytes += sharded_->ShardBytes();
  return bytes;
}

int64_t Actor::nonfinite_steps_total() const {
  absl::MutexLock lock(&mu_);
  return nonfinite_steps_total_;
}

absl::StatusOr<torch::Tensor> Actor::Logits(const torch::Tensor& ids, const torch::Tensor& second,
                                            const torch::Tensor& third, bool packed) {
  torch::Tensor logits;
  try {
    logits = packed ? packed_forward_(ids, second, third) : forward_(ids, second, third);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("policy forward: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("policy forward: ", e.what()));
  }
  if (!logits.defined() || logits.dim() != 3 || logits.size(0) != ids.size(0) ||
      logits.size(1) != ids.size(1) || !logits.is_floating_point()) {
    return absl::InternalError(absl::StrCat(
        "policy forward: expected floating logits [", ids.size(0), ", ", ids.size(1), ", V], got ",
        logits.defined() ? logits.toString() : "undefined", " of shape [",
        logits.defined() ? absl::StrJoin(logits.sizes(), ", ") : "", "]"));
  }
  return logits;
}

absl::StatusOr<TokenScores> Actor::Score(const ActorBatch& rows, double temperature,
                                         EntropyNeed entropy) {
  return ScoreTokens(
      rows, temperature, options_.remove_padding, entropy,
      [this](const torch::Tensor& ids, const torch::Tensor& second, const torch::Tensor& third,
             bool packed)
          ABSL_NO_THREAD_SAFETY_ANALYSIS { return Logits(ids, second, third, packed); });
}

absl::StatusOr<std::vector<std::vector<int64_t>>> Actor::Plan(const ActorBatch& batch,
                                                              bool log_prob,
                                                              int64_t min_count) const {
  MicroBatching how;
  how.min_count = min_count;
  const int64_t budget = log_prob ? options_.log_prob_max_token_len : options_.ppo_max_token_len;
  how.by_tokens = budget > 0;
  how.max_tokens = budget;
  how.samples = log_prob && options_.log_prob_micro_batch_size > 0
                    ? options_.log_prob_micro_batch_size
                    : options_.ppo_micro_batch_size;
  std::vector<int64_t> tokens;
  if (how.by_tokens) {
    const auto per_row = batch.attention_mask.to(torch::kCPU).to(torch::kInt64).sum(1).contiguous();
    tokens.assign(per_row.data_ptr<int64_t>(), per_row.data_ptr<int64_t>() + per_row.numel());
  } else {
    tokens.assign(static_cast<size_t>(batch.input_ids.size(0)), 0);
  }
  auto plan = PlanMicroBatches(tokens, how);
  if (!plan.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(log_prob ? "log_prob_max_token_len_per_gpu: " : "ppo_max_token_len_per_gpu: ",
                     plan.status().message()));
  }
  return plan;
}

absl::StatusOr<int64_t> Actor::EqualizePasses(const ActorBatch& batch, bool log_prob,
                                              std::vector<std::vector<int64_t>>* plan) {
  if (sharded_ == nullptr || world_size() == 1) return 0;
  auto counts = torch::zeros({world_size()}, torch::kFloat64);
  counts[group_->rank()] = static_cast<double>(plan->size());
  RETURN_IF_ERROR(group_->AllReduceSum({counts}, "counting the micro-batches"));
  const auto most = static_cast<int64_t>(counts.max().item<double>());
  if (static_cast<int64_t>(plan->size()) < most) {
    ASSIGN_OR_RETURN(*plan, Plan(batch, log_prob, most));
  }
  return most - static_cast<int64_t>(plan->size());
}

absl::Status Actor::EmptyPass(const ActorBatch& batch, bool backward) {
  const auto row = torch::zeros({1}, torch::kInt64).to(batch.input_ids.device());
  const ActorBatch one = SelectRows(batch, row);
  std::optional<torch::NoGradGuard> no_grad;
  if (!backward) no_grad.emplace();
  ASSIGN_OR_RETURN(auto scores, Score(one, /*temperature=*/1.0, EntropyNeed::kNone));
  if (backward) {
    (scores.log_probs.sum() * 0).backward();
    AfterBackward();
  }
  return absl::OkStatus();
}

absl::StatusOr<LogProbs> Actor::ComputeLogProbs(const ActorBatch& input, bool with_entropy) {
  RETURN_IF_ERROR(ValidateBatch(input, {}));
  absl::MutexLock lock(&mu_);
  return Guard("ComputeLogProbs", [&]() -> absl::StatusOr<LogProbs> {
    torch::NoGradGuard no_grad;
    const ActorBatch whole = OnDeviceOf(*policy_, input);
    policy_->eval();
    // In a group: this rank's rows; their results go back to their places below.
    const bool shared = world_size() > 1;
    const torch::Tensor mine = shared ? MyRows(whole) : torch::Tensor();
    const ActorBatch batch = shared ? SelectRows(whole, mine) : whole;
    ASSIGN_OR_RETURN(auto plan, Plan(batch, /*log_prob=*/true));
    ASSIGN_OR_RETURN(const int64_t empty, EqualizePasses(batch, /*log_prob=*/true, &plan));
    for (int64_t i = 0; i < empty; ++i) RETURN_IF_ERROR(EmptyPass(whole, /*backward=*/false));
    LogProbs out;
    for (const std::vector<int64_t>& rows : plan) {
      const auto index = torch::tensor(rows, torch::kInt64).to(batch.input_ids.device());
      const ActorBatch micro = SelectRows(batch, index);
      ASSIGN_OR_RETURN(auto scores, Score(micro, options_.temperature,
                                          with_entropy ? EntropyNeed::kValue : EntropyNeed::kNone));
      const auto& logp = scores.log_probs;
      if (!out.log_probs.defined())
        out.log_probs = torch::zeros_like(batch.input_ids, logp.options());
      out.log_probs.index_copy_(0, index, logp);
      if (with_entropy) {
        if (!out.entropy.defined()) out.entropy = torch::zeros_like(out.log_probs);
        out.entropy.index_copy_(0, index, scores.entropy.to(out.entropy.dtype()));
      }
      ++out.micro_batches;
    }
    if (out.log_probs.defined()) out.log_probs = out.log_probs.to(torch::kCPU);
    if (out.entropy.defined()) out.entropy = out.entropy.to(torch::kCPU);
    if (shared) {
      // Zeros but in this rank's rows, summed across the ranks: every row from its one rank.
      const auto rows = mine.to(torch::kCPU);
      auto place = [&](const torch::Tensor& part) {
        auto full = torch::zeros(input.input_ids.sizes(), torch::kFloat32);
        if (part.defined()) full.index_copy_(0, rows, part.to(torch::kFloat32));
        return full;
      };
      out.log_probs = place(out.log_probs);
      if (with_entropy) out.entropy = place(out.entropy);
      auto passes = torch::tensor({static_cast<double>(out.micro_batches)}, torch::kFloat64);
      std::vector<torch::Tensor> parts = {out.log_probs, passes};
      if (with_entropy) parts.push_back(out.entropy);
      RETURN_IF_ERROR(group_->AllReduceSum(parts, "gathering log-probs"));
      out.micro_batches = static_cast<int64_t>(passes.item<double>());
    }
    return out;
  });
}

void Actor::ZeroGrad() {
  optimizer_->zero_grad();  // the optimizer's parameters: the masters, or the policy's
  if (masters_ != nullptr) masters_->ZeroGradients();
  if (sharded_ != nullptr) {
    sharded_->ReleaseAll();  // after a failed pass, a unit may still be gathered
    sharded_->ZeroGradients();
  }
}

void Actor::AfterBackward() {
  if (masters_ != nullptr) masters_->AccumulateGradients();
  if (sharded_ != nullptr) sharded_->AfterBackward();
}

absl::StatusOr<double> Actor::ReduceClipAndStep(bool* skipped, std::vector<double>* partials) {
  const double max_norm =
      options_.grad_clip > 0 ? options_.grad_clip : std::numeric_limits<double>::infinity();
  if (sharded_ != nullptr) {
    // The gradients are already reduced into the shards; the norm is the whole group's.
    sharded_->ReleaseAll();
    sharded_->FinishGradients();
    if (world_size() > 1) {
      auto sums = torch::tensor(*partials, torch::kFloat64);
      RETURN_IF_ERROR(group_->AllReduceSum({sums}, "summing the step's metrics"));
      partials->assign(sums.data_ptr<double>(), sums.data_ptr<double>() + sums.numel());
    }
    ASSIGN_OR_RETURN(const double squares, sharded_->GlobalGradSquareSum());
    const double norm = std::sqrt(squares);
    *skipped = !std::isfinite(norm);
    if (*skipped) {
      fprintf(stderr, "[trainer] actor: gradient norm is %g; skipping the optimizer step\n", norm);
      ZeroGrad();
      ++nonfinite_steps_total_;
      return norm;
    }
    // As torch::nn::utils::clip_grad_norm_ scales.
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1) {
      torch::NoGradGuard no_grad;
      for (const auto& m : sharded_->masters()) m.mutable_grad().mul_(coef);
    }
    optimizer_->step();
    peak_state_bytes_ = std::max(peak_state_bytes_, StateBytes());
    sharded_->CopyToParameters();
    return norm;
  }
  // With master weights the norm, the clipping and the step are all in fp32 on the masters.
  if (masters_ != nullptr) masters_->FinishGradients();
  if (world_size() > 1) {
    // Every rank sums the same tensors in the same order: a rank without rows in this
    // mini-batch contributes zeros.
    std::vector<torch::Tensor> grads;
    auto add = [&](torch::Tensor p) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      grads.push_back(p.grad());
    };
    if (masters_ != nullptr) {
      for (const auto& p : masters_->masters()) add(p);
    } else {
      for (const auto& p : policy_->parameters()) {
        if (p.requires_grad()) add(p);
      }
    }
    const size_t n_grads = grads.size();
    auto sums = torch::tensor(*partials, torch::kFloat64);
    grads.push_back(sums);
    RETURN_IF_ERROR(group_->AllReduceSum(grads, "reducing the gradients"));
    partials->assign(sums.data_ptr<double>(), sums.data_ptr<double>() + sums.numel());
    // The sum is taken in fp32; with reduce_dtype bfloat16 the reduced gradient is rounded to it.
    if (masters_ != nullptr && masters_->reduce_dtype() != torch::kFloat32) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < n_grads; ++i) grads[i].copy_(grads[i].to(masters_->reduce_dtype()));
    }
  }
  const double norm = torch::nn::utils::clip_grad_norm_(
      masters_ != nullptr ? masters_->masters() : policy_->parameters(), max_norm);
  *skipped = !std::isfinite(norm);
  if (*skipped) {
    fprintf(stderr, "[trainer] actor: gradient norm is %g; skipping the optimizer step\n", norm);
    ZeroGrad();
    ++nonfinite_steps_total_;
  } else {
    optimizer_->step();
    peak_state_bytes_ = std::max(peak_state_bytes_, StateBytes());
    if (masters_ != nullptr) masters_->CopyToParameters();
  }
  return norm;
}

absl::Status Actor::UpdateMiniBatch(const ActorBatch& batch, const torch::Tensor& index,
                                    bool on_policy, at::Generator* generator,
                                    StepMetrics* metrics) {
  const ActorBatch whole = SelectRows(batch, index);
  // The normalizers are the whole mini-batch's on every rank.
  Totals totals;
  {
    const auto all_tokens = whole.response_mask.to(torch::kFloat64).sum(1);
    totals.tokens = Scalar(all_tokens.sum());
    totals.valid_rows = Scalar((all_tokens > 0).sum());
    totals.rows = static_cast<double>(all_tokens.size(0));
  }
  ActorBatch mini = whole;
  if (world_size() > 1) {
    const std::vector<int64_t> tokens = RowTokens(whole);
    const auto split = Split(tokens);
    const auto loads = Loads(split, tokens);
    metrics->rank_tokens.resize(loads.size(), 0);
    for (size_t r = 0; r < loads.size(); ++r) metrics->rank_tokens[r] += loads[r];
    mini = SelectRows(whole, Mine(split, whole.input_ids.device()));
  }
  const auto row_tokens = mini.response_mask.to(torch::kFloat64).sum(1);
  const auto mode = options_.loss_agg_mode;
  const grpo::PolicyLossOptions policy = PolicyOptions(options_);
  // The policy term's own aggregation (gspo and sapo force seq-mean-token-mean, geo_mean takes
  // the mean over rows); entropy and KL follow loss_agg_mode.
  const grpo::PolicyAggregation policy_agg = grpo::PolicyLossAggregation(policy);
  double pg_loss = 0, kl_loss = 0, entropy_loss = 0, clipfrac = 0, ppo_kl = 0, lower = 0;
  int64_t passes = 0, tokens = 0;

  ZeroGrad();
  ASSIGN_OR_RETURN(auto plan, Plan(mini, /*log_prob=*/false));
  ASSIGN_OR_RETURN(const int64_t empty, EqualizePasses(mini, /*log_prob=*/false, &plan));
  for (int64_t i = 0; i < empty; ++i) RETURN_IF_ERROR(EmptyPass(mini, /*backward=*/true));
  // Sharded, every pass takes part in the collectives, even one without response tokens.
  const bool every_pass = sharded_ != nullptr;
  for (const std::vector<int64_t>& micro_rows : plan) {
    const auto micro_index = torch::tensor(micro_rows, torch::kInt64).to(mini.input_ids.device());
    const ActorBatch micro = SelectRows(mini, micro_index);
    const auto& mask = micro.response_mask;
    const auto tokens_here = row_tokens.index_select(0, micro_index);
    const double weight =
        MicroWeight(mode, Scalar(tokens_here.sum()), Scalar((tokens_here > 0).sum()), totals.tokens,
                    totals.valid_rows);
    const double pg_weight =
        policy_agg.row_mean
            ? static_cast<double>(micro_rows.size()) / totals.rows
            : MicroWeight(policy_agg.mode, Scalar(tokens_here.sum()),
                          Scalar((tokens_here > 0).sum()), totals.tokens, totals.valid_rows);
    const double token_share = totals.tokens > 0 ? Scalar(tokens_here.sum()) / totals.tokens : 0;
    // No response token: every term is 0 (geo_mean's empty rows add 0 to its row mean).
    if (token_share == 0 && !every_pass) continue;

    ASSIGN_OR_RETURN(auto scores, Score(micro, options_.temperature,
                                        options_.entropy_coeff != 0 ? EntropyNeed::kDifferentiable
                                                                    : EntropyNeed::kValue));
    const auto& logp = scores.log_probs;
    // verl: with one mini-batch and one epoch the policy has not moved since the old
    // log-probs were computed, so they are replaced by the current ones (ratio exactly 1).
    const auto old_logp = on_policy ? logp.detach() : micro.old_log_probs;
    ASSIGN_OR_RETURN(
        auto pg,
        grpo::ComputePolicyLoss(
            old_logp, logp, micro.advantages, mask, policy, micro.rollout_is_weights,
            generator != nullptr ? std::optional<at::Generator>(*generator) : std::nullopt));
    auto loss = pg.loss * pg_weight;
    {
      // The entropy has a graph only when it is part of the loss (Score above).
      ASSIGN_OR_RETURN(auto entropy,
                       grpo::AggLoss(scores.entropy, mask, mode, options_.loss_scale_factor));
      if (options_.entropy_coeff != 0) loss = loss - (weight * options_.entropy_coeff) * entropy;
      entropy_loss += weight * Scalar(entropy);
    }
    if (options_.use_kl_loss) {
      ASSIGN_OR_RETURN(auto kld, grpo::KlPenalty(logp, micro.ref_log_probs, options_.kl_loss_type));
      ASSIGN_OR_RETURN(auto kl, grpo::AggLoss(kld, mask, mode, options_.loss_scale_factor));
      loss = loss + (weight * options_.kl_loss_coef) * kl;
      kl_loss += weight * Scalar(kl);
    }
    if (weight != 0 || pg_weight != 0 || every_pass) {
      loss.backward();
      AfterBackward();
    }
    ++passes;
    tokens += scores.tokens;
    pg_loss += pg_weight * Scalar(pg.loss);
    // Metrics a mode does not report stay 0 and are left out of UpdatePolicy's map.
    auto share = [&](const torch::Tensor& m) {
      return m.defined() ? token_share * Scalar(m) : 0.0;
    };
    clipfrac += share(pg.clipfrac);
    ppo_kl += share(pg.ppo_kl);
    lower += share(pg.clipfrac_lower);
  }
  bool skipped = false;
  std::vector<double> partials = {pg_loss,
                                  kl_loss,
                                  entropy_loss,
                                  clipfrac,
                                  ppo_kl,
                                  lower,
                                  static_cast<double>(passes),
                                  static_cast<double>(tokens)};
  ASSIGN_OR_RETURN(const double norm, ReduceClipAndStep(&skipped, &partials));
  metrics->pg_loss += partials[0];
  metrics->kl_loss += partials[1];
  metrics->entropy += partials[2];
  metrics->clipfrac += partials[3];
  metrics->ppo_kl += partials[4];
  metrics->clipfrac_lower += partials[5];
  metrics->micro_batches += static_cast<int64_t>(partials[6]);
  metrics->forward_tokens += static_cast<int64_t>(partials[7]);
  metrics->grad_norm += norm;
  metrics->steps += 1;
  metrics->nonfinite += skipped ? 1 : 0;
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, double>> Actor::UpdatePolicy(const ActorBatch& input,
                                                                  bool old_from_rollout,
                                                                  int64_t step) {
  RETURN_IF_ERROR(ValidateBatch(
      input, {.old_log_probs = true, .ref_log_probs = options_.use_kl_loss, .advantages = true}));
  const int64_t rows = input.input_ids.size(0);
  if (rows % options_.ppo_mini_batch_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input_ids: expected a number of samples that is a multiple of ppo_mini_batch_size ",
        options_.ppo_mini_batch_size, ", got ", rows));
  }
  absl::MutexLock lock(&mu_);
  return Guard("UpdatePolicy", [&]() -> absl::StatusOr<std::map<std::string, double>> {
    policy_->train();
    const ActorBatch batch = OnDeviceOf(*policy_, input);
    const int64_t mini_batches = rows / options_.ppo_mini_batch_size;
    const bool on_policy = mini_batches == 1 && options_.ppo_epochs == 1 && !old_from_rollout;
    StepMetrics sums;
    for (int64_t epoch = 0; epoch < options_.ppo_epochs; ++epoch) {
      const auto order =
          (options_.shuffle ? torch::randperm(rows, shuffle_generator_, torch::kInt64)
                            : torch::arange(rows, torch::kInt64))
              .to(batch.input_ids.device());
      for (int64_t m = 0; m < mini_batches; ++m) {
        const auto index =
            order.narrow(0, m * options_.ppo_mini_batch_size, options_.ppo_mini_batch_size);
        // clip_cov draws its tokens from a generator of (seed, step, epoch, mini-batch, rank).
        std::optional<at::Generator> generator;
        if (options_.loss_mode == grpo::PolicyLossMode::kClipCov) {
          generator = at::detail::createCPUGenerator(
              MixSeed(options_.seed, {step, epoch, m, group_ != nullptr ? group_->rank() : 0}));
        }
        RETURN_IF_ERROR(
            UpdateMiniBatch(batch, index, on_policy, generator ? &*generator : nullptr, &sums));
      }
    }
    ZeroGrad();
    const double steps = static_cast<double>(sums.steps);
    std::map<std::string, double> metrics = {
        {"actor/pg_loss", sums.pg_loss / steps},
        {"actor/entropy", sums.entropy / steps},
        {"actor/grad_norm", sums.grad_norm / steps},
        {"actor/lr", lr_},
        {"actor/grad_norm_nonfinite_steps", static_cast<double>(sums.nonfinite)},
        {"actor/optimizer_steps", steps - static_cast<double>(sums.nonfinite)},
        {"rlmesh/micro_batches/update_actor", static_cast<double>(sums.micro_batches)},
        {"rlmesh/forward_tokens/update_actor", static_cast<double>(sums.forward_tokens)},
    };
    // verl's pg_metrics of the loss mode, and no others.
    const grpo::ReportedMetrics reported = grpo::PolicyLossMetrics(options_.loss_mode);
    if (reported.clipfrac) metrics["actor/pg_clipfrac"] = sums.clipfrac / steps;
    if (reported.ppo_kl) metrics["actor/ppo_kl"] = sums.ppo_kl / steps;
    if (reported.clipfrac_lower) metrics["actor/pg_clipfrac_lower"] = sums.clipfrac_lower / steps;
    if (options_.use_kl_loss) {
      metrics["actor/kl_loss"] = sums.kl_loss / steps;
      metrics["actor/kl_coef"] = options_.kl_loss_coef;
    }
    if (world_size() > 1) {
      // verl's global_seqlen/*: the batch's tokens per rank in order (min, max, minmax_diff)
      // and balanced (balanced_min, balanced_max), and their mean; then what this update's
      // split (balance_batch) gave the ranks over its mini-batches.
      const std::vector<int64_t> tokens = RowTokens(batch);
      const auto in_order = Loads(SplitInOrder(rows, world_size()), tokens);
      const auto balanced = Loads(SplitAcrossRanks(tokens, world_size()), tokens);
      const auto [low, high] = std::minmax_element(in_order.begin(), in_order.end());
      const auto [balanced_low, balanced_high] =
          std::minmax_element(balanced.begin(), balanced.end());
      double total = 0;
      for (int64_t t : tokens) total += static_cast<double>(t);
      metrics["global_seqlen/min"] = static_cast<double>(*low);
      metrics["global_seqlen/max"] = static_cast<double>(*high);
      metrics["global_seqlen/minmax_diff"] = static_cast<double>(*high - *low);
      metrics["global_seqlen/balanced_min"] = static_cast<double>(*balanced_low);
      metrics["global_seqlen/balanced_max"] = static_cast<double>(*balanced_high);
      metrics["global_seqlen/mean"] = total / world_size();
      const auto [used_low, used_high] =
          std::minmax_element(sums.rank_tokens.begin(), sums.rank_tokens.end());
      metrics["rlmesh/rank_tokens/min"] = static_cast<double>(*used_low);
      metrics["rlmesh/rank_tokens/max"] = static_cast<double>(*used_high);
    }
    return metrics;
  });
}

absl::StatusOr<SftResult> Actor::SftStep(const ActorBatch& input) {
  RETURN_IF_ERROR(ValidateBatch(input, {}));
  absl::MutexLock lock(&mu_);
  return Guard("SftStep", [&]() -> absl::StatusOr<SftResult> {
    policy_->train();
    const ActorBatch whole = OnDeviceOf(*policy_, input);
    const double total_tokens = Scalar(whole.response_mask.to(torch::kFloat64).sum());
    if (total_tokens == 0) {
      return absl::InvalidArgumentError("response_mask: no response token in the batch");
    }
    const ActorBatch batch = world_size() > 1 ? SelectRows(whole, MyRows(whole)) : whole;
    const auto row_tokens = batch.response_mask.to(torch::kFloat64).sum(1);
    SftResult result;
    ZeroGrad();
    const int64_t rows = batch.input_ids.size(0);
    std::vector<std::vector<int64_t>> plan((rows + options_.ppo_micro_batch_size - 1) /
                                           options_.ppo_micro_batch_size);
    ASSIGN_OR_RETURN(const int64_t empty, EqualizePasses(batch, /*log_prob=*/false, &plan));
    for (int64_t i = 0; i < empty; ++i) RETURN_IF_ERROR(EmptyPass(whole, /*backward=*/true));
    const bool every_pass = sharded_ != nullptr;
    for (int64_t start = 0; start < rows; start += options_.ppo_micro_batch_size) {
      const int64_t n = std::min(options_.ppo_micro_batch_size, rows - start);
      const double weight = Scalar(row_tokens.narrow(0, start, n).sum()) / total_tokens;
      if (weight == 0 && !every_pass) continue;
      const ActorBatch micro = SelectRows(
          batch, torch::arange(start, start + n, torch::kInt64).to(batch.input_ids.device()));
      ASSIGN_OR_RETURN(auto scores, Score(micro, /*temperature=*/1.0, EntropyNeed::kNone));
      ASSIGN_OR_RETURN(auto mean_logp, grpo::AggLoss(scores.log_probs, micro.response_mask,
                                                     grpo::LossAggMode::kTokenMean));
      const auto loss = -mean_logp * weight;
      loss.backward();
      AfterBackward();
      result.loss += Scalar(loss);
    }
    std::vector<double> partials = {result.loss};
    ASSIGN_OR_RETURN(result.grad_norm, ReduceClipAndStep(&result.skipped, &partials));
    result.loss = partials[0];
    ZeroGrad();
    return result;
  });
}

absl::Status Actor::SaveState(const std::string& dir) {
  absl::MutexLock lock(&mu_);
  return Guard("SaveState", [&]() -> absl::Status {
    if (sharded_ != nullptr) {
      std::vector<int64_t> numel;
      for (int u = 0; u < sharded_->num_units(); ++u) numel.push_back(sharded_->unit_numel(u));
      // Hybrid: every replica holds the same shards; the first writes them.
      if (sharded_->replica() != 0) return absl::OkStatus();
      RETURN_IF_ERROR(WriteShardState(dir, sharded_->rank(), sharded_->world_size(), numel,
                                      sharded_->masters(), *optimizer_));
      if (sharded_->rank() != 0) return absl::OkStatus();
      return WriteRngState(dir, shuffle_generator_, nonfinite_steps_total_);
    }
    RETURN_IF_ERROR(WriteActorState(dir, *optimizer_, shuffle_generator_, nonfinite_steps_total_));
    return masters_ != nullptr ? WriteMasterWeights(dir, masters_->masters()) : absl::OkStatus();
  });
}

void Actor::SetShardingUnits(std::vector<std::vector<torch::Tensor>> units) {
  absl::MutexLock lock(&mu_);
  sharding_units_ = std::move(units);
}

namespace {

// Where each of `params` sits in the flat vectors of `layout`: (unit, offset) by identity.
absl::StatusOr<std::vector<std::pair<int, int64_t>>> PlacesIn(
    const std::vector<torch::Tensor>& params, const std::vector<const FlatUnit*>& layout) {
  std::map<const c10::TensorImpl*, std::pair<int, int64_t>> where;
  for (size_t u = 0; u < layout.size(); ++u) {
    for (size_t i = 0; i < layout[u]->params.size(); ++i) {
      where[layout[u]->params[i].unsafeGetTensorImpl()] = {static_cast<int>(u),
                                                           layout[u]->param_offsets[i]};
    }
  }
  std::vector<std::pair<int, int64_t>> places;
  for (const auto& p : params) {
    auto it = where.find(p.unsafeGetTensorImpl());
    if (it == where.end()) {
      return absl::InternalError("a trained parameter is in no sharding unit");
    }
    places.push_back(it->second);
  }
  return places;
}

void SetAdamState(torch::optim::Optimizer& optimizer, const torch::Tensor& param, int64_t step,
                  const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) {
  const auto key = OptimizerStateKey(optimizer, param);
  if (step == 0) {
    optimizer.state().erase(key);
    return;
  }
  auto state = std::make_unique<torch::optim::AdamWParamState>();
  state->step(step);
  state->exp_avg(exp_avg.to(param.device()).clone());
  state->exp_avg_sq(exp_avg_sq.to(param.device()).clone());
  optimizer.state()[key] = std::move(state);
}

// The trained parameters of a whole policy, in the optimizer's order.
std::vector<torch::Tensor> TrainedParameters(torch::nn::Module& policy) {
  std::vector<torch::Tensor> params;
  for (const auto& p : policy.parameters()) {
    if (p.requires_grad()) params.push_back(p);
  }
  return params;
}

}  // namespace

absl::Status Actor::LoadShardedState(const std::string& dir) {
  std::vector<int64_t> numel;
  for (int u = 0; u < sharded_->num_units(); ++u) numel.push_back(sharded_->unit_numel(u));
  ASSIGN_OR_RETURN(const auto units, ReadShardStates(dir, numel));
  torch::NoGradGuard no_grad;
  const int w = sharded_->world_size(), r = sharded_->rank();
  for (int u = 0; u < sharded_->num_units(); ++u) {
    const int64_t n = sharded_->shard_numel(u);
    auto mine = [&](const torch::Tensor& whole) {
      return torch::constant_pad_nd(whole, {0, n * w - whole.numel()}).narrow(0, r * n, n);
    };
    const torch::Tensor& master = sharded_->masters()[u];
    master.copy_(mine(units[u].master));
    SetAdamState(*optimizer_, master, units[u].step,
                 units[u].step > 0 ? mine(units[u].exp_avg) : torch::Tensor(),
                 units[u].step > 0 ? mine(units[u].exp_avg_sq) : torch::Tensor());
  }
  sharded_->CopyToParameters();
  return absl::OkStatus();
}

absl::Status Actor::LoadWholeStateIntoShards(const std::string& dir) {
  // The whole policy's optimizer file, read into an AdamW over stand-ins of its parameters.
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> params = TrainedParameters(*policy_);
  std::vector<torch::Tensor> stand_ins;
  for (const auto& p : params) {
    stand_ins.push_back(torch::zeros(p.sizes(), torch::kFloat32).requires_grad_(true));
  }
  torch::optim::AdamW whole(stand_ins, torch::optim::AdamWOptions(options_.lr));
  int64_t skipped = 0;
  RETURN_IF_ERROR(ReadActorState(dir, &whole, &shuffle_generator_, &skipped));
  const bool has_masters = fs_exists(dir, kActorMasterWeightsFile);
  if (has_masters) RETURN_IF_ERROR(ReadMasterWeights(dir, stand_ins));
  std::vector<const FlatUnit*> layout;
  for (int u = 0; u < sharded_->num_units(); ++u) layout.push_back(&sharded_->layout(u));
  ASSIGN_OR_RETURN(const auto places, PlacesIn(params, layout));
  const int w = sharded_->world_size(), r = sharded_->rank();
  std::vector<torch::Tensor> master(layout.size()), avg(layout.size()), avg_sq(layout.size());
  std::vector<int64_t> steps(layout.size(), 0);
  for (size_t u = 0; u < layout.size(); ++u) {
    const int64_t padded = sharded_->shard_numel(static_cast<int>(u)) * w;
    master[u] = torch::zeros({padded}, torch::kFloat32);
    avg[u] = torch::zeros({padded}, torch::kFloat32);
    avg_sq[u] = torch::zeros({padded}, torch::kFloat32);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const auto [u, offset] = places[i];
    const int64_t n = params[i].numel();
    if (has_masters) master[u].narrow(0, offset, n).copy_(stand_ins[i].reshape({-1}));
    auto it = whole.state().find(OptimizerStateKey(whole, stand_ins[i]));
    if (it == whole.state().end()) continue;
    const auto& state = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    steps[u] = state.step();
    avg[u].narrow(0, offset, n).copy_(state.exp_avg().reshape({-1}));
    avg_sq[u].narrow(0, offset, n).copy_(state.exp_avg_sq().reshape({-1}));
  }
  for (size_t u = 0; u < layout.size(); ++u) {
    const int64_t n = sharded_->shard_numel(static_cast<int>(u));
    const torch::Tensor& m = sharded_->masters()[u];
    // Without a masters file the policy is fp32, and the masters are the weights the caller
    // loaded (ShardedParameters::CopyFromParameters).
    if (has_masters) m.copy_(master[u].narrow(0, r * n, n));
    SetAdamState(*optimizer_, m, steps[u], avg[u].narrow(0, r * n, n),
                 avg_sq[u].narrow(0, r * n, n));
  }
  nonfinite_steps_total_ = skipped;
  if (has_masters) sharded_->CopyToParameters();
  return absl::OkStatus();
}

absl::Status Actor::LoadShardedStateIntoWhole(const std::string& dir) {
  if (sharding_units_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " holds a sharded actor state; this actor was not told its units"));
  }
  ASSIGN_OR_RETURN(const auto layout, FlatLayout(sharding_units_));
  std::vector<int64_t> numel;
  std::vector<const FlatUnit*> units;
  for (const auto& unit : layout) {
    numel.push_back(unit.numel);
    units.push_back(&unit);
  }
  ASSIGN_OR_RETURN(const auto saved, ReadShardStates(dir, numel));
  const std::vector<torch::Tensor> params = TrainedParameters(*policy_);
  ASSIGN_OR_RETURN(const auto places, PlacesIn(params, units));
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto [u, offset] = places[i];
    auto piece = [&](const torch::Tensor& flat) {
      return flat.narrow(0, offset, params[i].numel()).view(params[i].sizes());
    };
    // The optimizer's parameter: the fp32 master, or the fp32 parameter itself.
    const torch::Tensor& target = masters_ != nullptr ? masters_->masters()[i] : params[i];
    target.copy_(piece(saved[u].master));
    SetAdamState(*optimizer_, target, saved[u].step,
                 saved[u].step > 0 ? piece(saved[u].exp_avg) : torch::Tensor(),
                 saved[u].step > 0 ? piece(saved[u].exp_avg_sq) : torch::Tensor());
  }
  if (masters_ != nullptr) masters_->CopyToParameters();
  return ReadRngState(dir, &shuffle_generator_, &nonfinite_steps_total_);
}

absl::Status Actor::LoadState(const std::string& dir) {
  absl::MutexLock lock(&mu_);
  return Guard("LoadState", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const int saved_world, ShardStateWorldSize(dir));
    if (sharded_ != nullptr) {
      if (saved_world == 0) return LoadWholeStateIntoShards(dir);
      RETURN_IF_ERROR(LoadShardedState(dir));
      return ReadRngState(dir, &shuffle_generator_, &nonfinite_steps_total_);
    }
    if (saved_world > 0) return LoadShardedStateIntoWhole(dir);
    RETURN_IF_ERROR(
        ReadActorState(dir, optimizer_.get(), &shuffle_generator_, &nonfinite_steps_total_));
    if (masters_ == nullptr) return absl::OkStatus();
    RETURN_IF_ERROR(ReadMasterWeights(dir, masters_->masters()));
    masters_->CopyToParameters();
    return absl::OkStatus();
  });
}

}  // namespace rlmesh::trainer
