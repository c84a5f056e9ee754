#include "common/data/prompt_fit.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ids 1..8 cut to 5 and 4 tokens, worked by hand.
TEST(PromptFitTest, EachModeKeepsWhatVerlKept) {
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_THAT(*FitPrompt(ids, 5, Truncation::kLeft), ElementsAre(4, 5, 6, 7, 8));
  EXPECT_THAT(*FitPrompt(ids, 5, Truncation::kRight), ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(*FitPrompt(ids, 5, Truncation::kMiddle), ElementsAre(1, 2, 6, 7, 8));
  EXPECT_THAT(*FitPrompt(ids, 4, Truncation::kMiddle), ElementsAre(1, 2, 7, 8));
  EXPECT_THAT(*FitPrompt(ids, 8, Truncation::kError), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
  auto refused = FitPrompt(ids, 5, Truncation::kError);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("the prompt is 8 tokens, over data.max_prompt_length = 5"));
}

TEST(PromptFitTest, ParsesVerlsNames) {
  EXPECT_EQ(*ParseTruncation("middle"), Truncation::kMiddle);
  EXPECT_FALSE(ParseTruncation("center").ok());
}

}  // namespace
}  // namespace rlmesh::data
