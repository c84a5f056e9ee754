// verl's own GRPO recipes through `rlmesh dry-run` (issue #12): each override list of
// tests/recipes/verl (the command lines of verl's example scripts, data and model paths
// replaced by local stand-ins with the real architectures' config.json) either passes, or
// fails only with messages that name a key and say why. The test prints one line per recipe
// and how many pass verbatim.
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/config/schema.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"

namespace rlmesh::recipes {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  bool valid = false;
  std::vector<std::string> errors;  // the lines that say what is wrong
};

std::vector<std::string> Overrides(const fs::path& args) {
  std::vector<std::string> out;
  std::ifstream in(args);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    out.push_back(line);
  }
  return out;
}

Outcome DryRun(const std::vector<std::string>& overrides, const std::string& log) {
  process::SubprocessOptions options;
  options.argv = {std::string(RLMESH_TEST_BUILD_DIR) + "/bin/rlmesh", "dry-run", "--brief",
                  "tests/recipes/base.yaml"};
  options.argv.insert(options.argv.end(), overrides.begin(), overrides.end());
  options.log_path = log;
  options.keep_lines = 5000;
  auto p = process::Subprocess::Start(options);
  EXPECT_TRUE(p.ok()) << p.status();
  Outcome out;
  if (!p.ok()) return out;
  const auto status = (*p)->Wait(absl::Minutes(1));
  EXPECT_TRUE(status.has_value() && WIFEXITED(*status)) << "rlmesh dry-run did not exit";
  out.valid = status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
  for (const std::string& line : (*p)->LastLines(5000)) {
    if (absl::StartsWith(line, "error: ") || absl::StartsWith(line, "command line ")) {
      out.errors.push_back(line);
    }
  }
  return out;
}

// The dotted keys a line names: config keys of the schema, or verl's keys that the line says
// rlmesh lacks.
bool NamesAKey(const std::string& line) {
  static const std::regex dotted(R"(([a-z_]+\.)+[a-z0-9_]+)");
  for (std::sregex_iterator it(line.begin(), line.end(), dotted), end; it != end; ++it) {
    const std::string key = it->str();
    if (config::FindKey(key) != nullptr || config::NotBuiltVerlKey(key) != nullptr) return true;
  }
  return false;
}

TEST(RecipesTest, EveryVerlRecipePassesOrFailsNamingTheKeys) {
  ASSERT_EQ(chdir(RLMESH_TEST_SOURCE_DIR), 0);
  std::vector<fs::path> recipes;
  for (const auto& entry : fs::directory_iterator("tests/recipes/verl")) {
    if (entry.path().extension() == ".args") recipes.push_back(entry.path());
  }
  std::sort(recipes.begin(), recipes.end());
  ASSERT_GE(recipes.size(), 10u);
  int verbatim = 0;
  for (const fs::path& recipe : recipes) {
    const Outcome o = DryRun(Overrides(recipe),
                             testing::TempDir() + "/recipe_" + recipe.stem().string() + ".log");
    if (o.valid) ++verbatim;
    std::printf("%-48s %s (%zu errors)\n", recipe.stem().c_str(), o.valid ? "valid" : "invalid",
                o.errors.size());
    EXPECT_EQ(o.valid, o.errors.empty()) << recipe;
    for (const std::string& line : o.errors) {
      std::printf("    %s\n", line.c_str());
      EXPECT_TRUE(NamesAKey(line)) << recipe << ": this error names no key: " << line;
      // It says why, after the key: "key = value: reason", "key: reason", "key is ...".
      EXPECT_TRUE(absl::StrContains(line, ": ")) << recipe << ": " << line;
    }
  }
  std::printf("%d of %zu verl recipes pass `rlmesh dry-run` verbatim\n", verbatim, recipes.size());
}

// verl's run_qwen2-7b.sh with what its errors ask for is valid on one device but for the
// memory estimate: 7B without sharding or offload does not fit 80 GB (issue #13 builds
// both). The same recipe on Qwen2.5-0.5B-Instruct fits (docs/config.md walks through it).
TEST(RecipesTest, Qwen2GrpoRecipeBecomesValidWithWhatTheErrorsSay) {
  ASSERT_EQ(chdir(RLMESH_TEST_SOURCE_DIR), 0);
  std::vector<std::string> overrides = Overrides("tests/recipes/verl/run_qwen2-7b.args");
  for (const char* change :
       {"actor_rollout_ref.ref.fsdp_config.param_offload=false",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "trainer.logger=[console,jsonl]",
        "trainer.n_gpus_per_node=1", "data.train_batch_size=64",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.max_num_seqs=64", "actor_rollout_ref.rollout.n=5"}) {
    overrides.push_back(change);
  }
  Outcome o = DryRun(overrides, testing::TempDir() + "/recipe_qwen2_fixed.log");
  ASSERT_EQ(o.errors.size(), 1u);
  EXPECT_TRUE(absl::StrContains(o.errors[0], "error: estimated memory per device"));
  overrides.push_back("actor_rollout_ref.model.path=tests/recipes/models/qwen2.5-0.5b-instruct");
  o = DryRun(overrides, testing::TempDir() + "/recipe_qwen2_small.log");
  for (const auto& line : o.errors) ADD_FAILURE() << line;
  EXPECT_TRUE(o.valid);
}

}  // namespace
}  // namespace rlmesh::recipes
