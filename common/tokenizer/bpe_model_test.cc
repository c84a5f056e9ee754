#include "common/tokenizer/bpe_model.h"

#include <gtest/gtest.h>

#include <random>

namespace rlmesh::tokenizer {
namespace {

using Merges = std::vector<std::pair<std::string, std::string>>;

// All 256 bytes as ids 0..255, then the merge results in rank order.
absl::flat_hash_map<std::string, int32_t> VocabFor(const Merges& merges,
                                                   std::vector<std::string>* tokens = nullptr) {
  absl::flat_hash_map<std::string, int32_t> vocab;
  std::vector<std::string> by_id;
  for (int b = 0; b < 256; ++b) {
    vocab[std::string(1, static_cast<char>(b))] = b;
    by_id.emplace_back(1, static_cast<char>(b));
  }
  for (const auto& [l, r] : merges) {
    if (vocab.emplace(l + r, static_cast<int32_t>(by_id.size())).second) by_id.push_back(l + r);
  }
  if (tokens != nullptr) *tokens = by_id;
  return vocab;
}

std::vector<std::string> EncodeToStrings(const BpeModel& model, std::string_view word) {
  std::vector<int32_t> ids;
  model.Encode(word, ids);
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(*model.TokenBytes(id));
  return out;
}

// Textbook BPE over strings: apply the lowest-ranked merge present at its leftmost place,
// until none applies.
std::vector<std::string> NaiveBpe(const Merges& merges, std::string_view word) {
  std::vector<std::string> parts;
  for (char c : word) parts.emplace_back(1, c);
  while (true) {
    size_t best_rank = merges.size(), best_pos = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      for (size_t r = 0; r < best_rank; ++r) {
        if (merges[r].first == parts[i] && merges[r].second == parts[i + 1]) {
          best_rank = r;
          best_pos = i;
          break;
        }
      }
    }
    if (best_rank == merges.size()) return parts;
    parts[best_pos] += parts[best_pos + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best_pos) + 1);
  }
}

TEST(BpeModelTest, AppliesLowestRankFirst) {
  const Merges merges = {{"a", "b"}, {"ab", "c"}, {"b", "c"}};
  auto model = BpeModel::Create(VocabFor(merges), merges, {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(EncodeToStrings(**model, "abc"), (std::vector<std::string>{"abc"}));
  EXPECT_EQ(EncodeToStrings(**model, "bc"), (std::vector<std::string>{"bc"}));
  // b-c (rank 2) loses to a-b (rank 0): [b, c, ab], then b-c.
  EXPECT_EQ(EncodeToStrings(**model, "bcab"), (std::vector<std::string>{"bc", "ab"}));
  EXPECT_EQ(EncodeToStrings(**model, "x"), (std::vector<std::string>{"x"}));
}

TEST(BpeModelTest, EqualRanksMergeLeftmostFirst) {
  const Merges merges = {{"a", "a"}};
  auto model = BpeModel::Create(VocabFor(merges), merges, {});
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(EncodeToStrings(**model, "aaa"), (std::vector<std::string>{"aa", "a"}));
  EXPECT_EQ(EncodeToStrings(**model, "aaaaa"), (std::vector<std::string>{"aa", "aa", "a"}));
}

TEST(BpeModelTest, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  const Merges merges = {{"a", "b"}};
  auto vocab = VocabFor(merges);
  vocab["abd"] = 1000;  // reachable by no merge
  BpeModelOptions ignore;
  ignore.ignore_merges = true;
  auto with = BpeModel::Create(vocab, merges, ignore);
  auto without = BpeModel::Create(vocab, merges, {});
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_EQ(EncodeToStrings(**with, "abd"), (std::vector<std::string>{"abd"}));
  EXPECT_EQ(EncodeToStrings(**without, "abd"), (std::vector<std::string>{"ab", "d"}));
}

// Short words (linear rescans) and long ones (heap) must both agree with textbook BPE,
// with the cache on and off.
TEST(BpeModelTest, AgreesWithTextbookBpeOnRandomWords) {
  const Merges merges = {{"a", "b"},  {"b", "a"},     {"ab", "ab"}, {"c", "c"}, {"a", "a"},
                         {"ba", "c"}, {"abab", "ab"}, {"cc", "a"},  {"b", "b"}, {"aa", "b"}};
  BpeModelOptions no_cache;
  no_cache.cache_capacity = 0;
  auto cached = BpeModel::Create(VocabFor(merges), merges, {});
  auto uncached = BpeModel::Create(VocabFor(merges), merges, no_cache);
  ASSERT_TRUE(cached.ok() && uncached.ok());
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    std::string word;
    const int length = 1 + static_cast<int>(rng() % 200);
    for (int i = 0; i < length; ++i) word.push_back("abc"[rng() % 3]);
    const auto expected = NaiveBpe(merges, word);
    EXPECT_EQ(EncodeToStrings(**cached, word), expected) << word;
    EXPECT_EQ(EncodeToStrings(**cached, word), expected) << word << " (from the cache)";
    EXPECT_EQ(EncodeToStrings(**uncached, word), expected) << word;
  }
}

TEST(BpeModelTest, RejectsAVocabularyWithoutEveryByte) {
  auto vocab = VocabFor({});
  vocab.erase(std::string(1, '\x7f'));
  auto model = BpeModel::Create(vocab, {}, {});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("byte 0x7f"), std::string::npos) << model.status();
}

TEST(BpeModelTest, RejectsAMergeOutsideTheVocabulary) {
  const Merges merges = {{"a", "b"}, {"ab", "zz"}};
  auto model = BpeModel::Create(VocabFor({{"a", "b"}}), merges, {});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("merges[1]"), std::string::npos) << model.status();
  EXPECT_NE(model.status().message().find("zz"), std::string::npos) << model.status();
}

}  // namespace
}  // namespace rlmesh::tokenizer
