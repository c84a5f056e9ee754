#include "common/model/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rlmesh::model {
namespace {

using ::testing::HasSubstr;

// Qwen/Qwen2.5-0.5B config.json (the keys that matter).
constexpr char kQwen25_05B[] = R"({
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
  "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
  "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
  "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "use_sliding_window": false})";

// Qwen/Qwen3-0.6B config.json.
constexpr char kQwen3_06B[] = R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
  "vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
  "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
  "head_dim": 128, "attention_bias": false, "max_position_embeddings": 40960,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000, "rope_scaling": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "bos_token_id": 151643,
  "eos_token_id": 151645})";

// meta-llama/Llama-3.2-1B config.json.
constexpr char kLlama32_1B[] = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
  "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
  "head_dim": 64, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0, "attention_bias": false, "mlp_bias": false,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "tie_word_embeddings": true, "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009]})";

TEST(ModelConfigTest, Qwen25ParameterCountByHand) {
  auto c = ModelConfig::FromJson(kQwen25_05B, "qwen.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, Arch::kQwen2);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->head_dim, 64);
  // embed 151936*896 = 136,134,656; per layer: q 896*896+896, k/v 896*128+128 each,
  // o 896*896, mlp 3*896*4864, 2 norms of 896 = 14,912,384; x24 = 357,897,216; final norm 896.
  EXPECT_EQ(c->NumParameters(), 494032768);
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{151643});
  EXPECT_EQ(c->torch_dtype, "bfloat16");
}

TEST(ModelConfigTest, Qwen3ParameterCountByHand) {
  auto c = ModelConfig::FromJson(kQwen3_06B, "qwen3.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->head_dim, 128);
  // embed 155,582,464; per layer q 1024*2048, k/v 1024*1024, o 2048*1024, q/k norm 2*128,
  // mlp 3*1024*3072, norms 2*1024 = 15,730,944; x28 = 440,466,432; final norm 1024.
  EXPECT_EQ(c->NumParameters(), 596049920);
}

TEST(ModelConfigTest, Llama32RopeScalingAndEosList) {
  auto c = ModelConfig::FromJson(kLlama32_1B, "llama.json");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->rope_scaling.has_value());
  EXPECT_DOUBLE_EQ(c->rope_scaling->factor, 32.0);
  EXPECT_EQ(c->rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c->bos_token_id, 128000);
  // embed 128256*2048 = 262,668,288; per layer 60,821,504 x16; final norm 2048.
  EXPECT_EQ(c->NumParameters(), 1235814400);
}

TEST(ModelConfigTest, TensorShapesOrderAndTiedHead) {
  auto c = ModelConfig::FromJson(kQwen3_06B, "qwen3.json");
  ASSERT_TRUE(c.ok());
  auto shapes = c->TensorShapes();
  ASSERT_EQ(shapes.size(), 1u + 28u * 11u + 1u);
  EXPECT_EQ(shapes[0].first, "model.embed_tokens.weight");
  EXPECT_EQ(shapes[1].first, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(shapes[2].first, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(shapes[2].second, (std::vector<int64_t>{2048, 1024}));
  EXPECT_EQ(shapes[5].first, "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(shapes[5].second, (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(shapes[6].first, "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(shapes.back().first, "model.norm.weight");

  c->tie_word_embeddings = false;
  auto untied = c->TensorShapes();
  EXPECT_EQ(untied.back().first, "lm_head.weight");
  EXPECT_EQ(c->NumParameters(), 596049920 + 151936LL * 1024);
}

TEST(ModelConfigTest, QwenBiasesAppearInShapes) {
  auto c = ModelConfig::FromJson(kQwen25_05B, "q.json");
  ASSERT_TRUE(c.ok());
  auto shapes = c->TensorShapes();
  EXPECT_EQ(shapes[3].first, "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(shapes[3].second, std::vector<int64_t>{896});
  EXPECT_EQ(shapes[5].first, "model.layers.0.self_attn.k_proj.bias");
  EXPECT_EQ(shapes[5].second, std::vector<int64_t>{128});
}

TEST(ModelConfigTest, ToJsonRoundTrips) {
  for (const char* text : {kQwen25_05B, kQwen3_06B, kLlama32_1B}) {
    auto c = ModelConfig::FromJson(text, "in.json");
    ASSERT_TRUE(c.ok());
    auto back = ModelConfig::FromJson(c->ToJson(), "out.json");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->architecture, c->architecture);
    EXPECT_EQ(back->TensorShapes(), c->TensorShapes());
    EXPECT_EQ(back->head_dim, c->head_dim);
    EXPECT_DOUBLE_EQ(back->rope_theta, c->rope_theta);
    EXPECT_DOUBLE_EQ(back->rms_norm_eps, c->rms_norm_eps);
    EXPECT_EQ(back->rope_scaling.has_value(), c->rope_scaling.has_value());
    EXPECT_EQ(back->eos_token_ids, c->eos_token_ids);
    EXPECT_EQ(back->bos_token_id, c->bos_token_id);
    EXPECT_EQ(back->tie_word_embeddings, c->tie_word_embeddings);
    EXPECT_EQ(back->max_position_embeddings, c->max_position_embeddings);
  }
}

TEST(ModelConfigTest, UnknownArchitectureNamesIt) {
  auto c = ModelConfig::FromJson(
      R"({"architectures": ["MistralForCausalLM"], "vocab_size": 10})", "m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("MistralForCausalLM"));
  EXPECT_THAT(c.status().message(), HasSubstr("m/config.json"));
}

TEST(ModelConfigTest, BadValuesNameTheKey) {
  auto missing = ModelConfig::FromJson(R"({"architectures": ["LlamaForCausalLM"],
      "vocab_size": 10, "intermediate_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2})", "c.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("hidden_size"));

  auto gqa = ModelConfig::FromJson(R"({"architectures": ["LlamaForCausalLM"],
      "vocab_size": 10, "hidden_size": 12, "intermediate_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 3, "num_key_value_heads": 2})", "c.json");
  ASSERT_FALSE(gqa.ok());
  EXPECT_THAT(gqa.status().message(), HasSubstr("num_key_value_heads"));

  auto rope = ModelConfig::FromJson(R"({"architectures": ["LlamaForCausalLM"],
      "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2, "rope_scaling": {"rope_type": "yarn", "factor": 4}})",
                                    "c.json");
  ASSERT_FALSE(rope.ok());
  EXPECT_THAT(rope.status().message(), HasSubstr("yarn"));

  auto eos = ModelConfig::FromJson(R"({"architectures": ["LlamaForCausalLM"],
      "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2, "eos_token_id": "x"})", "c.json");
  ASSERT_FALSE(eos.ok());
  EXPECT_THAT(eos.status().message(), HasSubstr("eos_token_id"));
}

TEST(ModelConfigTest, DefaultsForOptionalKeys) {
  auto c = ModelConfig::FromJson(R"({"architectures": ["LlamaForCausalLM"],
      "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
      "num_attention_heads": 2})", "c.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->head_dim, 4);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->rope_scaling.has_value());
  // embed 80 + layer (2 norms 16, q/k/v/o 4*64, mlp 3*128) = 656 + norm 8 + lm_head 80.
  EXPECT_EQ(c->NumParameters(), 80 + 656 + 8 + 80);
}

}  // namespace
}  // namespace rlmesh::model
