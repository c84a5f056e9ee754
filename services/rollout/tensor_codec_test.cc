// Weight-update tensors in parts (rlmesh.v1.Tensor.offset): a tensor split by
// EncodeTensorParts at any part size (odd ones cut elements in two) is joined bit-exactly by
// TensorAssembler; parts out of order, of another dtype or shape, beyond the tensor, or
// interleaved with another tensor are refused naming the tensor; DecodeTensor, used everywhere
// else, refuses parts.
#include "services/rollout/tensor_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rlmesh::rollout {
namespace {

using ::testing::HasSubstr;

std::vector<v1::Tensor> Parts(const std::string& name, const torch::Tensor& t, int64_t part_bytes) {
  std::vector<v1::Tensor> parts;
  EXPECT_TRUE(EncodeTensorParts(name, t, part_bytes, [&](v1::Tensor&& p) {
                parts.push_back(std::move(p));
                return absl::OkStatus();
              }).ok());
  return parts;
}

TEST(TensorPartsTest, AnyPartSizeJoinsBitExactly) {
  torch::manual_seed(7);
  const torch::Tensor t = torch::randn({13, 7}).to(torch::kBFloat16);  // 182 bytes
  for (int64_t part : {1, 3, 64, 181, 182, 1000}) {
    auto parts = Parts("w", t, part);
    EXPECT_EQ(parts.size(), static_cast<size_t>((182 + part - 1) / part)) << part;
    TensorAssembler assembler;
    std::optional<torch::Tensor> joined;
    for (size_t i = 0; i < parts.size(); ++i) {
      auto got = assembler.Add(parts[i]);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->has_value(), i + 1 == parts.size()) << "part " << i << " of size " << part;
      if (got->has_value()) joined = **got;
    }
    ASSERT_TRUE(joined.has_value());
    EXPECT_EQ(assembler.unfinished(), "");
    EXPECT_TRUE(torch::equal(*joined, t)) << part;
  }
}

TEST(TensorPartsTest, PartsOutOfPlaceAreRefusedNamingTheTensor) {
  const torch::Tensor t = torch::arange(100, torch::kFloat32);  // 400 bytes
  auto parts = Parts("model.embed_tokens.weight", t, 128);
  ASSERT_EQ(parts.size(), 4u);
  {
    TensorAssembler a;  // a later part first
    auto got = a.Add(parts[1]);
    ASSERT_FALSE(got.ok());
    EXPECT_THAT(got.status().message(), HasSubstr("model.embed_tokens.weight"));
    EXPECT_THAT(got.status().message(), HasSubstr("no part of it came before"));
  }
  {
    TensorAssembler a;  // a part skipped
    ASSERT_TRUE(a.Add(parts[0]).ok());
    auto got = a.Add(parts[2]);
    ASSERT_FALSE(got.ok());
    EXPECT_THAT(got.status().message(), HasSubstr("expected 128"));
  }
  {
    TensorAssembler a;  // another tensor while this one is unfinished
    ASSERT_TRUE(a.Add(parts[0]).ok());
    EXPECT_EQ(a.unfinished(), "model.embed_tokens.weight");
    auto other = Parts("lm_head.weight", t, 1000);
    auto got = a.Add(other[0]);
    ASSERT_FALSE(got.ok());
    EXPECT_THAT(got.status().message(), HasSubstr("\"model.embed_tokens.weight\" is not finished"));
  }
  {
    TensorAssembler a;  // a later part of another dtype
    ASSERT_TRUE(a.Add(parts[0]).ok());
    v1::Tensor wrong = parts[1];
    wrong.set_dtype(v1::DTYPE_BFLOAT16);
    auto got = a.Add(wrong);
    ASSERT_FALSE(got.ok());
    EXPECT_THAT(got.status().message(), HasSubstr("dtype or shape differs"));
  }
  {
    TensorAssembler a;  // bytes beyond the tensor
    ASSERT_TRUE(a.Add(parts[0]).ok());
    v1::Tensor big = parts[1];
    big.set_data(std::string(400, 'x'));
    auto got = a.Add(big);
    ASSERT_FALSE(got.ok());
    EXPECT_THAT(got.status().message(), HasSubstr("at most 272 more bytes"));
  }
}

TEST(TensorPartsTest, DecodeTensorRefusesAPart) {
  auto parts = Parts("w", torch::arange(100, torch::kFloat32), 128);
  auto got = DecodeTensor(parts[1]);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("tensors[w].offset: 128"));
  // The first part has offset 0 but too few bytes for the shape.
  EXPECT_FALSE(DecodeTensor(parts[0]).ok());
}

}  // namespace
}  // namespace rlmesh::rollout
