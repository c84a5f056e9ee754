#include "services/coordinator/val_generations.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::coordinator {
namespace {

using ::testing::ElementsAre;

// numpy.random.RandomState(42).permutation(10), as numpy prints it.
TEST(ValGenerationsTest, ShuffleIsNumpysRandomState42) {
  EXPECT_THAT(NumpyLegacyPermutation(10, 42), ElementsAre(8, 1, 5, 0, 7, 2, 9, 4, 3, 6));
}

// verl's choice for 5 samples whose inputs sort to q0..q4 (indices 3, 1, 4, 0, 2): the
// permutation of 5 picks sorted positions 1, 4, 2 first, i.e. q1, q4, q2.
TEST(ValGenerationsTest, SortedByInputThenShuffled) {
  const std::vector<std::string> inputs = {"q3", "q1", "q4", "q0", "q2"};
  const std::vector<size_t> picked = PickValGenerations(inputs, 3);
  ASSERT_EQ(picked.size(), 3u);
  EXPECT_EQ(inputs[picked[0]], "q1");
  EXPECT_EQ(inputs[picked[1]], "q4");
  EXPECT_EQ(inputs[picked[2]], "q2");
  EXPECT_EQ(PickValGenerations(inputs, 10).size(), 5u);
  EXPECT_TRUE(PickValGenerations(inputs, 0).empty());
}

}  // namespace
}  // namespace rlmesh::coordinator
