#include "common/tokenizer/byte_level.h"

#include <gtest/gtest.h>

namespace rlmesh::tokenizer {
namespace {

// GPT-2's table: the 68 bytes outside '!'..'~', 0xA1..0xAC, 0xAE..0xFF are numbered from
// U+0100 in byte order: 0x00..0x20 -> U+0100..U+0120, 0x7F..0xA0 -> U+0121..U+0142,
// 0xAD -> U+0143.
TEST(ByteLevelTest, MatchesGpt2Table) {
  EXPECT_EQ(ByteToUnicode('A'), U'A');
  EXPECT_EQ(ByteToUnicode('~'), U'~');
  EXPECT_EQ(ByteToUnicode(0x00), 0x100u);
  EXPECT_EQ(ByteToUnicode(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(ByteToUnicode('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(ByteToUnicode(0x7F), 0x121u);
  EXPECT_EQ(ByteToUnicode(0xA0), 0x142u);
  EXPECT_EQ(ByteToUnicode(0xA1), 0xA1u);
  EXPECT_EQ(ByteToUnicode(0xAD), 0x143u);
  EXPECT_EQ(ByteToUnicode(0xFF), 0xFFu);
}

TEST(ByteLevelTest, SpellsBytesAndBack) {
  EXPECT_EQ(BytesToByteLevel(" hello\n"), "\xC4\xA0hello\xC4\x8A");  // "Ġhello" + "Ċ"
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  auto back = ByteLevelToBytes(BytesToByteLevel(all));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, all);
}

TEST(ByteLevelTest, RejectsCharactersOutsideTheAlphabet) {
  auto r = ByteLevelToBytes("a\xE2\x82\xAC");  // U+20AC EURO SIGN
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("U+20AC"), std::string::npos) << r.status();
  EXPECT_FALSE(ByteLevelToBytes("\xC5\x84").ok());  // U+0144, one past the table
  EXPECT_FALSE(ByteLevelToBytes("\xFF").ok());      // not UTF-8
}

TEST(ByteLevelTest, ValidatesUtf8) {
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC0\x80"));          // overlong NUL
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate U+D800
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));          // truncated
}

// One U+FFFD per maximal ill-formed subsequence (Unicode 3.9 / WHATWG "best practice").
TEST(ByteLevelTest, LossyDecodingReplacesMaximalSubparts) {
  const std::string r = "\xEF\xBF\xBD";
  auto lossy = [](std::string_view s) {
    std::string out;
    AppendUtf8Lossy(s, out);
    return out;
  };
  EXPECT_EQ(lossy("a\xE2\x82"
                  "b"),
            "a" + r + "b");
  EXPECT_EQ(lossy("\xC0\x80"), r + r);
  EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);
  EXPECT_EQ(lossy("\xF0\x9F\x98"), r);
  EXPECT_EQ(lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

}  // namespace
}  // namespace rlmesh::tokenizer
