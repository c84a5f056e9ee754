#include "services/coordinator/pipeline.h"

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "services/coordinator/stage_queue.h"

namespace rlmesh::coordinator {

namespace {

absl::Status StepError(int64_t step, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("step ", step, ": ", status.message()));
}

// Pops work from `in`, applies `stage` to work that has not failed, and pushes it to `out`;
// closes `out` when `in` is closed and drained, or after passing on a failure.
void RunStage(StageQueue<StepWork>& in, StageQueue<StepWork>& out,
              const std::function<absl::Status(int64_t, const DrawnStep&, StepRollout&)>& stage) {
  while (std::optional<StepWork> work = in.Pop()) {
    if (work->status.ok() && stage) work->status = stage(work->step, work->drawn, work->rollout);
    const bool failed = !work->status.ok();
    if (!out.Push(*std::move(work)) || failed) break;
  }
  out.Close();
}

}  // namespace

absl::Status RunPipeline(const PipelineOptions& options, const PipelineStages& stages) {
  const int64_t k = std::max<int64_t>(1, options.max_staleness);
  // The generated queue holds k steps: a publish that waits for the generation of step + k
  // never waits on a stage that waits on it.
  StageQueue<StepWork> generated(static_cast<size_t>(k)), scored(1), ready(1);
  absl::Mutex mu;
  int64_t generated_through ABSL_GUARDED_BY(mu) = options.first_step - 1;
  int64_t published_through ABSL_GUARDED_BY(mu) = options.first_step - 1;
  bool generation_done ABSL_GUARDED_BY(mu) = false;
  bool stopping ABSL_GUARDED_BY(mu) = false;

  std::thread generation([&]() {
    for (int64_t s = options.first_step; s <= options.last_step; ++s) {
      {
        absl::MutexLock lock(&mu);
        auto may_start = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
          return stopping || published_through >= s - 1 - k;
        };
        mu.Await(absl::Condition(&may_start));
        if (stopping) break;
      }
      StepWork work;
      work.step = s;
      auto drawn = stages.draw(s);
      if (drawn.ok()) {
        work.drawn = *std::move(drawn);
        auto rollout = stages.generate(s, work.drawn);
        if (rollout.ok()) {
          work.rollout = *std::move(rollout);
        } else {
          work.status = rollout.status();
        }
      } else {
        work.status = drawn.status();
      }
      const bool failed = !work.status.ok();
      {
        absl::MutexLock lock(&mu);
        generated_through = s;
      }
      if (!generated.Push(std::move(work)) || failed) break;
    }
    {
      absl::MutexLock lock(&mu);
      generation_done = true;
    }
    generated.Close();
  });
  std::thread reward([&]() { RunStage(generated, scored, stages.score); });
  std::thread reference([&]() { RunStage(scored, ready, stages.reference); });

  absl::Status status = [&]() -> absl::Status {
    for (int64_t step = options.first_step; step <= options.last_step; ++step) {
      if (!stages.proceed()) break;
      const absl::Time wait_start = absl::Now();
      std::optional<StepWork> work = ready.Pop();
      const double waited = absl::ToDoubleSeconds(absl::Now() - wait_start);
      if (!work.has_value() || work->step != step) {
        return absl::InternalError(absl::StrCat("step ", step, ": no generation came"));
      }
      if (!work->status.ok()) return StepError(step, work->status);
      const int64_t last_needed = std::min(step + k, options.last_step);
      std::function<absl::Status()> before_publish;
      if (options.publish_waits_for_generation) {
        before_publish = [&]() {
          absl::MutexLock lock(&mu);
          auto generated_ahead = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
            return generated_through >= last_needed || generation_done;
          };
          mu.Await(absl::Condition(&generated_ahead));
          return absl::OkStatus();
        };
      }
      absl::StatusOr<bool> stop = stages.train(*std::move(work), waited, before_publish);
      if (!stop.ok()) return stop.status();
      if (*stop) break;
      absl::MutexLock lock(&mu);
      published_through = step;
    }
    return absl::OkStatus();
  }();
  {
    absl::MutexLock lock(&mu);
    stopping = true;
  }
  generated.Close();
  scored.Close();
  ready.Close();
  generation.join();
  reward.join();
  reference.join();
  return status;
}

}  // namespace rlmesh::coordinator
