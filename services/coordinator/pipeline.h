// The asynchronous loop (rlmesh.max_staleness = k > 0) as a pipeline of stages, each on its
// own thread, with a bounded queue between two stages:
//
//   prompts + generation --[k]--> reward --[1]--> reference --[1]--> update + publish + finish
//
// Generation of step s starts once step s - 1 - k has been updated, published and finished
// (the staleness bound), draws its prompts and samples them; the reward stage scores step s
// while later steps generate; the reference stage computes its reference log-probs while an
// earlier step updates; the caller's thread runs the update (old log-probs, advantages, the
// trainer's step and the publish) and the step's bookkeeping, in step order. A full queue
// stops the stage before it (back-pressure): no more than k + 1 steps are ever between the
// prompt source and the update. Without partial rollouts a publish waits until the
// generation of every step that may still use the outgoing version has ended, so that each
// generation runs on one version.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/coordinator/grpo_step.h"
#include "services/coordinator/prompt_source.h"

namespace rlmesh::coordinator {

// One step's work as it moves through the stages.
struct StepWork {
  int64_t step = 0;
  DrawnStep drawn;
  StepRollout rollout;
  absl::Status status;  // the first stage's error; later stages pass the work on untouched
};

struct PipelineStages {
  // The prompts of step s; called in step order, on the generation thread.
  std::function<absl::StatusOr<DrawnStep>(int64_t step)> draw;
  // The samples of the drawn prompts.
  std::function<absl::StatusOr<StepRollout>(int64_t step, const DrawnStep& drawn)> generate;
  // Scores every sample of the rollout.
  std::function<absl::Status(int64_t step, const DrawnStep& drawn, StepRollout& rollout)> score;
  // Reference log-probs of the rollout (empty: no reference stage).
  std::function<absl::Status(int64_t step, const DrawnStep& drawn, StepRollout& rollout)> reference;
  // Before each update, on the caller's thread: false ends the run (a stop while paused).
  std::function<bool()> proceed;
  // The update of work.step and everything after it; must call before_publish (when set)
  // before the new weights are published. `waited_s`: how long the update waited for the
  // step's work. Returns whether a stop was requested.
  std::function<absl::StatusOr<bool>(StepWork work, double waited_s,
                                     const std::function<absl::Status()>& before_publish)>
      train;
};

struct PipelineOptions {
  int64_t first_step = 1;
  int64_t last_step = 0;
  int64_t max_staleness = 1;  // k >= 1
  // False with rlmesh.partial_rollout: replicas take a version between two decode steps, so
  // a publish need not wait for the generations in progress.
  bool publish_waits_for_generation = true;
};

// Runs steps first_step..last_step. OK when each was trained (or a stop came); otherwise the
// first failing step's error, prefixed "step <s>: ". Every stage thread has ended when it
// returns, a generation in progress included.
absl::Status RunPipeline(const PipelineOptions& options, const PipelineStages& stages);

}  // namespace rlmesh::coordinator
