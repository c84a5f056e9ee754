// The pipelined loop's order, bounds and failures, with stages that record what they see.
// No timing: each check holds for every interleaving of the stage threads, and the one test
// of overlap blocks an update until a later step's stages have run (which can only happen
// when they run on their own threads).
#include "services/coordinator/pipeline.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/coordinator/stage_queue.h"

namespace rlmesh::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(StageQueueTest, HoldsAtMostItsCapacityAndHandsItemsOnInOrder) {
  StageQueue<int> queue(2);
  std::thread producer([&]() {
    for (int i = 1; i <= 6; ++i) ASSERT_TRUE(queue.Push(i));
    queue.Close();
  });
  std::vector<int> popped;
  while (auto item = queue.Pop()) popped.push_back(*item);
  producer.join();
  EXPECT_THAT(popped, ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_LE(queue.high_water(), 2u);
  EXPECT_FALSE(queue.Push(7)) << "a closed queue takes nothing";
  EXPECT_FALSE(queue.Pop().has_value());
}

TEST(StageQueueTest, CloseWakesAPushBlockedOnAFullQueue) {
  StageQueue<int> queue(1);
  ASSERT_TRUE(queue.Push(1));
  std::atomic<bool> pushed{true};
  std::thread blocked([&]() { pushed = queue.Push(2); });
  queue.Close();
  blocked.join();
  EXPECT_FALSE(pushed.load());
  EXPECT_EQ(queue.Pop().value_or(-1), 1) << "what was queued before the close is still handed on";
  EXPECT_FALSE(queue.Pop().has_value());
}

// Stages that log "<stage> <step>" and keep the books the checks need.
class Recorder {
 public:
  explicit Recorder(const PipelineOptions& options) : options_(options) {}

  PipelineStages Stages() {
    PipelineStages stages;
    stages.draw = [this](int64_t step) -> absl::StatusOr<DrawnStep> {
      absl::MutexLock lock(&mu_);
      events_.push_back(absl::StrCat("draw ", step));
      // The prompt source is never more than k + 1 steps ahead of the last finished update.
      if (step > trained_ + 1 + options_.max_staleness) {
        violations_.push_back(absl::StrCat("step ", step, " drawn after ", trained_, " updates"));
      }
      DrawnStep drawn;
      drawn.epoch = step;
      return drawn;
    };
    stages.generate = [this](int64_t step, const DrawnStep&) -> absl::StatusOr<StepRollout> {
      ++generating_;
      {
        absl::MutexLock lock(&mu_);
        events_.push_back(absl::StrCat("generate ", step));
      }
      absl::Status fail = Fails("generate", step);
      --generating_;
      absl::MutexLock lock(&mu_);
      generated_through_ = step;
      if (!fail.ok()) return fail;
      StepRollout rollout;
      rollout.scores = {static_cast<double>(step)};
      return rollout;
    };
    stages.score = [this](int64_t step, const DrawnStep&, StepRollout& rollout) {
      Record("score", step);
      rollout.texts = {absl::StrCat("scored ", step)};
      return Fails("score", step);
    };
    stages.reference = [this](int64_t step, const DrawnStep&, StepRollout& rollout) {
      Record("reference", step);
      rollout.reference.emplace();
      if (step == 2) referred_2_.Notify();
      return Fails("reference", step);
    };
    stages.proceed = []() { return true; };
    stages.train =
        [this](StepWork work, double,
               const std::function<absl::Status()>& before_publish) -> absl::StatusOr<bool> {
      Record("train", work.step);
      if (work.step == 1 && block_first_update_) {
        // Released only once step 2's reference stage has run while step 1 still updates.
        overlapped_ = referred_2_.WaitForNotificationWithTimeout(absl::Seconds(120));
      }
      {
        absl::MutexLock lock(&mu_);
        // Each step arrives whole: its own samples, scored and referred.
        if (work.rollout.scores != std::vector<double>{static_cast<double>(work.step)} ||
            work.rollout.texts != std::vector<std::string>{absl::StrCat("scored ", work.step)} ||
            (reference_on_ && !work.rollout.reference.has_value()) ||
            work.drawn.epoch != work.step) {
          violations_.push_back(absl::StrCat("step ", work.step, " arrived incomplete"));
        }
      }
      if (before_publish) {
        EXPECT_TRUE(before_publish().ok());
        absl::MutexLock lock(&mu_);
        const int64_t needed = std::min(work.step + options_.max_staleness, options_.last_step);
        if (generated_through_ < needed || generating_.load() != 0) {
          violations_.push_back(absl::StrCat("step ", work.step, " published with generation at ",
                                             generated_through_, " and ", generating_.load(),
                                             " running"));
        }
      }
      absl::Status fail = Fails("train", work.step);
      if (!fail.ok()) return fail;
      absl::MutexLock lock(&mu_);
      trained_ = work.step;
      return work.step == stop_after_;
    };
    if (!reference_on_) stages.reference = nullptr;
    return stages;
  }

  void FailAt(const std::string& stage, int64_t step) { fail_stage_ = stage, fail_step_ = step; }
  void StopAfter(int64_t step) { stop_after_ = step; }
  void BlockFirstUpdate() { block_first_update_ = true; }
  void WithoutReference() { reference_on_ = false; }

  std::vector<std::string> Events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  std::vector<std::string> Violations() {
    absl::MutexLock lock(&mu_);
    return violations_;
  }
  // Index of `event` in the log, -1 when it never happened.
  int Index(const std::string& event) {
    auto events = Events();
    auto it = std::find(events.begin(), events.end(), event);
    return it == events.end() ? -1 : static_cast<int>(it - events.begin());
  }
  bool overlapped() const { return overlapped_; }

 private:
  void Record(const std::string& stage, int64_t step) {
    absl::MutexLock lock(&mu_);
    events_.push_back(absl::StrCat(stage, " ", step));
  }
  absl::Status Fails(const std::string& stage, int64_t step) const {
    if (stage == fail_stage_ && step == fail_step_) {
      return absl::UnavailableError(absl::StrCat(stage, " broke"));
    }
    return absl::OkStatus();
  }

  const PipelineOptions options_;
  std::string fail_stage_;
  int64_t fail_step_ = -1, stop_after_ = -1;
  bool block_first_update_ = false, reference_on_ = true;
  absl::Notification referred_2_;
  bool overlapped_ = false;
  std::atomic<int> generating_{0};
  absl::Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> violations_ ABSL_GUARDED_BY(mu_);
  int64_t trained_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generated_through_ ABSL_GUARDED_BY(mu_) = 0;
};

PipelineOptions Options(int64_t k, int64_t steps) {
  PipelineOptions options;
  options.first_step = 1;
  options.last_step = steps;
  options.max_staleness = k;
  return options;
}

TEST(PipelineTest, EveryStepPassesEachStageInOrderAndUpdatesInStepOrder) {
  for (int64_t k : {1, 2, 4}) {
    const PipelineOptions options = Options(k, 9);
    Recorder recorder(options);
    ASSERT_TRUE(RunPipeline(options, recorder.Stages()).ok());
    std::vector<int> trains;
    for (int64_t s = 1; s <= 9; ++s) {
      int previous = -1;
      for (const char* stage : {"draw", "generate", "score", "reference", "train"}) {
        const int at = recorder.Index(absl::StrCat(stage, " ", s));
        ASSERT_GT(at, previous) << "k=" << k << ": " << stage << " of step " << s;
        previous = at;
      }
      trains.push_back(previous);
    }
    EXPECT_TRUE(std::is_sorted(trains.begin(), trains.end())) << "k=" << k;
    EXPECT_THAT(recorder.Violations(), ElementsAre()) << "k=" << k;
  }
}

TEST(PipelineTest, PromptsAreDrawnAtMostKStepsAheadOfTheUpdate) {
  // The Recorder logs a violation when step s is drawn before update s - 1 - k has finished,
  // and when a publish finds the generations it waits for unfinished or one running.
  for (int64_t k : {1, 2, 3, 8}) {
    const PipelineOptions options = Options(k, 12);
    Recorder recorder(options);
    ASSERT_TRUE(RunPipeline(options, recorder.Stages()).ok());
    EXPECT_THAT(recorder.Violations(), ElementsAre()) << "k=" << k;
  }
}

TEST(PipelineTest, LaterStepsAreScoredAndReferredWhileAnUpdateRuns) {
  const PipelineOptions options = Options(2, 4);
  Recorder recorder(options);
  recorder.BlockFirstUpdate();
  ASSERT_TRUE(RunPipeline(options, recorder.Stages()).ok());
  EXPECT_TRUE(recorder.overlapped()) << "step 2's reference stage never ran during update 1";
  EXPECT_LT(recorder.Index("reference 2"), recorder.Index("train 2"));
}

TEST(PipelineTest, WithoutAReferenceStageTheScoredWorkGoesStraightToTheUpdate) {
  const PipelineOptions options = Options(1, 3);
  Recorder recorder(options);
  recorder.WithoutReference();
  ASSERT_TRUE(RunPipeline(options, recorder.Stages()).ok());
  EXPECT_EQ(recorder.Index("reference 1"), -1);
  EXPECT_GE(recorder.Index("train 3"), 0);
  EXPECT_THAT(recorder.Violations(), ElementsAre());
}

TEST(PipelineTest, AFailingStageStopsTheRunAtItsStep) {
  for (const std::string stage : {"generate", "score", "reference", "train"}) {
    const PipelineOptions options = Options(2, 8);
    Recorder recorder(options);
    recorder.FailAt(stage, 3);
    const absl::Status status = RunPipeline(options, recorder.Stages());
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << stage;
    EXPECT_THAT(std::string(status.message()), HasSubstr(stage + " broke")) << stage;
    if (stage != "train") {
      // The train stage names its own step (the coordinator's does); the pipeline names the
      // step of a stage before it.
      EXPECT_THAT(std::string(status.message()), HasSubstr("step 3: ")) << stage;
    }
    EXPECT_GE(recorder.Index("train 2"), 0) << stage;
    EXPECT_EQ(recorder.Index("train 4"), -1) << stage;
    if (stage != "train") {
      EXPECT_EQ(recorder.Index("train 3"), -1) << stage;
    }
  }
}

TEST(PipelineTest, AStopEndsTheRunAfterItsStep) {
  const PipelineOptions options = Options(2, 10);
  Recorder recorder(options);
  recorder.StopAfter(3);
  ASSERT_TRUE(RunPipeline(options, recorder.Stages()).ok());
  EXPECT_GE(recorder.Index("train 3"), 0);
  EXPECT_EQ(recorder.Index("train 4"), -1);
  EXPECT_EQ(recorder.Index("draw 7"), -1) << "step 7 may start only after update 4";
}

TEST(PipelineTest, PartialRolloutsPublishWithoutWaitingForGenerations) {
  PipelineOptions options = Options(1, 4);
  options.publish_waits_for_generation = false;
  Recorder recorder(options);
  PipelineStages stages = recorder.Stages();
  auto train = stages.train;
  int with_wait = 0;
  stages.train = [&](StepWork work, double waited, const std::function<absl::Status()>& wait) {
    with_wait += wait ? 1 : 0;
    return train(std::move(work), waited, wait);
  };
  ASSERT_TRUE(RunPipeline(options, stages).ok());
  EXPECT_EQ(with_wait, 0);
  EXPECT_GE(recorder.Index("train 4"), 0);
}

}  // namespace
}  // namespace rlmesh::coordinator
