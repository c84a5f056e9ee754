#include "services/coordinator/prompt_source.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/tiny.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::coordinator {
namespace {

using ::testing::HasSubstr;

class PromptSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string path = testing::TempDir() + "/rlmesh_prompt_source_XXXXXX";
    ASSERT_NE(mkdtemp(path.data()), nullptr);
    dir_ = path;
    ASSERT_TRUE(tokenizer::WriteTinyTokenizer(dir_ + "/model", {}).ok());
    auto tok = tokenizer::Tokenizer::FromDirectory(dir_ + "/model");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(tok).value();
    WriteRows(dir_ + "/train.jsonl", 12, "train");
    WriteRows(dir_ + "/val.jsonl", 3, "val");
    settings_.train_files = {dir_ + "/train.jsonl"};
    settings_.val_files = {dir_ + "/val.jsonl"};
    settings_.prompt_key = "prompt";
    settings_.reward_fn_key = "data_source";
    settings_.chat_template = "auto";
    settings_.truncation = "error";
    settings_.max_prompt_length = 64;
    settings_.train_batch_size = 4;
    settings_.shuffle = true;
    settings_.data_seed = 7;
    settings_.synthetic_task = "none";
    settings_.total_epochs = 2;
  }
  // Row i: the question "<tag> <i> =" (longer for i = 11), ground truth "<tag><i>".
  static void WriteRows(const std::string& path, int rows, const std::string& tag) {
    std::ofstream out(path);
    for (int i = 0; i < rows; ++i) {
      const std::string question =
          absl::StrCat(tag, " ", i, " =", i == 11 ? std::string(80, '+') : "");
      out << "{\"data_source\": \"test\", \"prompt\": [{\"role\": \"user\", \"content\": \""
          << question << "\"}], \"reward_model\": {\"ground_truth\": \"" << tag << i << "\"}}\n";
    }
  }

  std::string dir_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  config::CoordinatorSettings settings_;
};

TEST_F(PromptSourceTest, AnEpochDrawsEveryRowOnceAndARestoredSourceDrawsTheSame) {
  settings_.max_prompt_length = 256;
  auto source = PromptSource::Create(settings_, *tokenizer_);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->total_steps(), 6) << "2 epochs of 12 rows in batches of 4";
  std::set<std::string> truths;
  data::SamplerPosition after_first;
  for (int64_t step = 1; step <= 3; ++step) {
    auto drawn = (*source)->Draw(step);
    ASSERT_TRUE(drawn.ok()) << drawn.status();
    ASSERT_EQ(drawn->prompts.size(), 4u);
    for (const StepPrompt& p : drawn->prompts) {
      EXPECT_THAT(p.uid, ::testing::StartsWith(absl::StrCat("s", step, "/")));
      const std::string row = p.uid.substr(p.uid.find('/') + 1);
      EXPECT_EQ(p.ground_truth, "train" + row) << "the prompt and its row's answer stay together";
      EXPECT_THAT(p.text, HasSubstr(absl::StrCat("train ", row, " =")));
      EXPECT_EQ(p.data_source, "test");
      EXPECT_FALSE(p.token_ids.empty());
      truths.insert(p.ground_truth);
    }
    if (step == 1) after_first = drawn->position;
  }
  EXPECT_EQ(truths.size(), 12u) << "each of the 12 rows once in the first epoch";

  // A source restored at the position after step 1 draws what this one drew at step 2.
  auto again = PromptSource::Create(settings_, *tokenizer_);
  ASSERT_TRUE(again.ok());
  auto reference = PromptSource::Create(settings_, *tokenizer_);
  ASSERT_TRUE(reference.ok());
  ASSERT_TRUE((*reference)->Draw(1).ok());
  auto expected = (*reference)->Draw(2);
  ASSERT_TRUE((*again)->Restore(after_first).ok());
  auto resumed = (*again)->Draw(2);
  ASSERT_TRUE(expected.ok() && resumed.ok());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(resumed->prompts[i].uid, expected->prompts[i].uid);
}

TEST_F(PromptSourceTest, ValidationPromptsComeInFileOrder) {
  settings_.max_prompt_length = 256;
  auto source = PromptSource::Create(settings_, *tokenizer_);
  ASSERT_TRUE(source.ok()) << source.status();
  auto prompts = (*source)->ValidationPrompts();
  ASSERT_TRUE(prompts.ok());
  ASSERT_EQ(prompts->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*prompts)[i].uid, absl::StrCat("val/", i));
    EXPECT_EQ((*prompts)[i].ground_truth, absl::StrCat("val", i));
  }
}

TEST_F(PromptSourceTest, OverlongPromptsAreRefusedOrFilteredAsTheKeysSay) {
  // Row 11 of the training file is longer than 64 tokens.
  auto refused = PromptSource::Create(settings_, *tokenizer_);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("train.jsonl"));

  settings_.filter_overlong_prompts = true;
  auto filtered = PromptSource::Create(settings_, *tokenizer_);
  ASSERT_TRUE(filtered.ok()) << filtered.status();
  EXPECT_EQ((*filtered)->train_rows().size(), 11u);
  EXPECT_EQ((*filtered)->train_prompt_ids().size(), 11u);

  settings_.max_prompt_length = 2;  // every prompt is over
  auto none = PromptSource::Create(settings_, *tokenizer_);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("data.filter_overlong_prompts"));
}

TEST_F(PromptSourceTest, NoTrainingDataNamesTheKey) {
  settings_.train_files.clear();
  auto source = PromptSource::Create(settings_, *tokenizer_);
  ASSERT_FALSE(source.ok());
  EXPECT_THAT(std::string(source.status().message()), HasSubstr("data.train_files"));
}

}  // namespace
}  // namespace rlmesh::coordinator
