// Tokenizer loading, encoding and decoding on small files written by the test (the tiny
// tokenizer and hand-edited variants), where the ids follow from the construction: with
// no merges every byte is its own id.
#include "common/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/tiny.h"

namespace rlmesh::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) /
           ("tokenizer_test_" +
            std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    ASSERT_TRUE(WriteTinyTokenizer(dir_.string(), {}, &info_).ok());
  }
  json ReadJson(const char* name) {
    std::ifstream in(dir_ / name);
    return json::parse(in);
  }
  void WriteJson(const char* name, const json& j) { std::ofstream(dir_ / name) << j.dump(); }
  absl::StatusOr<std::unique_ptr<Tokenizer>> Load() {
    return Tokenizer::FromDirectory(dir_.string());
  }

  fs::path dir_;
  TinyTokenizerInfo info_;
};

TEST_F(TokenizerTest, TinyLayoutWithoutMerges) {
  EXPECT_EQ(info_.vocab_size, 259);
  EXPECT_EQ(info_.endoftext_id, 256);
  EXPECT_EQ(info_.im_start_id, 257);
  EXPECT_EQ(info_.im_end_id, 258);
  auto tok = Load();
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 259);
  EXPECT_EQ((*tok)->eos_token_id(), 258);
  EXPECT_EQ((*tok)->pad_token_id(), 256);
  EXPECT_EQ((*tok)->bos_token_id(), std::nullopt);
  EXPECT_EQ((*tok)->TokenToId("<|im_start|>"), 257);
  EXPECT_EQ((*tok)->TokenToId("\xC4\xA0"), 32);  // "Ġ" is the space byte
  EXPECT_EQ((*tok)->IdToToken(10), "\xC4\x8A");  // "Ċ"
}

TEST_F(TokenizerTest, EncodesBytesAndAddedTokens) {
  auto tok = Load();
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(*(*tok)->Encode("<|im_start|>hi\n<|im_end|>"), (Ids{257, 'h', 'i', '\n', 258}));
  EXPECT_EQ(*(*tok)->Encode(""), Ids{});
  // NFC first: e + U+0301 becomes U+00E9 = C3 A9.
  EXPECT_EQ(*(*tok)->Encode("e\xCC\x81"), (Ids{0xC3, 0xA9}));
  EXPECT_FALSE((*tok)->Encode("\xFF").ok());
}

TEST_F(TokenizerTest, DecodesWithOptions) {
  auto tok = Load();
  ASSERT_TRUE(tok.ok());
  const Ids ids = {257, 'a', ' ', '.', 258};
  EXPECT_EQ(*(*tok)->Decode(ids), "<|im_start|>a .<|im_end|>");
  DecodeOptions skip;
  skip.skip_special_tokens = true;
  EXPECT_EQ(*(*tok)->Decode(ids, skip), "a .");
  DecodeOptions clean;
  clean.clean_up_tokenization_spaces = true;
  EXPECT_EQ(*(*tok)->Decode(ids, clean), "<|im_start|>a.<|im_end|>");
  // A byte run cut by an added token decodes on its own: the split "é" becomes U+FFFD.
  EXPECT_EQ(*(*tok)->Decode(Ids{0xC3, 256, 0xA9}), "\xEF\xBF\xBD<|endoftext|>\xEF\xBF\xBD");
  auto bad = (*tok)->Decode(Ids{1, 259});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("259"), std::string::npos) << bad.status();
}

TEST_F(TokenizerTest, ChatEncodingUsesTheConfigTemplate) {
  auto tok = Load();
  ASSERT_TRUE(tok.ok());
  auto ids = (*tok)->EncodeChat({{"user", "hi", {}}}, {});
  ASSERT_TRUE(ids.ok()) << ids.status();
  const Ids expected = {257, 'u', 's', 'e', 'r', '\n', 'h', 'i', 258, '\n', 257,
                        'a', 's', 's', 'i', 's', 't',  'a', 'n', 't', '\n'};
  EXPECT_EQ(*ids, expected);
  EXPECT_EQ(*(*tok)->EncodeChat({{"user", "hi", {}}}, {}, "raw"), (Ids{'h', 'i'}));
}

TEST_F(TokenizerTest, TemplateProcessingAddsTokensWhenAsked) {
  json t = ReadJson("tokenizer.json");
  t["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "<|im_end|>"}, {"type_id", 0}}}}})},
      {"special_tokens",
       {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {256}}, {"tokens", {"<|endoftext|>"}}}},
        {"<|im_end|>", {{"id", "<|im_end|>"}, {"ids", {258}}, {"tokens", {"<|im_end|>"}}}}}}};
  WriteJson("tokenizer.json", t);
  auto tok = Load();
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(*(*tok)->Encode("a"), (Ids{256, 'a', 258}));
  EncodeOptions plain;
  plain.add_special_tokens = false;
  EXPECT_EQ(*(*tok)->Encode("a", plain), (Ids{'a'}));
}

TEST_F(TokenizerTest, MergesInStringFormatLoadToo) {
  TinyTokenizerOptions options;
  options.merge_text = "ab ab ab";
  options.num_merges = 2;
  ASSERT_TRUE(WriteTinyTokenizer(dir_.string(), options, &info_).ok());
  // Pieces "ab", " ab", " ab": a+b (3 times) first, then " "+"ab" (twice).
  EXPECT_EQ(info_.num_merges, 2);
  EXPECT_EQ(info_.vocab_size, 256 + 2 + 3);
  json t = ReadJson("tokenizer.json");
  ASSERT_EQ(t["model"]["merges"], json::parse(R"([["a","b"],["\u0120","ab"]])"));
  t["model"]["merges"] = json::array({"a b", "\xC4\xA0 ab"});
  WriteJson("tokenizer.json", t);
  auto tok = Load();
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(*(*tok)->Encode("ab ab"), (Ids{256, 257}));
  EXPECT_EQ(*(*tok)->Encode("ba"), (Ids{'b', 'a'}));
}

// Encode is const and shares the BPE cache: threads encoding at once must get the ids a
// single thread gets.
TEST_F(TokenizerTest, ConcurrentEncodingMatchesSequential) {
  TinyTokenizerOptions options;
  options.merge_text = "the cat sat on the mat; the cat ate the rat. ";
  options.num_merges = 20;
  ASSERT_TRUE(WriteTinyTokenizer(dir_.string(), options, &info_).ok());
  auto tok = Load();
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) {
    texts.push_back("the cat " + std::to_string(i * 7919) + " sat on the mat" +
                    std::string(static_cast<size_t>(i % 5), ' ') + "rat" + std::to_string(i));
  }
  std::vector<Ids> expected;
  for (const auto& t : texts) expected.push_back(*(*tok)->Encode(t));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i * (w + 1) + static_cast<size_t>(round)) % texts.size();
          if (*(*tok)->Encode(texts[k]) != expected[k]) ++mismatches[w];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST_F(TokenizerTest, ErrorsNameTheFileAndField) {
  auto expect_error = [&](const std::string& needle) {
    auto tok = Load();
    ASSERT_FALSE(tok.ok()) << "expected an error mentioning " << needle;
    EXPECT_NE(tok.status().message().find(needle), std::string::npos) << tok.status();
    EXPECT_NE(tok.status().message().find("tokenizer"), std::string::npos) << tok.status();
  };
  const json good = ReadJson("tokenizer.json");
  json t = good;
  t["model"]["type"] = "WordPiece";
  WriteJson("tokenizer.json", t);
  expect_error("model.type");
  t = good;
  t["normalizer"] = {{"type", "NFKC"}};
  WriteJson("tokenizer.json", t);
  expect_error("normalizer.type");
  t = good;
  t["pre_tokenizer"] = {{"type", "Metaspace"}};
  WriteJson("tokenizer.json", t);
  expect_error("pre_tokenizer");
  t = good;
  t["model"]["merges"] = json::array({"a"});
  WriteJson("tokenizer.json", t);
  expect_error("model.merges[0]");
  WriteJson("tokenizer.json", good);
  json c = ReadJson("tokenizer_config.json");
  c["eos_token"] = {{"content", "<|nope|>"}};
  WriteJson("tokenizer_config.json", c);
  expect_error("eos_token");
  // Ids that would size a table of gigabytes are refused before anything is allocated.
  for (int64_t id : {int64_t{2147483647}, int64_t{2000000000}, int64_t{-1}}) {
    t = good;
    t["model"]["vocab"]["a"] = id;
    WriteJson("tokenizer.json", t);
    expect_error(absl::StrCat("model.vocab[\"a\"]: id ", id, " is outside [0, "));
    t = good;
    t["added_tokens"][0]["id"] = id;
    WriteJson("tokenizer.json", t);
    expect_error(absl::StrCat("added_tokens: id ", id, " is outside [0, "));
  }
  WriteJson("tokenizer.json", good);
  fs::remove(dir_ / "tokenizer.json");
  expect_error((dir_ / "tokenizer.json").string());
}

}  // namespace
}  // namespace rlmesh::tokenizer
