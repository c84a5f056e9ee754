// The stages before BPE: added-token matching, NFC, and the split pattern.
#include <gtest/gtest.h>

#include "common/tokenizer/added_tokens.h"
#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/split_pattern.h"

namespace rlmesh::tokenizer {
namespace {

constexpr char kQwenPattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr char kLlamaPattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::vector<std::pair<std::string, int32_t>> Segments(const AddedTokenMatcher& m,
                                                      std::string_view text) {
  std::vector<TextSegment> segments;
  m.Split(text, segments);
  std::vector<std::pair<std::string, int32_t>> out;
  for (const auto& s : segments) out.emplace_back(std::string(s.text), s.token_id);
  return out;
}

using Pieces = std::vector<std::pair<std::string, int32_t>>;

TEST(AddedTokenMatcherTest, LeftmostThenLongest) {
  AddedTokenMatcher m({{"<|a|>", 1}, {"<|a|>b", 2}, {"b<|", 3}});
  // At 'x' nothing; at "<|a|>b" the longer token wins over "<|a|>".
  EXPECT_EQ(Segments(m, "x<|a|>by"), (Pieces{{"x", -1}, {"<|a|>b", 2}, {"y", -1}}));
  // "b<|" starts further left than "<|a|>", so it wins and "<|a|>" is broken.
  EXPECT_EQ(Segments(m, "b<|a|>"), (Pieces{{"b<|", 3}, {"a|>", -1}}));
  EXPECT_EQ(Segments(m, "<|a|><|a|>"), (Pieces{{"<|a|>", 1}, {"<|a|>", 1}}));
  EXPECT_EQ(Segments(m, "plain"), (Pieces{{"plain", -1}}));
  EXPECT_TRUE(Segments(m, "").empty());
}

TEST(AddedTokenMatcherTest, StripsWhiteSpaceOnTheAskedSides) {
  AddedToken left{"<L>", 1};
  left.lstrip = true;
  AddedToken right{"<R>", 2};
  right.rstrip = true;
  AddedTokenMatcher m({left, right});
  EXPECT_EQ(Segments(m, "a \t<L> b"), (Pieces{{"a", -1}, {"<L>", 1}, {" b", -1}}));
  EXPECT_EQ(Segments(m, "a <R>\n b"), (Pieces{{"a ", -1}, {"<R>", 2}, {"b", -1}}));
  EXPECT_EQ(Segments(m, "  <L>"), (Pieces{{"<L>", 1}}));
}

TEST(AddedTokenMatcherTest, SingleWordNeedsNonWordNeighbours) {
  AddedToken word{"cat", 7};
  word.single_word = true;
  AddedTokenMatcher m({word});
  EXPECT_EQ(Segments(m, "a cat!"), (Pieces{{"a ", -1}, {"cat", 7}, {"!", -1}}));
  EXPECT_EQ(Segments(m, "concatenate"), (Pieces{{"concatenate", -1}}));
  EXPECT_EQ(Segments(m,
                     "\xC3\xA9"
                     "cat"),
            (Pieces{{"\xC3\xA9"
                     "cat",
                     -1}}));  // "écat"
}

TEST(NormalizerTest, ComposesCanonically) {
  EXPECT_EQ(*NfcNormalize("e\xCC\x81"), "\xC3\xA9");     // e + U+0301 -> é
  EXPECT_EQ(*NfcNormalize("\xE2\x84\xAB"), "\xC3\x85");  // U+212B ANGSTROM -> Å
  EXPECT_EQ(*NfcNormalize("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "\xED\x95\x9C");  // 한
  // Canonical reordering: dot below (ccc 220) goes before circumflex (ccc 230), then ậ.
  EXPECT_EQ(*NfcNormalize("a\xCC\x82\xCC\xA3"), "\xE1\xBA\xAD");
  EXPECT_EQ(*NfcNormalize("\xEF\xAC\x81"), "\xEF\xAC\x81");  // ﬁ: compatibility only, kept
  EXPECT_EQ(*NfcNormalize("plain ASCII"), "plain ASCII");
  EXPECT_FALSE(NfcNormalize("bad \xCC").ok());
}

std::vector<std::string> SplitWith(const char* pattern, std::string_view text) {
  auto split = SplitPattern::Create(pattern);
  EXPECT_TRUE(split.ok()) << split.status();
  std::vector<std::string_view> pieces;
  (*split)->Split(text, pieces);
  return std::vector<std::string>(pieces.begin(), pieces.end());
}

using Strings = std::vector<std::string>;

TEST(SplitPatternTest, QwenPatternPieces) {
  EXPECT_EQ(SplitWith(kQwenPattern, "Hello world!  \n"), (Strings{"Hello", " world", "!", "  \n"}));
  EXPECT_EQ(SplitWith(kQwenPattern, "I'LL go"), (Strings{"I", "'LL", " go"}));
  EXPECT_EQ(SplitWith(kQwenPattern, "2024"), (Strings{"2", "0", "2", "4"}));
  // "\s+(?!\S)" leaves the last space to join the next word.
  EXPECT_EQ(SplitWith(kQwenPattern, "a   b"), (Strings{"a", "  ", " b"}));
  EXPECT_TRUE(SplitWith(kQwenPattern, "").empty());
}

TEST(SplitPatternTest, LlamaGroupsDigitsByThree) {
  EXPECT_EQ(SplitWith(kLlamaPattern, "1234567"), (Strings{"123", "456", "7"}));
}

// (?i:'s) folds ASCII only: U+017F LONG S is a letter, not an 's'.
TEST(SplitPatternTest, CaseInsensitiveGroupFoldsAsciiOnly) {
  EXPECT_EQ(SplitWith(kQwenPattern, "x'\xC5\xBFt"), (Strings{"x", "'\xC5\xBFt"}));
  auto rewritten = RewritePatternForPcre2("(?i:'s|'T)x");
  ASSERT_TRUE(rewritten.ok());
  EXPECT_EQ(*rewritten, "(?:'[sS]|'[tT])x");
}

// \s is Unicode White_Space: U+3000 and U+0085 are spaces; U+FEFF and U+180E (which
// PCRE2's own \s includes) are not, so they stay glued to the punctuation before them.
TEST(SplitPatternTest, WhiteSpaceIsTheUnicodeProperty) {
  EXPECT_EQ(SplitWith(kQwenPattern,
                      "a\xE3\x80\x80\xE3\x80\x80"
                      "b"),
            (Strings{"a", "\xE3\x80\x80",
                     "\xE3\x80\x80"
                     "b"}));
  EXPECT_EQ(SplitWith(kQwenPattern, "!\xC2\x85"), (Strings{"!", "\xC2\x85"}));
  EXPECT_EQ(SplitWith(kQwenPattern, "!\xEF\xBB\xBF"), (Strings{"!\xEF\xBB\xBF"}));
  EXPECT_EQ(SplitWith(kQwenPattern, "!\xE1\xA0\x8E"), (Strings{"!\xE1\xA0\x8E"}));
  EXPECT_FALSE(RewritePatternForPcre2("[\\S]").ok());
}

TEST(SplitPatternTest, LongWhiteSpaceRuns) {
  const std::string text = "a" + std::string(100000, ' ') + "b";
  EXPECT_EQ(SplitWith(kQwenPattern, text), (Strings{"a", std::string(99999, ' '), " b"}));
}

TEST(SplitPatternTest, BadPatternNamesIt) {
  auto split = SplitPattern::Create("(unclosed");
  ASSERT_FALSE(split.ok());
  EXPECT_NE(split.status().message().find("(unclosed"), std::string::npos) << split.status();
}

}  // namespace
}  // namespace rlmesh::tokenizer
