// The two pieces of GRPO's training state that are plain arithmetic, as verl computes them
// (verl/utils/torch_functional.py and verl/trainer/ppo/core_algos.py, commit b178a3cd):
// the actor's learning-rate schedule and the in-reward KL coefficient's controller. No
// LibTorch; stateless functions and a small value type, safe from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rlmesh::grpo {

enum class LrScheduleType { kConstant, kCosine };

// "constant" or "cosine"; anything else is InvalidArgument naming the string.
absl::StatusOr<LrScheduleType> ParseLrScheduleType(absl::string_view name);

struct LrSchedule {
  LrScheduleType type = LrScheduleType::kConstant;
  int64_t warmup_steps = -1;        // actor.optim.lr_warmup_steps; < 0 = from the ratio
  double warmup_steps_ratio = 0.0;  // actor.optim.lr_warmup_steps_ratio
  double min_lr_ratio = 0.0;        // cosine only
  double num_cycles = 0.5;          // cosine only
};

// Warm-up steps of a run of `total_steps`: warmup_steps when >= 0, else verl's
// int(warmup_steps_ratio * total_steps), the product in double and truncated (so 0.29 x 100
// is 28, as in Python).
int64_t WarmupSteps(const LrSchedule& schedule, int64_t total_steps);

// The factor the base learning rate is multiplied by after `updates` scheduler steps (the
// k-th actor update of a run uses updates = k - 1, so the first warm-up step has lr 0):
//   warm-up (s < W): s / max(1, W)
//   constant: 1
//   cosine:   max(m, (1 + m)/2 + (1 - m)/2 cos(2 pi num_cycles p)), p = (s - W) / max(1, T - W)
double LrFactor(const LrSchedule& schedule, int64_t total_steps, int64_t updates);

// The coefficient of the KL penalty in the reward (algorithm.kl_ctrl): fixed, or adaptive as
// Ziegler et al. (2019) and verl's AdaptiveKLController:
//   e = clip(current_kl / target_kl - 1, -0.2, 0.2);  value <- value (1 + e n / horizon)
// where n is the number of samples the KL was measured over.
class KlController {
 public:
  // InvalidArgument for a type other than "fixed"/"adaptive", a negative coefficient, or an
  // adaptive controller with target_kl <= 0 or horizon < 1.
  static absl::StatusOr<KlController> Create(absl::string_view type, double kl_coef,
                                             double target_kl, int64_t horizon);

  double value() const { return value_; }
  bool adaptive() const { return adaptive_; }
  // The state a checkpoint keeps and a resumed run restores.
  void set_value(double value) { value_ = value; }
  void Update(double current_kl, int64_t samples);

 private:
  KlController(bool adaptive, double value, double target, int64_t horizon)
      : adaptive_(adaptive), value_(value), target_(target), horizon_(horizon) {}

  bool adaptive_;
  double value_;
  double target_;
  int64_t horizon_;
};

}  // namespace rlmesh::grpo
