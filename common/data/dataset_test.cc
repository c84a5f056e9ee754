#include "common/data/dataset.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::data {
namespace {

using ::testing::HasSubstr;

const char kGsm8kRow[] =
    R"({"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "1+1? Let's think step by step and output the final answer after \"####\"."}], "ability": "math", "reward_model": {"style": "rule", "ground_truth": "2"}, "extra_info": {"split": "train", "index": 7, "answer": "1+1=2\n#### 2"}})";

TEST(DatasetTest, ParsesVerlRows) {
  const std::string text = std::string(kGsm8kRow) + "\n\n" +
                           R"({"data_source": "lighteval/MATH", "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x?"}], "reward_model": {"ground_truth": 42}})" +
                           "\n";
  auto rows = ParseJsonlDataset(text, "train.jsonl", DatasetOptions{});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  const DataRow& a = (*rows)[0];
  EXPECT_EQ(a.data_source, "openai/gsm8k");
  ASSERT_EQ(a.prompt.size(), 1u);
  EXPECT_EQ(a.prompt[0].role, "user");
  EXPECT_THAT(a.prompt[0].content, HasSubstr("\"####\""));
  EXPECT_EQ(a.ability, "math");
  EXPECT_EQ(a.reward_style, "rule");
  EXPECT_EQ(a.ground_truth, "2");
  EXPECT_EQ(a.extra_info_json, R"({"answer":"1+1=2\n#### 2","index":7,"split":"train"})");
  EXPECT_EQ(a.extra_info_strings.at("split"), "train");
  EXPECT_EQ(a.extra_info_strings.count("index"), 0u);
  EXPECT_EQ(a.source, "train.jsonl:1");
  const DataRow& b = (*rows)[1];
  EXPECT_EQ(b.source, "train.jsonl:3");  // the blank line 2 is skipped but counted
  EXPECT_EQ(b.prompt.size(), 2u);
  EXPECT_EQ(b.ground_truth, "42");  // a number becomes its text
  EXPECT_EQ(b.reward_style, "rule");
  EXPECT_EQ(b.extra_info_json, "{}");
}

TEST(DatasetTest, HonoursPromptAndRewardFnKeys) {
  DatasetOptions options;
  options.prompt_key = "question";
  options.reward_fn_key = "source";
  auto rows = ParseJsonlDataset(
      R"({"source": "exact_match", "question": [{"role": "user", "content": "hi"}], "reward_model": {"ground_truth": "hi"}})",
      "x.jsonl", options);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ((*rows)[0].data_source, "exact_match");
}

struct BadRow {
  std::string line;
  std::string field;  // what the error must name
};

TEST(DatasetTest, ErrorsNameFileLineAndField) {
  const BadRow cases[] = {
      {R"({"data_source": "a", "prompt": "hi", "reward_model": {"ground_truth": "1"}})",
       "field \"prompt\": expected a non-empty list of chat messages {\"role\", \"content\"} "
       "(data.prompt_key), got string \"hi\""},
      {R"({"data_source": "a", "prompt": [], "reward_model": {"ground_truth": "1"}})",
       "field \"prompt\""},
      {R"({"data_source": "a", "prompt": [{"content": "x"}], "reward_model": {"ground_truth": "1"}})",
       "field \"prompt[0].role\": expected a non-empty string, got nothing"},
      {R"({"data_source": "a", "prompt": [{"role": "user", "content": 3}], "reward_model": {"ground_truth": "1"}})",
       "field \"prompt[0].content\""},
      {R"({"prompt": [{"role": "user", "content": "x"}], "reward_model": {"ground_truth": "1"}})",
       "field \"data_source\""},
      {R"({"data_source": "a", "prompt": [{"role": "user", "content": "x"}]})",
       "field \"reward_model\""},
      {R"({"data_source": "a", "prompt": [{"role": "user", "content": "x"}], "reward_model": {"style": "rule"}})",
       "field \"reward_model.ground_truth\""},
      {R"({"data_source": "a", "prompt": [{"role": "user", "content": "x"}], "reward_model": {"ground_truth": "1"}, "extra_info": [1]})",
       "field \"extra_info\""},
      {R"({"data_source": "a", "prompt": [{"role": "user", "content": "x"}], "reward_model": {"ground_truth": "1"}, "ability": 5})",
       "field \"ability\""},
      {R"({"data_source": "a", "prompt": )", "not valid JSON"},
      {R"([1, 2])", "expected a JSON object"},
  };
  for (const BadRow& bad : cases) {
    auto rows = ParseJsonlDataset(std::string(kGsm8kRow) + "\n" + bad.line, "d.jsonl",
                                  DatasetOptions{});
    ASSERT_FALSE(rows.ok()) << bad.line;
    EXPECT_EQ(rows.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(rows.status().message(), HasSubstr("d.jsonl:2: ")) << bad.line;
    EXPECT_THAT(rows.status().message(), HasSubstr(bad.field)) << bad.line;
  }
}

TEST(DatasetTest, ReadsFilesInOrderAndRejectsParquet) {
  const std::string dir = testing::TempDir();
  const std::string first = dir + "/rlmesh_data_a.jsonl";
  const std::string second = dir + "/rlmesh_data_b.jsonl";
  auto rows = ParseJsonlDataset(std::string(kGsm8kRow), "x", DatasetOptions{});
  ASSERT_TRUE(rows.ok());
  ASSERT_TRUE(WriteJsonlDataset(*rows, first).ok());
  (*rows)[0].data_source = "exact_match";
  ASSERT_TRUE(WriteJsonlDataset(*rows, second).ok());
  auto both = ReadDataset({first, second}, DatasetOptions{});
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->size(), 2u);
  EXPECT_EQ((*both)[0].data_source, "openai/gsm8k");
  EXPECT_EQ((*both)[1].data_source, "exact_match");
  EXPECT_EQ((*both)[1].source, second + ":1");
  // What was written reads back to the same row.
  EXPECT_EQ((*both)[0].prompt[0].content, (*rows)[0].prompt[0].content);
  EXPECT_EQ((*both)[0].extra_info_json, (*rows)[0].extra_info_json);

  auto parquet = ReadDataset({dir + "/train.parquet"}, DatasetOptions{});
  EXPECT_EQ(parquet.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parquet.status().message(), HasSubstr("read_parquet"));
  auto missing = ReadDataset({dir + "/no_such_file.jsonl"}, DatasetOptions{});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("no_such_file.jsonl"));
  EXPECT_FALSE(ReadDataset({}, DatasetOptions{}).ok());
}

}  // namespace
}  // namespace rlmesh::data
