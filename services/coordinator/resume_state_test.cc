#include "services/coordinator/resume_state.h"

#include "gtest/gtest.h"

namespace rlmesh::coordinator {
namespace {

TEST(ResumeStateTest, WhatIsSavedComesBack) {
  ResumeState state;
  state.first_validation = 0.125;
  state.kl_coef = 0.0015;
  state.reference_checkpoint = "/ckpt/warmup/global_step_0";
  const ResumeState back = DecodeResumeState(EncodeResumeState(state));
  EXPECT_EQ(back.first_validation, 0.125);
  EXPECT_EQ(back.kl_coef, 0.0015);
  EXPECT_EQ(back.reference_checkpoint, "/ckpt/warmup/global_step_0");
  EXPECT_EQ(EncodeResumeState(ResumeState{}), "{}") << "nothing set, nothing written";
}

// The warm-up's folder is stored relative to the checkpoint root when under it, and read
// from the root of the checkpoint resumed: a run's checkpoints moved or copied elsewhere
// anchor the KL reference to their own warm-up, not to the folder they were written in.
TEST(ResumeStateTest, TheWarmUpIsNamedRelativeToTheCheckpointRoot) {
  EXPECT_EQ(RelativeToRoot("/runs/a/ckpt/warmup/global_step_0", "/runs/a/ckpt"),
            "warmup/global_step_0");
  EXPECT_EQ(RelativeToRoot("runs/a/ckpt/warmup/global_step_0", "runs/a/ckpt/"),
            "warmup/global_step_0");
  // Elsewhere, or not comparable lexically: kept as it is.
  EXPECT_EQ(RelativeToRoot("/other/warmup/global_step_0", "/runs/a/ckpt"),
            "/other/warmup/global_step_0");
  EXPECT_EQ(RelativeToRoot("/runs/a/ckpt/warmup", "runs/a/ckpt"), "/runs/a/ckpt/warmup");
  EXPECT_EQ(ResolveFromCheckpoint("warmup/global_step_0", "/copy/ckpt/global_step_6"),
            "/copy/ckpt/warmup/global_step_0");
  EXPECT_EQ(ResolveFromCheckpoint("warmup/global_step_0", "/copy/ckpt/global_step_6/"),
            "/copy/ckpt/warmup/global_step_0");
  // Absolute, as written before this change: as it is.
  EXPECT_EQ(ResolveFromCheckpoint("/runs/a/ckpt/warmup/global_step_0", "/copy/ckpt/global_step_6"),
            "/runs/a/ckpt/warmup/global_step_0");
}

TEST(ResumeStateTest, AnOlderStateNamesTheWarmUpsHuggingFaceFolder) {
  const ResumeState state =
      DecodeResumeState(R"({"reference_path": "/ckpt/warmup/global_step_0/actor/huggingface"})");
  EXPECT_EQ(state.reference_checkpoint, "/ckpt/warmup/global_step_0");
}

TEST(ResumeStateTest, FieldsOfTheWrongTypeAndTextThatIsNoObjectAreLeftUnset) {
  for (const char* text : {"", "[1, 2]", "not json", R"({"first_validation": "0.5"})",
                           R"({"kl_coef": null, "reference_checkpoint": 7})"}) {
    const ResumeState state = DecodeResumeState(text);
    EXPECT_FALSE(state.first_validation.has_value()) << text;
    EXPECT_FALSE(state.kl_coef.has_value()) << text;
    EXPECT_TRUE(state.reference_checkpoint.empty()) << text;
  }
  // Nested beyond the parsers' bound: refused before parsing, not a crash.
  EXPECT_FALSE(DecodeResumeState(std::string(100000, '[')).first_validation.has_value());
}

TEST(ResumeStateTest, ValidationAndCheckpointsFollowVerlsFrequencies) {
  // test_freq = 5 over 12 steps: 5, 10 and the last.
  std::vector<int64_t> validated, saved;
  for (int64_t step = 1; step <= 12; ++step) {
    if (ValidationDue(step, 12, 5)) validated.push_back(step);
    if (CheckpointDue(step, 12, 4, /*stop_requested=*/false)) saved.push_back(step);
  }
  EXPECT_EQ(validated, (std::vector<int64_t>{5, 10, 12}));
  EXPECT_EQ(saved, (std::vector<int64_t>{4, 8, 12}));
  // -1 (and 0): never, not even at the last step; a stop always saves.
  EXPECT_FALSE(ValidationDue(12, 12, -1));
  EXPECT_FALSE(ValidationDue(12, 12, 0));
  EXPECT_FALSE(CheckpointDue(12, 12, -1, false));
  EXPECT_TRUE(CheckpointDue(3, 12, -1, true));
}

}  // namespace
}  // namespace rlmesh::coordinator
