// Model parity: the C++ decoder's float32 logits against reference.py, an independent float64
// implementation of the Hugging Face Llama / Qwen2 / Qwen3 forward, on tiny random
// checkpoints covering Llama 3 rope_scaling, Qwen2 biases, Qwen3 q/k norms, tied and untied
// embeddings, GQA and MHA, and a head_dim that differs from hidden / heads.
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/model/causal_lm.h"
#include "common/model/pretrained.h"

namespace rlmesh::model {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string name;
  Arch arch;
  bool tie;
  int64_t heads, kv_heads, head_dim;
  bool rope_scaling = false;
  bool attention_bias = false;  // Llama / Qwen3 key
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ModelConfig ConfigFor(const Case& k) {
  ModelConfig c;
  c.arch = k.arch;
  switch (k.arch) {
    case Arch::kLlama:
      c.architecture = "LlamaForCausalLM";
      c.model_type = "llama";
      break;
    case Arch::kQwen2:
      c.architecture = "Qwen2ForCausalLM";
      c.model_type = "qwen2";
      break;
    case Arch::kQwen3:
      c.architecture = "Qwen3ForCausalLM";
      c.model_type = "qwen3";
      c.qk_norm = true;
      break;
  }
  c.attention_bias = k.arch == Arch::kQwen2 || k.attention_bias;
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_hidden_layers = 3;
  c.num_attention_heads = k.heads;
  c.num_key_value_heads = k.kv_heads;
  c.head_dim = k.head_dim;
  c.max_position_embeddings = 128;
  // A small theta makes the rotations large over a short sequence. With head_dim 16 the
  // wavelengths 2*pi*100^(2i/16) fall on both sides of 32/4 and 32/1, so the Llama 3
  // scaling's three branches (keep, smooth, divide) are all exercised.
  c.rope_theta = 100.0;
  c.rms_norm_eps = 1e-5;
  if (k.rope_scaling) c.rope_scaling = RopeScaling{4.0, 1.0, 4.0, 32};
  c.tie_word_embeddings = k.tie;
  return c;
}

std::string PythonScript() {
  const char* src = std::getenv("RLMESH_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/integration/model_parity/reference.py";
}

// The token-id lists as reference.py reads them (a JSON list of lists).
void WriteIds(const std::string& path, const std::vector<std::vector<int64_t>>& sequences) {
  std::ofstream ids(path);
  ids << "[";
  for (size_t s = 0; s < sequences.size(); ++s) {
    ids << (s ? "," : "") << "[";
    for (size_t i = 0; i < sequences[s].size(); ++i) ids << (i ? "," : "") << sequences[s][i];
    ids << "]";
  }
  ids << "]";
}

class ModelParityTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string tmpl = testing::TempDir() + "/model_parity_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_P(ModelParityTest, LogitsMatchIndependentReference) {
  const Case& k = GetParam();
  const ModelConfig config = ConfigFor(k);
  torch::manual_seed(20240611);
  auto created = CausalLmImpl::Create(config, {});
  ASSERT_TRUE(created.ok()) << created.status();
  auto model = *created;
  {
    // Weights far from the 0.02 init so attention is sharp and every term matters.
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      if (p.key().find("norm") != std::string::npos) {
        p.value().copy_(1.0 + 0.3 * torch::randn_like(p.value()));
      } else {
        p.value().copy_(0.25 * torch::randn_like(p.value()));
      }
    }
  }
  const std::string model_dir = dir_ + "/model";
  ASSERT_TRUE(SavePretrained(*model, model_dir, "").ok());

  const std::vector<std::vector<int64_t>> sequences = {
      {5, 17, 3, 96, 40, 2, 2, 71, 8, 33, 60, 14, 0, 88, 29, 51, 7, 7, 19, 42, 64, 11, 90, 36},
      {1, 2, 3},
      {77}};
  WriteIds(dir_ + "/ids.json", sequences);
  const std::string cmd = "/usr/bin/python3 " + PythonScript() + " --model " + model_dir +
                          " --ids " + dir_ + "/ids.json --out " + dir_ + "/logits.bin";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(dir_ + "/logits.bin", std::ios::binary);
  ASSERT_TRUE(in.good());

  // The checkpoint as loaded from disk, as a user would get it.
  auto loaded = LoadPretrained(model_dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (const auto& seq : sequences) {
    const int64_t t = seq.size();
    std::vector<double> want(t * config.vocab_size);
    in.read(reinterpret_cast<char*>(want.data()), want.size() * sizeof(double));
    ASSERT_TRUE(in.good()) << "reference output too short";
    torch::Tensor expected = torch::tensor(want, torch::kFloat64).view({t, config.vocab_size});
    torch::Tensor got = (*loaded)
                            ->Forward(torch::tensor(seq, torch::kLong).unsqueeze(0),
                                      torch::ones({1, t}, torch::kLong),
                                      torch::arange(t, torch::kLong).unsqueeze(0))[0]
                            .to(torch::kFloat64);
    const double rel = ((got - expected).abs().max() / expected.abs().max()).item<double>();
    EXPECT_LT(rel, 1e-4) << k.name << ": sequence of " << t << " tokens";
    // Sanity: the logits are not trivially small, so the comparison means something.
    EXPECT_GT(expected.abs().max().item<double>(), 1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, ModelParityTest,
    ::testing::Values(
        Case{"llama_rope_scaling_gqa_untied", Arch::kLlama, false, 4, 2, 16, true, false},
        Case{"llama_attention_bias_tied_mha", Arch::kLlama, true, 3, 3, 16, false, true},
        Case{"qwen2_biases_tied_gqa", Arch::kQwen2, true, 4, 1, 12, false, false},
        Case{"qwen2_biases_untied", Arch::kQwen2, false, 6, 2, 8, false, false},
        Case{"qwen3_qk_norm_untied_head_dim", Arch::kQwen3, false, 4, 2, 16, false, false},
        Case{"qwen3_qk_norm_tied_bias", Arch::kQwen3, true, 2, 1, 24, false, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

std::string Rlmesh() {
  // RLMESH_BUILD_DIR when set, else the build this test belongs to (not a folder named build:
  // `make test BUILD=...` and tests/gpu's builds are elsewhere).
  const char* build = std::getenv("RLMESH_BUILD_DIR");
  return std::string(build ? build : RLMESH_TEST_BUILD_DIR) + "/bin/rlmesh";
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Reward models: `rlmesh make-tiny-model --num-labels N` writes a …ForSequenceClassification
// checkpoint; with its weights scaled up, a right-padded batch's scores (SequenceScores, at
// the last token that is not the pad id, as transformers reads them) equal reference.py's
// float64 ones, each sequence scored alone.
TEST_F(ModelParityTest, RewardModelScoresMatchIndependentReference) {
  for (const auto& [arch, labels] :
       std::vector<std::pair<std::string, int>>{{"llama", 1}, {"qwen2", 3}, {"qwen3", 1}}) {
    const std::string tiny = dir_ + "/tiny_" + arch;
    const std::string cmd = Rlmesh() + " make-tiny-model --arch " + arch +
                            " --hidden 48 --layers 3 --heads 4 --kv-heads 2 --intermediate 80"
                            " --max-position 128 --num-labels " + std::to_string(labels) +
                            " --seed 3 --out " + tiny + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    CausalLmOptions options;
    options.sequence_classification = true;
    auto made = LoadPretrained(tiny, options);
    ASSERT_TRUE(made.ok()) << made.status();
    const ModelConfig& config = (*made)->config();
    EXPECT_EQ(config.architecture.find("ForSequenceClassification") != std::string::npos, true);
    EXPECT_EQ(config.num_labels, labels);
    ASSERT_TRUE(config.pad_token_id.has_value());
    // A policy loader refuses it, naming the architecture.
    auto as_policy = LoadPretrained(tiny, {});
    ASSERT_FALSE(as_policy.ok());
    EXPECT_NE(as_policy.status().message().find("is a reward model"), std::string::npos);
    {
      torch::NoGradGuard no_grad;
      torch::manual_seed(11);
      for (auto& p : (*made)->named_parameters()) {
        p.value().copy_(p.key().find("norm") != std::string::npos
                            ? 1.0 + 0.3 * torch::randn_like(p.value())
                            : 0.25 * torch::randn_like(p.value()));
      }
    }
    const std::string model_dir = dir_ + "/rm_" + arch;
    ASSERT_TRUE(SavePretrained(**made, model_dir, tiny).ok());
    const int64_t pad = *config.pad_token_id;
    const std::vector<std::vector<int64_t>> sequences = {
        {5, 17, 3, 96, 40, 2, 2, 71, 8, 33, 60, 14, 0, 88, 29, 51, pad, pad},  // ends in pad ids
        {1, 2, 3},
        {pad, 7, 9, 200},
        {77}};
    WriteIds(dir_ + "/rm_ids.json", sequences);
    const std::string ref = "/usr/bin/python3 " + PythonScript() + " --model " + model_dir +
                            " --ids " + dir_ + "/rm_ids.json --out " + dir_ + "/rm_scores.bin";
    ASSERT_EQ(std::system(ref.c_str()), 0) << ref;
    std::ifstream in(dir_ + "/rm_scores.bin", std::ios::binary);
    std::vector<double> want(sequences.size() * labels);
    in.read(reinterpret_cast<char*>(want.data()), want.size() * sizeof(double));
    ASSERT_TRUE(in.good()) << "reference output too short";
    const torch::Tensor expected =
        torch::tensor(want, torch::kFloat64).view({static_cast<int64_t>(sequences.size()), labels});

    // One right-padded batch (padded with the pad id, masked), as the reward service batches.
    auto loaded = LoadPretrained(model_dir, options);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const int64_t b = sequences.size(), t = sequences[0].size();
    torch::Tensor ids = torch::full({b, t}, pad, torch::kLong);
    torch::Tensor mask = torch::zeros({b, t}, torch::kLong);
    for (int64_t s = 0; s < b; ++s) {
      const int64_t n = sequences[s].size();
      ids[s].narrow(0, 0, n).copy_(torch::tensor(sequences[s], torch::kLong));
      mask[s].narrow(0, 0, n).fill_(1);
    }
    const torch::Tensor positions = torch::arange(t, torch::kLong).unsqueeze(0).expand({b, t});
    torch::Tensor got;
    {
      torch::NoGradGuard no_grad;
      got = SequenceScores((*loaded)->Forward(ids, mask, positions), ids, mask, pad)
                .to(torch::kFloat64);
    }
    ASSERT_EQ(got.sizes(), expected.sizes());
    const double rel = ((got - expected).abs().max() / expected.abs().max()).item<double>();
    EXPECT_LT(rel, 1e-4) << arch << "\ngot " << got << "\nexpected " << expected;
    EXPECT_GT(expected.abs().max().item<double>(), 0.5) << arch;
  }
}

TEST_F(ModelParityTest, MakeTinyModelWritesALoadableSeededCheckpoint) {
  const std::string flags =
      " make-tiny-model --arch qwen2 --hidden 16 --layers 2 --heads 2 --kv-heads 1"
      " --intermediate 24 --tie";
  for (const char* name : {"a", "b", "c"}) {
    const std::string seed = std::string(name) == "c" ? "8" : "7";
    const std::string cmd =
        Rlmesh() + flags + " --seed " + seed + " --out " + dir_ + "/" + name + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json",
                           "tokenizer_config.json"}) {
    EXPECT_TRUE(fs::exists(dir_ + "/a/" + file)) << file;
  }
  // Same seed, same bytes; another seed, other weights.
  EXPECT_EQ(ReadBytes(dir_ + "/a/model.safetensors"), ReadBytes(dir_ + "/b/model.safetensors"));
  EXPECT_NE(ReadBytes(dir_ + "/a/model.safetensors"), ReadBytes(dir_ + "/c/model.safetensors"));

  auto m = LoadPretrained(dir_ + "/a", {});
  ASSERT_TRUE(m.ok()) << m.status();
  // The tiny tokenizer has 256 byte tokens + 3 special tokens: vocab 259. By hand: embed
  // 259*16 = 4144; per layer q 16*16+16, k and v 16*8+8 each, o 16*16, mlp 3*16*24,
  // 2 norms of 16 = 1984; two layers 3968; final norm 16.
  EXPECT_EQ((*m)->config().vocab_size, 259);
  EXPECT_EQ((*m)->config().NumParameters(), 4144 + 3968 + 16);
  for (const auto& p : (*m)->named_parameters()) {
    const std::string& name = p.key();
    if (name.find("norm") != std::string::npos) {
      EXPECT_TRUE(torch::equal(p.value(), torch::ones_like(p.value()))) << name;
    } else if (name.find("bias") != std::string::npos) {
      EXPECT_TRUE(torch::equal(p.value(), torch::zeros_like(p.value()))) << name;
    }
  }
  const double spread = (*m)->named_parameters()["model.embed_tokens.weight"].std().item<double>();
  EXPECT_NEAR(spread, 0.02, 0.002);  // 4144 normal(0, 0.02) draws
  // bfloat16 output is stored as BF16.
  const std::string cmd = Rlmesh() + flags + " --dtype bfloat16 --out " + dir_ + "/bf > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_NE(ReadBytes(dir_ + "/bf/model.safetensors").find("\"BF16\""), std::string::npos);
}

}  // namespace
}  // namespace rlmesh::model
