#include "services/trainer/checkpoint_manifest.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

namespace rlmesh::trainer {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A checkpoint folder as the trainer writes one: weights, optimizer and RNG state, the
// trainer state, then the manifest.
std::string MakeCheckpoint(const fs::path& root, int step) {
  const fs::path dir = root / ("global_step_" + std::to_string(step));
  Write(dir / "actor/huggingface/model.safetensors", std::string(10000, static_cast<char>(step)));
  Write(dir / "actor/huggingface/config.json", "{}");
  Write(dir / "actor/actor_optimizer.pt", "optimizer " + std::to_string(step));
  Write(dir / "actor/actor_rng.pt", "rng");
  Write(dir / "trainer_state.json", "{\"global_step\": " + std::to_string(step) + "}");
  EXPECT_TRUE(WriteManifest(dir.string()).ok());
  Write(root / "latest_checkpointed_iteration.txt", std::to_string(step) + "\n");
  return dir.string();
}

fs::path FreshRoot(const std::string& name) {
  const fs::path root = fs::path(testing::TempDir()) / ("rlmesh_manifest_test_" + name);
  fs::remove_all(root);
  fs::create_directories(root);
  return root;
}

TEST(CheckpointManifestTest, ACompleteCheckpointVerifiesAndEveryDamageIsNamed) {
  const fs::path root = FreshRoot("verify");
  const std::string dir = MakeCheckpoint(root, 1);
  EXPECT_TRUE(VerifyManifest(dir).ok());

  // 4 KB of zeros inside the weights: same size, other bytes.
  {
    std::fstream f(dir + "/actor/huggingface/model.safetensors",
                   std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(2048);
    f << std::string(4096, '\0');
  }
  absl::Status s = VerifyManifest(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("model.safetensors does not match its checksum"), std::string::npos)
      << s;

  MakeCheckpoint(root, 1);
  fs::resize_file(dir + "/actor/actor_optimizer.pt", 3);
  s = VerifyManifest(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("actor_optimizer.pt has 3 bytes"), std::string::npos) << s;

  MakeCheckpoint(root, 1);
  fs::remove(dir + "/actor/actor_rng.pt");
  s = VerifyManifest(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("actor_rng.pt is missing"), std::string::npos) << s;

  MakeCheckpoint(root, 1);
  fs::remove(dir + "/checkpoint_manifest.json");
  s = VerifyManifest(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("the save did not finish"), std::string::npos) << s;

  Write(dir + "/checkpoint_manifest.json", std::string(100000, '['));
  s = VerifyManifest(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// A path that names nothing (a typo in trainer.resume_from_path) says so, rather than that
// a save did not finish.
TEST(CheckpointManifestTest, AFolderThatDoesNotExistIsNotFound) {
  const fs::path root = FreshRoot("nowhere");
  const absl::Status status = VerifyManifest((root / "global_step_7").string());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find("global_step_7 does not exist"), std::string::npos) << status;
}

TEST(CheckpointManifestTest, TheNewestCompleteCheckpointIsChosenAndTheOthersAreSaidWhy) {
  const fs::path root = FreshRoot("choose");
  std::vector<std::string> skipped;
  auto none = ChooseCheckpoint(root.string(), &skipped);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();

  const std::string first = MakeCheckpoint(root, 1);
  const std::string second = MakeCheckpoint(root, 2);
  auto chosen = ChooseCheckpoint(root.string(), &skipped);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(*chosen, second);
  EXPECT_TRUE(skipped.empty());

  // Each way the newest one can be broken falls back to step 1, saying why.
  struct Damage {
    const char* what;
    std::function<void()> apply;
    const char* reason;
  };
  const std::vector<Damage> damages = {
      {"no trainer state", [&] { fs::remove(second + "/trainer_state.json"); },
       "trainer_state.json is missing"},
      {"no weights", [&] { fs::remove(second + "/actor/huggingface/model.safetensors"); },
       "model.safetensors is missing"},
      {"zeroed bytes",
       [&] {
         std::fstream f(second + "/actor/huggingface/model.safetensors",
                        std::ios::binary | std::ios::in | std::ios::out);
         f << std::string(4096, '\0');
       },
       "does not match its checksum"},
      {"marker at a missing folder", [&] { fs::remove_all(second); }, "global_step_2 is missing"},
      {"marker not a number",
       [&] {
         fs::remove_all(second);
         Write(root / "latest_checkpointed_iteration.txt", "two\n");
       },
       "\"two\" is not a step number"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    MakeCheckpoint(root, 2);
    d.apply();
    chosen = ChooseCheckpoint(root.string(), &skipped);
    ASSERT_TRUE(chosen.ok()) << chosen.status();
    EXPECT_EQ(*chosen, first);
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_NE(skipped[0].find(d.reason), std::string::npos) << skipped[0];
  }

  // A save that renamed its folder but died before the marker: the folder is complete and
  // written after the marker, so it is the newest checkpoint. (The times are set: a test
  // writes faster than the file system's clock ticks.)
  const fs::path marker = root / "latest_checkpointed_iteration.txt";
  MakeCheckpoint(root, 2);
  MakeCheckpoint(root, 3);
  Write(marker, "2\n");
  const fs::file_time_type now = fs::last_write_time(marker);
  fs::last_write_time(root / "global_step_3" / kManifestFile, now + std::chrono::seconds(1));
  chosen = ChooseCheckpoint(root.string(), &skipped);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(fs::path(*chosen).filename(), "global_step_3");

  // A run resumed from step 2 and saved again: the marker names step 2, written after the
  // folders of steps 3 and 6 of the line it gave up. Those are passed over, saying why.
  MakeCheckpoint(root, 6);
  Write(marker, "2\n");
  for (int step : {3, 6}) {
    fs::last_write_time(root / ("global_step_" + std::to_string(step)) / kManifestFile,
                        now - std::chrono::seconds(10 * step));
  }
  chosen = ChooseCheckpoint(root.string(), &skipped);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(fs::path(*chosen).filename(), "global_step_2");
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_NE(skipped[0].find("global_step_6: written before latest_checkpointed_iteration.txt "
                            "named step 2"),
            std::string::npos)
      << skipped[0];
  EXPECT_NE(skipped[1].find("global_step_3: written before"), std::string::npos) << skipped[1];
  fs::remove_all(root / "global_step_6");

  // Nothing complete: an error listing every folder's reason, never a fresh start.
  for (int step : {1, 2, 3}) {
    fs::remove(root / ("global_step_" + std::to_string(step)) / "actor/actor_rng.pt");
  }
  chosen = ChooseCheckpoint(root.string(), &skipped);
  EXPECT_EQ(chosen.status().code(), absl::StatusCode::kFailedPrecondition) << chosen.status();
  for (const char* folder : {"global_step_1:", "global_step_2:", "global_step_3:"}) {
    EXPECT_NE(chosen.status().message().find(folder), std::string::npos) << chosen.status();
  }
}

}  // namespace
}  // namespace rlmesh::trainer
