#include "common/grpo/schedules.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace rlmesh::grpo {

absl::StatusOr<LrScheduleType> ParseLrScheduleType(absl::string_view name) {
  if (name == "constant") return LrScheduleType::kConstant;
  if (name == "cosine") return LrScheduleType::kCosine;
  return absl::InvalidArgumentError(absl::StrCat(
      "learning-rate schedule: expected \"constant\" or \"cosine\", got \"", name, "\""));
}

int64_t WarmupSteps(const LrSchedule& schedule, int64_t total_steps) {
  if (schedule.warmup_steps >= 0) return schedule.warmup_steps;
  return static_cast<int64_t>(schedule.warmup_steps_ratio * static_cast<double>(total_steps));
}

double LrFactor(const LrSchedule& schedule, int64_t total_steps, int64_t updates) {
  const int64_t warmup = WarmupSteps(schedule, total_steps);
  const double s = static_cast<double>(updates);
  if (updates < warmup) return s / std::max<double>(1.0, static_cast<double>(warmup));
  if (schedule.type == LrScheduleType::kConstant) return 1.0;
  const double m = schedule.min_lr_ratio;
  const double progress = (s - static_cast<double>(warmup)) /
                          std::max<double>(1.0, static_cast<double>(total_steps - warmup));
  const double x = std::cos(std::numbers::pi * schedule.num_cycles * 2.0 * progress);
  return std::max(m, x * (1.0 - m) * 0.5 + (1.0 + m) * 0.5);
}

absl::StatusOr<KlController> KlController::Create(absl::string_view type, double kl_coef,
                                                  double target_kl, int64_t horizon) {
  if (!(kl_coef >= 0) || !std::isfinite(kl_coef)) {
    return absl::InvalidArgumentError(
        absl::StrCat("algorithm.kl_ctrl.kl_coef: expected a finite number >= 0, got ", kl_coef));
  }
  if (type == "fixed") return KlController(false, kl_coef, target_kl, horizon);
  if (type != "adaptive") {
    return absl::InvalidArgumentError(absl::StrCat(
        "algorithm.kl_ctrl.type: expected \"fixed\" or \"adaptive\", got \"", type, "\""));
  }
  if (!(target_kl > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("algorithm.kl_ctrl.target_kl: expected > 0, got ", target_kl));
  }
  if (horizon < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("algorithm.kl_ctrl.horizon: expected >= 1, got ", horizon));
  }
  return KlController(true, kl_coef, target_kl, horizon);
}

void KlController::Update(double current_kl, int64_t samples) {
  if (!adaptive_) return;
  const double error = std::clamp(current_kl / target_ - 1.0, -0.2, 0.2);
  value_ *= 1.0 + error * static_cast<double>(samples) / static_cast<double>(horizon_);
}

}  // namespace rlmesh::grpo
