#include "common/model/model_info.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/tokenizer/tiny.h"

namespace rlmesh::model {
namespace {

using ::testing::HasSubstr;

class ModelInfoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("model_info_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  void WriteConfig(int vocab) {
    Write("config.json",
          R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 32, "intermediate_size": 48,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 8, "max_position_embeddings": 64, "tie_word_embeddings": true,
              "vocab_size": )" +
              std::to_string(vocab) + R"(, "eos_token_id": [)" + std::to_string(vocab - 1) + ", " +
              std::to_string(vocab - 3) + "]}");
  }
  std::filesystem::path dir_;
};

TEST_F(ModelInfoTest, Sha256MatchesTheStandardTestVector) {
  Write("abc", "abc");
  auto sha = FileSha256((dir_ / "abc").string());
  ASSERT_TRUE(sha.ok()) << sha.status();
  EXPECT_EQ(*sha, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Write("empty", "");
  EXPECT_EQ(FileSha256((dir_ / "empty").string()).value(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(FileSha256((dir_ / "missing").string()).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ModelInfoTest, ReportsTheVocabularySpecialTokensTemplateAndFileHashes) {
  tokenizer::TinyTokenizerInfo tiny;
  ASSERT_TRUE(tokenizer::WriteTinyTokenizer(dir_.string(), {}, &tiny).ok());
  WriteConfig(tiny.vocab_size);
  auto info = ReadModelInfo(dir_.string());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->architecture(), "Qwen3ForCausalLM");
  EXPECT_EQ(info->vocab_size(), tiny.vocab_size);
  EXPECT_THAT(info->eos_token_ids(),
              ::testing::ElementsAre(tiny.vocab_size - 1, tiny.vocab_size - 3));
  EXPECT_EQ(info->limits().max_position_embeddings(), 64);
  ASSERT_TRUE(info->has_pad_token_id());
  EXPECT_EQ(info->pad_token_id(), tiny.endoftext_id);
  ASSERT_EQ(info->special_tokens_size(), 3);
  EXPECT_EQ(info->special_tokens(0).id(), tiny.endoftext_id);
  EXPECT_EQ(info->special_tokens(0).content(), "<|endoftext|>");
  EXPECT_EQ(info->special_tokens(1).content(), "<|im_start|>");
  EXPECT_EQ(info->special_tokens(2).id(), tiny.im_end_id);
  EXPECT_THAT(info->chat_template(), HasSubstr("<|im_start|>"));
  // tokenizer.json, tokenizer_config.json and config.json, in that order, each hashed.
  ASSERT_EQ(info->files_size(), 3);
  EXPECT_EQ(info->files(0).name(), "tokenizer.json");
  EXPECT_EQ(info->files(2).name(), "config.json");
  EXPECT_EQ(info->tokenizer_sha256(), FileSha256((dir_ / "tokenizer.json").string()).value());
  EXPECT_EQ(info->files(0).bytes(),
            static_cast<int64_t>(std::filesystem::file_size(dir_ / "tokenizer.json")));
  // One byte more in tokenizer.json: another hash.
  const std::string before = info->tokenizer_sha256();
  std::ofstream(dir_ / "tokenizer.json", std::ios::app) << " ";
  EXPECT_NE(ReadModelInfo(dir_.string()).value().tokenizer_sha256(), before);
}

TEST_F(ModelInfoTest, AFolderWithoutTokenizerHasEmptyTokenizerFields) {
  WriteConfig(20);
  auto info = ReadModelInfo(dir_.string());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->vocab_size(), 20);
  EXPECT_EQ(info->tokenizer_sha256(), "");
  EXPECT_EQ(info->special_tokens_size(), 0);
  EXPECT_FALSE(info->has_pad_token_id());
}

TEST_F(ModelInfoTest, ABrokenTokenizerOrConfigIsNamed) {
  WriteConfig(20);
  Write("tokenizer.json", "{\"model\": ");
  auto info = ReadModelInfo(dir_.string());
  ASSERT_FALSE(info.ok());
  EXPECT_THAT(info.status().message(), HasSubstr("tokenizer.json"));
  Write("config.json", "[");
  info = ReadModelInfo(dir_.string());
  ASSERT_FALSE(info.ok());
  EXPECT_THAT(info.status().message(), HasSubstr("config.json"));
}

}  // namespace
}  // namespace rlmesh::model
