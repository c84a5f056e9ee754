#include "common/model/causal_lm.h"

#include <ATen/Version.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>

#include "common/model/decoder_layers.h"
#include "common/model/pretrained.h"

namespace rlmesh::model {
namespace {

namespace fs = std::filesystem;

ModelConfig Tiny(Arch arch, bool tie) {
  ModelConfig c;
  c.arch = arch;
  switch (arch) {
    case Arch::kLlama:
      c.architecture = "LlamaForCausalLM";
      c.model_type = "llama";
      c.rope_scaling = RopeScaling{4.0, 1.0, 4.0, 16};
      break;
    case Arch::kQwen2:
      c.architecture = "Qwen2ForCausalLM";
      c.model_type = "qwen2";
      c.attention_bias = true;
      break;
    case Arch::kQwen3:
      c.architecture = "Qwen3ForCausalLM";
      c.model_type = "qwen3";
      c.qk_norm = true;
      break;
  }
  c.vocab_size = 50;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = tie;
  return c;
}

std::shared_ptr<CausalLmImpl> Build(const ModelConfig& c, CausalLmOptions options = {}) {
  torch::manual_seed(1234);
  auto m = CausalLmImpl::Create(c, options);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

torch::Tensor Ids(std::vector<int64_t> v) { return torch::tensor(v, torch::kLong).unsqueeze(0); }

torch::Tensor Positions(int64_t t) { return torch::arange(t, torch::kLong).unsqueeze(0); }

double MaxRelError(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max()).item<double>();
}

class CausalLmTest : public ::testing::TestWithParam<std::tuple<Arch, bool>> {};

TEST_P(CausalLmTest, NamedParametersAreTheHuggingFaceTensors) {
  const auto [arch, tie] = GetParam();
  const ModelConfig c = Tiny(arch, tie);
  auto m = Build(c);
  auto params = m->named_parameters();
  const auto shapes = c.TensorShapes();
  ASSERT_EQ(params.size(), shapes.size());
  int64_t total = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(params[i].key(), shapes[i].first);
    EXPECT_EQ(params[i].value().sizes().vec(), shapes[i].second) << shapes[i].first;
    total += params[i].value().numel();
  }
  EXPECT_EQ(total, c.NumParameters());
}

TEST_P(CausalLmTest, CachedDecodingMatchesFullForward) {
  const auto [arch, tie] = GetParam();
  auto m = Build(Tiny(arch, tie));
  const std::vector<int64_t> a = {3, 17, 5, 42, 8, 1, 29, 11};
  const std::vector<int64_t> b = {9, 2, 33, 7, 21};
  auto full_logprobs = [&](const std::vector<int64_t>& s) {
    const int64_t t = s.size();
    torch::Tensor logits = m->Forward(Ids(s), torch::ones({1, t}, torch::kLong), Positions(t));
    torch::Tensor ids = Ids(s);
    return LogProbsFromLogits(logits.narrow(1, 0, t - 1), ids.narrow(1, 1, t - 1), 1.0)[0];
  };
  const torch::Tensor want_a = full_logprobs(a), want_b = full_logprobs(b);

  // Slots 1 (a) and 0 (b): a non-contiguous slot order. Prefill 3 and 2 tokens in one padded
  // batch, then decode one token per step.
  KvCache cache = m->NewCache(/*max_seqs=*/3, /*max_len=*/16);
  std::vector<float> got_a, got_b;
  torch::Tensor prefill = torch::tensor({3, 17, 5, 9, 2, 0}, torch::kLong).view({2, 3});
  torch::Tensor logits = m->ForwardCached(prefill, {1, 0}, {3, 2}, &cache);
  auto logp = [](const torch::Tensor& row_logits, int64_t target) {
    return LogProbsFromLogits(row_logits.view({1, 1, -1}), torch::tensor({{target}}), 1.0)
        .item<float>();
  };
  got_a.push_back(logp(logits[0][0], a[1]));
  got_a.push_back(logp(logits[0][1], a[2]));
  got_a.push_back(logp(logits[0][2], a[3]));
  got_b.push_back(logp(logits[1][0], b[1]));
  got_b.push_back(logp(logits[1][1], b[2]));
  EXPECT_EQ(cache.lengths, (std::vector<int64_t>{2, 3, 0}));
  size_t ia = 3, ib = 2;
  while (ia + 1 < a.size()) {
    std::vector<int64_t> slots = {1}, step = {a[ia]};
    if (ib + 1 < b.size()) {
      slots.push_back(0);
      step.push_back(b[ib]);
    }
    torch::Tensor x = torch::tensor(step, torch::kLong).view({-1, 1});
    torch::Tensor last =
        m->ForwardCachedLast(x, slots, std::vector<int64_t>(slots.size(), 1), &cache);
    got_a.push_back(logp(last[0], a[ia + 1]));
    ++ia;
    if (slots.size() == 2) {
      got_b.push_back(logp(last[1], b[ib + 1]));
      ++ib;
    }
  }
  EXPECT_EQ(cache.lengths, (std::vector<int64_t>{4, 7, 0}));
  EXPECT_TRUE(torch::allclose(torch::tensor(got_a), want_a, 1e-5, 1e-5))
      << torch::tensor(got_a) << want_a;
  EXPECT_TRUE(torch::allclose(torch::tensor(got_b), want_b, 1e-5, 1e-5));
}

// ForwardCachedLast of a prefill (several tokens per row, padded, one row with nothing new)
// returns each row's last-token logits of ForwardCached and leaves the same cache behind: the
// CPU path runs the last layer's attention and MLP for those tokens alone.
TEST_P(CausalLmTest, PrefillOfLastTokensMatchesTheFullCachedForward) {
  const auto [arch, tie] = GetParam();
  auto m = Build(Tiny(arch, tie));
  KvCache full_cache = m->NewCache(/*max_seqs=*/3, /*max_len=*/16);
  KvCache last_cache = m->NewCache(/*max_seqs=*/3, /*max_len=*/16);
  torch::Tensor first = torch::tensor({11, 12, 0, 0}, torch::kLong).view({1, 4});
  m->ForwardCached(first, {2}, {2}, &full_cache);  // slot 2 starts with 2 cached tokens
  m->ForwardCached(first, {2}, {2}, &last_cache);
  torch::Tensor prefill =
      torch::tensor({3, 17, 5, 9, 2, 0, 0, 0, 6, 1, 4, 0}, torch::kLong).view({3, 4});
  const std::vector<int64_t> slots = {1, 0, 2}, num_new = {4, 2, 3};
  torch::Tensor all = m->ForwardCached(prefill, slots, num_new, &full_cache);
  torch::Tensor last = m->ForwardCachedLast(prefill, slots, num_new, &last_cache);
  ASSERT_EQ(last.sizes(), (std::vector<int64_t>{3, all.size(2)}));
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_LT(MaxRelError(last[i], all[i][num_new[i] - 1]), 1e-5) << "row " << i;
  }
  EXPECT_EQ(last_cache.lengths, full_cache.lengths);
  for (size_t l = 0; l < full_cache.keys.size(); ++l) {
    EXPECT_TRUE(torch::equal(last_cache.keys[l], full_cache.keys[l])) << "layer " << l;
    EXPECT_TRUE(torch::equal(last_cache.values[l], full_cache.values[l])) << "layer " << l;
  }
  // A row with nothing new among rows with several tokens: its (unused) logits stay finite.
  torch::Tensor more = torch::tensor({7, 8, 0, 0}, torch::kLong).view({2, 2});
  torch::Tensor some = m->ForwardCachedLast(more, {1, 0}, {2, 0}, &last_cache);
  EXPECT_TRUE(torch::isfinite(some).all().item<bool>());
  EXPECT_LT(MaxRelError(some[0], m->ForwardCached(more, {1, 0}, {2, 0}, &full_cache)[0][1]), 1e-5);
}

TEST_P(CausalLmTest, PaddedBatchMatchesEachSequenceAlone) {
  const auto [arch, tie] = GetParam();
  auto m = Build(Tiny(arch, tie));
  const std::vector<int64_t> a = {4, 8, 15, 16, 23, 42};
  const std::vector<int64_t> b = {7, 1, 30};
  torch::Tensor alone_a = m->Forward(Ids(a), torch::ones({1, 6}, torch::kLong), Positions(6));
  torch::Tensor alone_b = m->Forward(Ids(b), torch::ones({1, 3}, torch::kLong), Positions(3));

  // Row 1 is left-padded: mask 0 and position 0 on the three pads, positions 0..2 after.
  torch::Tensor ids =
      torch::tensor({4, 8, 15, 16, 23, 42, 0, 0, 0, 7, 1, 30}, torch::kLong).view({2, 6});
  torch::Tensor mask =
      torch::tensor({1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1}, torch::kLong).view({2, 6});
  torch::Tensor pos =
      torch::tensor({0, 1, 2, 3, 4, 5, 0, 0, 0, 0, 1, 2}, torch::kLong).view({2, 6});
  torch::Tensor batch = m->Forward(ids, mask, pos);
  EXPECT_TRUE(torch::isfinite(batch).all().item<bool>());  // fully masked pad rows: no NaN
  EXPECT_LT(MaxRelError(batch[0], alone_a[0]), 1e-5);
  EXPECT_LT(MaxRelError(batch[1].narrow(0, 3, 3), alone_b[0]), 1e-5);

  // Right padding as well.
  torch::Tensor ids_r = torch::tensor({7, 1, 30, 0, 0, 0}, torch::kLong).view({1, 6});
  torch::Tensor mask_r = torch::tensor({1, 1, 1, 0, 0, 0}, torch::kLong).view({1, 6});
  torch::Tensor right = m->Forward(ids_r, mask_r, Positions(6));
  EXPECT_LT(MaxRelError(right[0].narrow(0, 0, 3), alone_b[0]), 1e-5);
}

TEST_P(CausalLmTest, SaveAndReloadGiveBitIdenticalLogits) {
  const auto [arch, tie] = GetParam();
  auto m = Build(Tiny(arch, tie));
  std::string tmpl = testing::TempDir() + "/causal_lm_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl + "/model";
  ASSERT_TRUE(SavePretrained(*m, dir, "").ok());
  EXPECT_TRUE(fs::exists(dir + "/config.json"));
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  auto loaded = LoadPretrained(dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  torch::Tensor ids = Ids({1, 2, 3, 4, 5});
  torch::Tensor ones = torch::ones({1, 5}, torch::kLong);
  EXPECT_TRUE(torch::equal(m->Forward(ids, ones, Positions(5)),
                           (*loaded)->Forward(ids, ones, Positions(5))));

  // Saving again over the folder replaces it.
  ASSERT_TRUE(SavePretrained(**loaded, dir, "").ok());

  // bfloat16 load of the same weights runs and stays close to float32.
  CausalLmOptions bf16;
  bf16.dtype = torch::kBFloat16;
  auto low = LoadPretrained(dir, bf16);
  ASSERT_TRUE(low.ok()) << low.status();
  torch::Tensor lb = (*low)->Forward(ids, ones, Positions(5));
  EXPECT_EQ(lb.scalar_type(), torch::kFloat32);
  EXPECT_LT(MaxRelError(lb, m->Forward(ids, ones, Positions(5))), 5e-2);
  fs::remove_all(tmpl);
}

TEST_P(CausalLmTest, GradientCheckpointingGivesTheSameGradients) {
  const auto [arch, tie] = GetParam();
  const ModelConfig c = Tiny(arch, tie);
  auto plain = Build(c);
  CausalLmOptions ckpt_options;
  ckpt_options.gradient_checkpointing = true;
  auto ckpt = Build(c, ckpt_options);  // same seed: same weights
  torch::Tensor ids = torch::tensor({5, 6, 7, 8, 0, 0, 9, 10}, torch::kLong).view({2, 4});
  torch::Tensor mask = torch::tensor({1, 1, 1, 1, 0, 0, 1, 1}, torch::kLong).view({2, 4});
  torch::Tensor pos = torch::tensor({0, 1, 2, 3, 0, 0, 0, 1}, torch::kLong).view({2, 4});
  torch::Tensor targets = torch::tensor({6, 7, 8, 1, 1, 1, 10, 2}, torch::kLong).view({2, 4});
  for (auto& m : {plain, ckpt}) {
    m->train();
    torch::Tensor loss =
        -(LogProbsFromLogits(m->Forward(ids, mask, pos), targets, 0.7) * mask).sum();
    loss.backward();
  }
  auto pa = plain->named_parameters(), pb = ckpt->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_TRUE(pb[i].value().grad().defined()) << pb[i].key();
    EXPECT_GT(pa[i].value().grad().abs().sum().item<double>(), 0.0) << pa[i].key();
    EXPECT_TRUE(torch::allclose(pa[i].value().grad(), pb[i].value().grad(), 1e-5, 1e-6))
        << pa[i].key();
  }
}

// use_remove_padding: three sequences (left-padded, right-padded, full) packed into one row
// give the padded batch's logits at every real token and the same parameter gradients, with
// and without gradient checkpointing; nothing leaks across the sequence boundaries.
TEST_P(CausalLmTest, PackedForwardGivesThePaddedLogitsAndGradients) {
  const auto [arch, tie] = GetParam();
  const ModelConfig c = Tiny(arch, tie);
  torch::Tensor ids =
      torch::tensor({0, 0, 4, 9, 13, 7, 21, 3, 8, 0, 0, 0, 11, 2, 30, 6, 17, 44}, torch::kLong)
          .view({3, 6});
  torch::Tensor mask =
      torch::tensor({0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1}, torch::kLong)
          .view({3, 6});
  torch::Tensor pos = (mask.cumsum(1) - 1).clamp_min(0) * mask;
  // The packed row: the real tokens in order, each sequence's own positions.
  torch::Tensor flat = mask.reshape({-1}).nonzero().reshape({-1});
  torch::Tensor packed_ids = ids.reshape({-1}).index_select(0, flat).unsqueeze(0);
  torch::Tensor packed_pos = pos.reshape({-1}).index_select(0, flat).unsqueeze(0);
  torch::Tensor cu = torch::tensor({0, 4, 7, 13}, torch::kLong);
  // A different first sequence must not change the others' logits.
  torch::Tensor other_ids = packed_ids.clone();
  other_ids[0][0] = 1;
  other_ids[0][3] = 49;
  for (const auto how :
       {internal::PackedAttention::kPerSequence, internal::PackedAttention::kBatched})
    for (bool checkpointing : {false, true}) {
      internal::SetPackedAttention(how);
      SCOPED_TRACE(checkpointing ? "gradient checkpointing" : "plain");
      SCOPED_TRACE(how == internal::PackedAttention::kBatched ? "batched" : "per sequence");
      CausalLmOptions options;
      options.gradient_checkpointing = checkpointing;
      auto padded = Build(c, options), packed = Build(c, options);  // same weights
      padded->train();
      packed->train();
      torch::Tensor a = padded->Forward(ids, mask, pos).reshape({18, -1}).index_select(0, flat);
      torch::Tensor b = packed->ForwardPacked(packed_ids, packed_pos, cu)[0];
      ASSERT_EQ(b.size(0), 13);
      EXPECT_LT(MaxRelError(b, a), 1e-5);
      const torch::Tensor weights = torch::linspace(-1, 1, a.numel()).view(a.sizes());
      (a * weights).sum().backward();
      (b * weights).sum().backward();
      auto pa = padded->named_parameters(), pb = packed->named_parameters();
      for (size_t i = 0; i < pa.size(); ++i) {
        EXPECT_LT(MaxRelError(pb[i].value().grad(), pa[i].value().grad()), 1e-5) << pa[i].key();
      }
      torch::NoGradGuard no_grad;
      torch::Tensor moved = packed->ForwardPacked(other_ids, packed_pos, cu)[0];
      EXPECT_GT((moved.slice(0, 0, 4) - b.slice(0, 0, 4)).abs().max().item<double>(), 1e-3);
      EXPECT_LT(MaxRelError(moved.slice(0, 4), b.slice(0, 4).detach()), 1e-6);
    }
  internal::SetPackedAttention(internal::PackedAttention::kAuto);
  EXPECT_THROW(
      Build(c)->ForwardPacked(packed_ids, packed_pos, torch::tensor({0, 4, 7}, torch::kLong)),
      c10::Error);
}

INSTANTIATE_TEST_SUITE_P(Families, CausalLmTest,
                         ::testing::Values(std::make_tuple(Arch::kLlama, false),
                                           std::make_tuple(Arch::kQwen2, true),
                                           std::make_tuple(Arch::kQwen3, false),
                                           std::make_tuple(Arch::kQwen3, true)));

TEST(CausalLmCreateTest, RejectsUnsupportedDtypeAndBadSizes) {
  CausalLmOptions half;
  half.dtype = torch::kFloat16;
  auto m = CausalLmImpl::Create(Tiny(Arch::kQwen3, false), half);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), ::testing::HasSubstr("dtype"));
  ModelConfig odd = Tiny(Arch::kLlama, true);
  odd.num_key_value_heads = 3;  // does not divide 4 heads
  EXPECT_FALSE(CausalLmImpl::CreateUninitialized(odd, {}).ok());
}

TEST(CausalLmOptionsFromConfigTest, TakesCpuCudaAndAGroupRanksCudaIndex) {
  auto cpu = ParseCausalLmOptions("float32", "cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_TRUE(cpu->device.is_cpu());
  auto cuda = ParseCausalLmOptions("bfloat16", "cuda");
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_TRUE(cuda->device.is_cuda());
  EXPECT_FALSE(cuda->device.has_index());
  EXPECT_EQ(cuda->dtype, torch::kBFloat16);
  auto second = ParseCausalLmOptions("float32", "cuda:1");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->device, torch::Device(torch::kCUDA, 1));
  for (const char* bad : {"cuda:", "cuda:-1", "cuda:x", "tpu"}) {
    EXPECT_THAT(CausalLmOptionsFromConfig("float32", bad).status().message(),
                ::testing::HasSubstr("rlmesh.device: expected cpu or cuda"))
        << bad;
  }
}

TEST(CausalLmOptionsFromConfigTest, RefusesACudaDeviceThisProcessCannotUseSayingWhy) {
  const auto cuda = CausalLmOptionsFromConfig("float32", "cuda");
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (gpus > 0) {
    EXPECT_TRUE(cuda.ok()) << cuda.status();
  } else {
    // Before any model is built there (LibTorch's own error is a page of dispatcher keys).
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
    // A CPU LibTorch (Debian's, here, says USE_CUDA=OFF) is named as the cause; a CUDA one
    // without a visible GPU sends the user to the driver.
    const bool cpu_build = at::show_config().find("USE_CUDA=OFF") != std::string::npos;
    EXPECT_THAT(cuda.status().message(),
                ::testing::HasSubstr(cpu_build ? "rlmesh.device cuda: this build's LibTorch"
                                               : "rlmesh.device cuda: this process sees no CUDA"));
  }
  const auto past = CausalLmOptionsFromConfig("float32", "cuda:" + std::to_string(gpus));
  EXPECT_EQ(past.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(past.status().message(),
              ::testing::HasSubstr("rlmesh.device cuda:" + std::to_string(gpus) + ": "));
}

TEST(LogProbsTest, HandComputedValues) {
  // logits (0, ln 3): softmax (1/4, 3/4). Temperature 2 halves them: p1 = sqrt3 / (1 + sqrt3).
  torch::Tensor logits = torch::tensor({0.0, std::log(3.0)}, torch::kFloat32).view({1, 1, 2});
  torch::Tensor one = torch::tensor({{1}}, torch::kLong);
  EXPECT_NEAR(LogProbsFromLogits(logits, one, 1.0).item<double>(), std::log(0.75), 1e-6);
  EXPECT_NEAR(LogProbsFromLogits(logits, torch::tensor({{0}}, torch::kLong), 1.0).item<double>(),
              std::log(0.25), 1e-6);
  EXPECT_NEAR(LogProbsFromLogits(logits, one, 2.0).item<double>(),
              std::log(std::sqrt(3.0) / (1 + std::sqrt(3.0))), 1e-6);
  // Entropy: uniform over 4 is ln 4; (1/4, 3/4) is -(1/4 ln 1/4 + 3/4 ln 3/4).
  EXPECT_NEAR(EntropyFromLogits(torch::zeros({1, 1, 4}), 1.0).item<double>(), std::log(4.0), 1e-6);
  EXPECT_NEAR(EntropyFromLogits(logits, 1.0).item<double>(),
              -(0.25 * std::log(0.25) + 0.75 * std::log(0.75)), 1e-6);
}

}  // namespace
}  // namespace rlmesh::model
