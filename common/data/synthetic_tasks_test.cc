#include "common/data/synthetic_tasks.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::data {
namespace {

using ::testing::HasSubstr;

TEST(SyntheticTasksTest, ReverseDigitsRowsFollowTheSchema) {
  SyntheticTaskOptions options;
  options.train_size = 300;
  options.val_size = 50;
  options.seed = 3;
  auto dataset = MakeSyntheticDataset(options);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ(dataset->train.size(), 300u);
  ASSERT_EQ(dataset->val.size(), 50u);
  std::set<std::string> prompts;
  for (const auto* split : {&dataset->train, &dataset->val}) {
    for (const DataRow& row : *split) {
      EXPECT_EQ(row.data_source, "rlmesh/reverse_digits");
      ASSERT_EQ(row.prompt.size(), 1u);
      EXPECT_EQ(row.prompt[0].role, "user");
      const std::string& p = row.prompt[0].content;
      ASSERT_GE(p.size(), 4u);
      ASSERT_LE(p.size(), 7u);
      EXPECT_EQ(p.back(), '=');
      const std::string digits = p.substr(0, p.size() - 1);
      EXPECT_EQ(digits.find_first_not_of("0123456789"), std::string::npos) << p;
      EXPECT_EQ(row.ground_truth, std::string(digits.rbegin(), digits.rend()));
      EXPECT_EQ(row.reward_style, "rule");
      prompts.insert(p);
    }
  }
  EXPECT_EQ(prompts.size(), 350u);  // no prompt twice, validation held out
  EXPECT_EQ(dataset->val[0].extra_info_json, R"({"split":"val","index":0})");
}

TEST(SyntheticTasksTest, SameSeedSameDataAndValidationIndependentOfTrainSize) {
  SyntheticTaskOptions small;
  small.train_size = 10;
  small.val_size = 5;
  SyntheticTaskOptions large = small;
  large.train_size = 100;
  auto a = MakeSyntheticDataset(small);
  auto b = MakeSyntheticDataset(small);
  auto c = MakeSyntheticDataset(large);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(a->train[i].prompt[0].content, b->train[i].prompt[0].content);
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a->val[i].prompt[0].content, c->val[i].prompt[0].content);
}

TEST(SyntheticTasksTest, ArithmeticAnswersAreSums) {
  SyntheticTaskOptions options;
  options.task = "arithmetic";
  options.min_digits = 1;
  options.max_digits = 3;
  options.train_size = 200;
  options.val_size = 20;
  auto dataset = MakeSyntheticDataset(options);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  for (const DataRow& row : dataset->train) {
    EXPECT_EQ(row.data_source, "rlmesh/arithmetic");
    const std::string& p = row.prompt[0].content;
    const size_t plus = p.find('+');
    ASSERT_NE(plus, std::string::npos) << p;
    const long a = std::stol(p.substr(0, plus));
    const long b = std::stol(p.substr(plus + 1, p.size() - plus - 2));
    EXPECT_EQ(row.ground_truth, std::to_string(a + b)) << p;
    EXPECT_LT(a, 1000);
    EXPECT_LT(b, 1000);
  }
}

TEST(SyntheticTasksTest, Errors) {
  SyntheticTaskOptions unknown;
  unknown.task = "sorting";
  EXPECT_THAT(MakeSyntheticDataset(unknown).status().message(), HasSubstr("--task"));
  SyntheticTaskOptions too_many;
  too_many.min_digits = 1;
  too_many.max_digits = 2;  // 110 distinct strings
  too_many.train_size = 100;
  too_many.val_size = 10;
  EXPECT_THAT(MakeSyntheticDataset(too_many).status().message(), HasSubstr("distinct"));
  SyntheticTaskOptions bad_range;
  bad_range.min_digits = 5;
  bad_range.max_digits = 4;
  EXPECT_THAT(MakeSyntheticDataset(bad_range).status().message(), HasSubstr("--min-digits"));
}

}  // namespace
}  // namespace rlmesh::data
