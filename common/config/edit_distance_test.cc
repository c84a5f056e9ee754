#include "common/config/edit_distance.h"

#include "gtest/gtest.h"

namespace rlmesh::config {
namespace {

// Distances worked out by hand.
TEST(EditDistanceTest, ClassicPairs) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("abc", ""), 3u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);  // k->s, e->i, +g
  EXPECT_EQ(EditDistance("flaw", "lawn"), 2u);       // -f, +n
  EXPECT_EQ(EditDistance("sise", "size"), 1u);
  EXPECT_EQ(EditDistance("abc", "acb"), 2u);  // no transposition operation
  EXPECT_EQ(EditDistance("same", "same"), 0u);
}

TEST(EditDistanceTest, Symmetric) {
  EXPECT_EQ(EditDistance("ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu"),
            EditDistance("ppo_micro_batch_size_per_gpu", "ppo_mini_batch_size"));
}

}  // namespace
}  // namespace rlmesh::config
