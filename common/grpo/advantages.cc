#include "common/grpo/advantages.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace rlmesh::grpo {

namespace {

constexpr std::pair<AdvEstimator, absl::string_view> kNames[] = {
    {AdvEstimator::kGrpo, "grpo"},
    {AdvEstimator::kGrpoVectorized, "grpo_vectorized"},
    {AdvEstimator::kGrpoPassk, "grpo_passk"},
    {AdvEstimator::kRloo, "rloo"},
    {AdvEstimator::kRlooVectorized, "rloo_vectorized"},
    {AdvEstimator::kOpo, "opo"},
    {AdvEstimator::kGpg, "gpg"},
    {AdvEstimator::kReinforcePlusPlus, "reinforce_plus_plus"},
    {AdvEstimator::kReinforcePlusPlusBaseline, "reinforce_plus_plus_baseline"},
};

// The batch as rows of doubles, and the members of each group in batch order.
struct Batch {
  int64_t b = 0, t = 0;
  std::vector<double> rewards, mask;  // row-major [b, t]
  std::vector<double> scores;         // per row: the sum of its token rewards (as verl: all T)
  std::vector<double> lengths;        // per row: the sum of its mask
  std::map<int64_t, std::vector<int64_t>> groups;
  double r(int64_t i, int64_t j) const { return rewards[i * t + j]; }
  double m(int64_t i, int64_t j) const { return mask[i * t + j]; }
};

std::vector<double> Doubles(const torch::Tensor& x) {
  const torch::Tensor c = x.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// Group mean and torch.std (n - 1) of the scores of `members`.
std::pair<double, double> MeanStd(const Batch& batch, const std::vector<int64_t>& members) {
  double sum = 0;
  for (int64_t i : members) sum += batch.scores[i];
  const double n = static_cast<double>(members.size());
  const double mean = sum / n;
  double squares = 0;
  for (int64_t i : members) squares += (batch.scores[i] - mean) * (batch.scores[i] - mean);
  return {mean, std::sqrt(squares / (n - 1))};
}

// verl_F.masked_whiten over the whole batch: mean and unbiased variance over the masked
// entries (sum / (count + 1e-8), Bessel's count / (count - 1)), (x - mean) / sqrt(var + 1e-8).
absl::StatusOr<std::vector<double>> MaskedWhiten(const std::vector<double>& values,
                                                 const std::vector<double>& mask) {
  double count = 0, sum = 0;
  for (size_t k = 0; k < values.size(); ++k) {
    count += mask[k];
    if (mask[k] != 0) sum += values[k] * mask[k];
  }
  if (count <= 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "whitening the advantages needs at least two response tokens in the batch, got ", count));
  }
  const double mean = sum / (count + 1e-8);
  double squares = 0;
  for (size_t k = 0; k < values.size(); ++k) {
    if (mask[k] != 0) squares += (values[k] - mean) * (values[k] - mean) * mask[k];
  }
  const double var = squares / (count + 1e-8) * (count / (count - 1));
  const double scale = 1.0 / std::sqrt(var + 1e-8);
  std::vector<double> out(values.size());
  for (size_t k = 0; k < values.size(); ++k) out[k] = (values[k] - mean) * scale;
  return out;
}

// The token-level estimators' result: `values` whitened over the batch's masked tokens, times
// the mask; the returns equal to the advantages.
absl::StatusOr<Advantages> Whitened(const Batch& batch, const std::vector<double>& values) {
  auto whitened = MaskedWhiten(values, batch.mask);
  if (!whitened.ok()) return whitened.status();
  std::vector<double> per_token = *std::move(whitened);
  for (size_t k = 0; k < per_token.size(); ++k) per_token[k] *= batch.mask[k];
  Advantages out;
  out.advantages = torch::tensor(per_token, torch::kFloat64).view({batch.b, batch.t});
  out.returns = out.advantages;
  return out;
}

}  // namespace

absl::StatusOr<AdvEstimator> ParseAdvEstimator(absl::string_view name) {
  std::string known;
  for (const auto& [estimator, text] : kNames) {
    if (name == text) return estimator;
    absl::StrAppend(&known, known.empty() ? "" : ", ", text);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("algorithm.adv_estimator: expected one of ", known, ", got \"", name, "\""));
}

absl::string_view AdvEstimatorName(AdvEstimator estimator) {
  for (const auto& [e, text] : kNames) {
    if (e == estimator) return text;
  }
  return "unknown";
}

absl::StatusOr<Advantages> EstimateAdvantages(AdvEstimator estimator,
                                              const torch::Tensor& token_rewards,
                                              const torch::Tensor& response_mask,
                                              const torch::Tensor& group_ids,
                                              const AdvantageOptions& options) {
  if (token_rewards.dim() != 2 || !token_rewards.sizes().equals(response_mask.sizes()) ||
      group_ids.dim() != 1 || group_ids.size(0) != token_rewards.size(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "advantages: expected token rewards and a mask of one shape [B, T] and B group ids, got ",
        c10::str(token_rewards.sizes()), ", ", c10::str(response_mask.sizes()), " and ",
        c10::str(group_ids.sizes())));
  }
  Batch batch;
  batch.b = token_rewards.size(0);
  batch.t = token_rewards.size(1);
  batch.rewards = Doubles(token_rewards);
  batch.mask = Doubles(response_mask);
  const torch::Tensor ids = group_ids.to(torch::kCPU, torch::kInt64).contiguous();
  for (int64_t i = 0; i < batch.b; ++i) {
    double score = 0, length = 0;
    for (int64_t j = 0; j < batch.t; ++j) {
      score += batch.r(i, j);
      length += batch.m(i, j);
    }
    batch.scores.push_back(score);
    batch.lengths.push_back(length);
    batch.groups[ids.data_ptr<int64_t>()[i]].push_back(i);
  }

  const double eps = options.epsilon;
  // One value per sequence, spread over its masked tokens (the outcome estimators).
  std::vector<double> per_sequence(batch.b, 0.0);
  switch (estimator) {
    case AdvEstimator::kGrpo:
    case AdvEstimator::kGpg: {
      // GPG scales by the batch over its nonzero scores (at least one).
      double nonzero = 0;
      for (double s : batch.scores) nonzero += s != 0 ? 1 : 0;
      const double alpha = static_cast<double>(batch.b) / std::max(nonzero, 1.0);
      for (const auto& [id, members] : batch.groups) {
        auto [mean, std] = members.size() == 1 ? std::make_pair(0.0, 1.0) : MeanStd(batch, members);
        for (int64_t i : members) {
          const double centred = batch.scores[i] - mean;
          if (estimator == AdvEstimator::kGpg) {
            per_sequence[i] = alpha * centred;  // f_norm = 1
          } else {
            per_sequence[i] = options.norm_adv_by_std ? centred / (std + eps) : centred;
          }
        }
      }
      break;
    }
    case AdvEstimator::kGrpoVectorized: {
      // verl's group_mean_std: var = (sum2 - sum^2 / n) / max(n - 1, 1), floored at eps;
      // a group of one has mean 0 and std 1. verl always divides by the std here.
      for (const auto& [id, members] : batch.groups) {
        double mean = 0, std = 1;
        if (members.size() > 1) {
          double s1 = 0, s2 = 0;
          for (int64_t i : members) {
            s1 += batch.scores[i];
            s2 += batch.scores[i] * batch.scores[i];
          }
          const double n = static_cast<double>(members.size());
          mean = s1 / n;
          std = std::sqrt(std::max((s2 - s1 * s1 / n) / std::max(n - 1, 1.0), eps));
        }
        for (int64_t i : members) per_sequence[i] = (batch.scores[i] - mean) / (std + eps);
      }
      break;
    }
    case AdvEstimator::kGrpoPassk: {
      for (const auto& [id, members] : batch.groups) {
        if (members.size() < 2) {
          return absl::InvalidArgumentError(absl::StrCat(
              "grpo_passk needs at least 2 samples per group (actor_rollout_ref.rollout.n), "
              "group ",
              id, " has ", members.size()));
        }
        // The first of the highest scores (torch.topk's pick; a tie gives 0 either way).
        int64_t best = members[0];
        for (int64_t i : members) {
          if (batch.scores[i] > batch.scores[best]) best = i;
        }
        double second = -std::numeric_limits<double>::infinity();
        for (int64_t i : members) {
          if (i != best) second = std::max(second, batch.scores[i]);
        }
        double advantage = batch.scores[best] - second;
        if (options.norm_adv_by_std) advantage /= MeanStd(batch, members).second + eps;
        per_sequence[best] = advantage;
      }
      break;
    }
    case AdvEstimator::kRloo:
    case AdvEstimator::kRlooVectorized: {
      for (const auto& [id, members] : batch.groups) {
        const double n = static_cast<double>(members.size());
        if (members.size() == 1) {
          // The loop form keeps a lone sample's score; the vectorised form zeroes it.
          per_sequence[members[0]] =
              estimator == AdvEstimator::kRloo ? batch.scores[members[0]] : 0.0;
          continue;
        }
        double sum = 0;
        for (int64_t i : members) sum += batch.scores[i];
        const double mean = sum / n;
        for (int64_t i : members) {
          per_sequence[i] = estimator == AdvEstimator::kRloo
                                ? batch.scores[i] * n / (n - 1) - mean * n / (n - 1)
                                : (n * batch.scores[i] - sum) / (n - 1);
        }
      }
      break;
    }
    case AdvEstimator::kOpo: {
      for (const auto& [id, members] : batch.groups) {
        double baseline = 0;
        if (members.size() > 1) {
          double weighted = 0, lengths = 0;
          for (int64_t i : members) {
            weighted += batch.lengths[i] * batch.scores[i];
            lengths += batch.lengths[i];
          }
          baseline = weighted / lengths;  // NaN when every row is masked, as in verl
        }
        for (int64_t i : members) per_sequence[i] = batch.scores[i] - baseline;
      }
      break;
    }
    case AdvEstimator::kReinforcePlusPlus: {
      // Discounted returns, restarting after each row's last masked token, then whitened.
      std::vector<double> returns(batch.b * batch.t, 0.0);
      for (int64_t i = 0; i < batch.b; ++i) {
        double running = 0;
        for (int64_t j = batch.t - 1; j >= 0; --j) {
          running = batch.r(i, j) + options.gamma * running;
          returns[i * batch.t + j] = running;
          running *= batch.m(i, j);
        }
      }
      ASSIGN_OR_RETURN(Advantages out, Whitened(batch, returns));
      out.returns = torch::tensor(returns, torch::kFloat64).view({batch.b, batch.t});
      return out;
    }
    case AdvEstimator::kReinforcePlusPlusBaseline: {
      std::vector<double> centred(batch.b * batch.t, 0.0);
      for (const auto& [id, members] : batch.groups) {
        const double mean = members.size() == 1 ? 0.0 : MeanStd(batch, members).first;
        for (int64_t i : members) {
          for (int64_t j = 0; j < batch.t; ++j) {
            centred[i * batch.t + j] = (batch.scores[i] - mean) * batch.m(i, j);
          }
        }
      }
      return Whitened(batch, centred);
    }
  }
  std::vector<double> spread(batch.b * batch.t);
  for (int64_t i = 0; i < batch.b; ++i) {
    for (int64_t j = 0; j < batch.t; ++j) spread[i * batch.t + j] = per_sequence[i] * batch.m(i, j);
  }
  Advantages out;
  out.advantages = torch::tensor(spread, torch::kFloat64).view({batch.b, batch.t});
  out.returns = out.advantages;
  return out;
}

}  // namespace rlmesh::grpo
