#include "common/model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

namespace rlmesh::model {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = testing::TempDir() + "/safetensors_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes a file by hand: 8-byte little-endian length, the header text, `data_bytes` zeros.
  std::string WriteRaw(const std::string& name, const std::string& header, size_t data_bytes,
                       int64_t claimed_header_len = -1) {
    const std::string path = dir_ + "/" + name;
    std::ofstream out(path, std::ios::binary);
    uint64_t len = claimed_header_len >= 0 ? claimed_header_len : header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xff));
    out << header << std::string(data_bytes, '\0');
    return path;
  }

  std::string OpenError(const std::string& path) {
    auto r = SafetensorsReader::Open(path);
    EXPECT_FALSE(r.ok());
    return r.ok() ? "" : std::string(r.status().message());
  }

  std::string dir_;
};

TEST_F(SafetensorsTest, WriteThenReadConvertsDtypes) {
  torch::Tensor a = torch::tensor({1.5f, -2.0f, 3.25f, 0.0f}).view({2, 2});
  torch::Tensor b = torch::tensor({0.5f, 1.0f, -1.0f}).to(torch::kBFloat16);
  torch::Tensor c = torch::tensor({4.0f, 8.0f}).to(torch::kFloat16);
  const std::string path = dir_ + "/w.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"a", a}, {"b", b}, {"c", c}}).ok());

  // Header: little-endian length, padded to a multiple of 8, with the "pt" metadata.
  std::ifstream in(path, std::ios::binary);
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  EXPECT_EQ(len % 8, 0u);
  std::string header(len, ' ');
  in.read(header.data(), len);
  EXPECT_THAT(header, HasSubstr("\"__metadata__\":{\"format\":\"pt\"}"));
  // 16 + 6 + 4 bytes of data after the header.
  EXPECT_EQ(fs::file_size(path), 8 + len + 26);

  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->entries().at("b").dtype, "BF16");
  EXPECT_EQ((*reader)->entries().at("c").dtype, "F16");
  auto ra = ReadTensor(**reader, "a", torch::kFloat32);
  ASSERT_TRUE(ra.ok());
  EXPECT_TRUE(torch::equal(*ra, a));
  auto rb = ReadTensor(**reader, "b", torch::kFloat32);
  ASSERT_TRUE(rb.ok());
  EXPECT_TRUE(torch::equal(*rb, torch::tensor({0.5f, 1.0f, -1.0f})));
  auto rc = ReadTensor(**reader, "c", torch::kBFloat16);
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(rc->scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(rc->to(torch::kFloat32), torch::tensor({4.0f, 8.0f})));
  auto missing = ReadTensor(**reader, "zzz", torch::kFloat32);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), AllOf(HasSubstr(path), HasSubstr("zzz")));
}

// NaN or infinite weights are refused when read, naming the tensor, in every dtype.
TEST_F(SafetensorsTest, NonFiniteWeightsAreRefusedNamingTheTensor) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  torch::Tensor good = torch::tensor({1.0f, 2.0f});
  torch::Tensor has_nan = torch::tensor({1.0f, nan, 3.0f});
  torch::Tensor has_inf = torch::tensor({-inf, 0.0f}).to(torch::kBFloat16);
  const std::string path = dir_ + "/nan.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"good", good}, {"nan", has_nan}, {"inf", has_inf}}).ok());
  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE(ReadTensor(**reader, "good", torch::kFloat32).ok());
  auto a = ReadTensor(**reader, "nan", torch::kFloat32);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(a.status().message()),
              HasSubstr("tensor \"nan\": 1 of 3 values are NaN or infinite"));
  auto b = ReadTensor(**reader, "inf", torch::kBFloat16);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("tensor \"inf\": 1 of 2 values are NaN or infinite"));
}

TEST_F(SafetensorsTest, ShardedCheckpointRoundTrips) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (int i = 0; i < 5; ++i) {
    tensors.push_back({"t" + std::to_string(i), torch::full({10}, static_cast<float>(i))});
  }
  // 40 bytes each, 100 bytes per shard: two tensors per shard, three shards.
  ASSERT_TRUE(WriteSafetensorsCheckpoint(dir_, tensors, 100).ok());
  EXPECT_TRUE(fs::exists(dir_ + "/model-00001-of-00003.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ + "/model-00003-of-00003.safetensors"));
  EXPECT_FALSE(fs::exists(dir_ + "/model.safetensors"));
  auto reader = SafetensorsReader::Open(dir_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ((*reader)->entries().size(), 5u);
  EXPECT_THAT((*reader)->entries().at("t4").file, HasSubstr("model-00003-of-00003"));
  auto t3 = ReadTensor(**reader, "t3", torch::kFloat32);
  ASSERT_TRUE(t3.ok());
  EXPECT_TRUE(torch::equal(*t3, torch::full({10}, 3.0f)));
}

TEST_F(SafetensorsTest, TruncatedDataNamesFileAndTensor) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  const std::string path = WriteRaw("trunc.safetensors", header, 10);  // 6 bytes short
  EXPECT_THAT(OpenError(path), AllOf(HasSubstr(path), HasSubstr("\"w\""), HasSubstr("truncated")));
}

TEST_F(SafetensorsTest, TooShortForHeaderLength) {
  const std::string path = dir_ + "/tiny.safetensors";
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_THAT(OpenError(path), AllOf(HasSubstr(path), HasSubstr("truncated")));
}

TEST_F(SafetensorsTest, HeaderLengthBeyondFile) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  const std::string path = WriteRaw("hdr.safetensors", header, 4, /*claimed=*/100000);
  EXPECT_THAT(OpenError(path), AllOf(HasSubstr(path), HasSubstr("header length 100000")));
}

TEST_F(SafetensorsTest, OffsetsOutsideDataNameTensor) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("far":{"dtype":"F32","shape":[1],"data_offsets":[400,404]}})";
  const std::string path = WriteRaw("far.safetensors", header, 8);
  EXPECT_THAT(OpenError(path), AllOf(HasSubstr(path), HasSubstr("\"far\""), HasSubstr("outside")));
}

TEST_F(SafetensorsTest, OverlappingOffsetsNameTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  const std::string path = WriteRaw("overlap.safetensors", header, 12);
  EXPECT_THAT(OpenError(path),
              AllOf(HasSubstr(path), HasSubstr("\"b\""), HasSubstr("overlap"), HasSubstr("\"a\"")));
}

TEST_F(SafetensorsTest, GapBetweenTensorsNamesTensor) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  const std::string path = WriteRaw("gap.safetensors", header, 12);
  EXPECT_THAT(OpenError(path), AllOf(HasSubstr(path), HasSubstr("\"b\""), HasSubstr("contiguous")));
}

TEST_F(SafetensorsTest, UnknownDtypeNamesTensor) {
  const std::string header = R"({"ids":{"dtype":"Q7","shape":[2],"data_offsets":[0,2]}})";
  const std::string path = WriteRaw("dtype.safetensors", header, 2);
  EXPECT_THAT(OpenError(path), AllOf(HasSubstr(path), HasSubstr("\"ids\""), HasSubstr("Q7")));
}

TEST_F(SafetensorsTest, ShapeDisagreesWithByteSpan) {
  const std::string header = R"({"w":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,8]}})";
  const std::string path = WriteRaw("span.safetensors", header, 8);
  // 3*2 BF16 elements need 12 bytes, not 8.
  EXPECT_THAT(OpenError(path), AllOf(HasSubstr(path), HasSubstr("\"w\""), HasSubstr("12 bytes")));
}

ModelConfig TinyLlama() {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = 6;
  c.hidden_size = 4;
  c.intermediate_size = 8;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 2;
  c.tie_word_embeddings = true;
  return c;
}

std::vector<std::pair<std::string, torch::Tensor>> ZerosFor(const ModelConfig& c) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [name, shape] : c.TensorShapes()) out.push_back({name, torch::zeros(shape)});
  return out;
}

TEST_F(SafetensorsTest, ValidateAgainstConfig) {
  const ModelConfig c = TinyLlama();
  auto tensors = ZerosFor(c);
  const std::string good = dir_ + "/good.safetensors";
  ASSERT_TRUE(WriteSafetensors(good, tensors).ok());
  auto reader = SafetensorsReader::Open(good);
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE((*reader)->ValidateAgainst(c).ok());

  // Missing tensor.
  auto fewer = tensors;
  fewer.erase(fewer.begin() + 2);  // model.layers.0.self_attn.q_proj.weight
  const std::string missing_path = dir_ + "/missing.safetensors";
  ASSERT_TRUE(WriteSafetensors(missing_path, fewer).ok());
  auto r1 = SafetensorsReader::Open(missing_path);
  ASSERT_TRUE(r1.ok());
  absl::Status st = (*r1)->ValidateAgainst(c);
  EXPECT_THAT(st.message(), AllOf(HasSubstr(missing_path), HasSubstr("missing"),
                                  HasSubstr("model.layers.0.self_attn.q_proj.weight")));

  // Unexpected tensor: lm_head.weight while the embeddings are tied.
  auto more = tensors;
  more.push_back({"lm_head.weight", torch::zeros({6, 4})});
  const std::string extra_path = dir_ + "/extra.safetensors";
  ASSERT_TRUE(WriteSafetensors(extra_path, more).ok());
  auto r2 = SafetensorsReader::Open(extra_path);
  ASSERT_TRUE(r2.ok());
  st = (*r2)->ValidateAgainst(c);
  EXPECT_THAT(st.message(),
              AllOf(HasSubstr(extra_path), HasSubstr("unexpected"), HasSubstr("lm_head.weight")));

  // Shape mismatch.
  auto wrong = tensors;
  wrong[0].second = torch::zeros({7, 4});  // model.embed_tokens.weight should be [6, 4]
  const std::string shape_path = dir_ + "/shape.safetensors";
  ASSERT_TRUE(WriteSafetensors(shape_path, wrong).ok());
  auto r3 = SafetensorsReader::Open(shape_path);
  ASSERT_TRUE(r3.ok());
  st = (*r3)->ValidateAgainst(c);
  EXPECT_THAT(st.message(), AllOf(HasSubstr(shape_path), HasSubstr("model.embed_tokens.weight"),
                                  HasSubstr("[7, 4]"), HasSubstr("[6, 4]")));
}

TEST_F(SafetensorsTest, IndexListingAbsentTensorNamesBoth) {
  ASSERT_TRUE(
      WriteSafetensors(dir_ + "/model-00001-of-00001.safetensors", {{"a", torch::zeros({2})}})
          .ok());
  std::ofstream(dir_ + "/model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"a":"model-00001-of-00001.safetensors",)"
         R"("ghost":"model-00001-of-00001.safetensors"}})";
  EXPECT_THAT(OpenError(dir_),
              AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("ghost")));
}

}  // namespace
}  // namespace rlmesh::model
