// Test helper: a tiny Qwen3-shaped decoder with seeded random weights, and an independent
// greedy reference that re-runs the full (uncached) forward for every new token.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/model/causal_lm.h"

namespace rlmesh::generation::testing {

inline model::ModelConfig TinyQwen3Config() {
  model::ModelConfig c;
  c.arch = model::Arch::kQwen3;
  c.architecture = "Qwen3ForCausalLM";
  c.model_type = "qwen3";
  c.vocab_size = 96;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 128;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.qk_norm = true;
  c.eos_token_ids = {1};
  return c;
}

// Weights drawn with std 0.25 (not the usual 0.02) so the next-token distributions are peaked
// and greedy choices are far from ties.
inline std::shared_ptr<model::CausalLmImpl> TinyModel(uint64_t seed = 1,
                                                      int64_t max_positions = 128) {
  torch::manual_seed(seed);
  model::ModelConfig config = TinyQwen3Config();
  config.max_position_embeddings = max_positions;
  auto created = model::CausalLmImpl::Create(config, {});
  std::shared_ptr<model::CausalLmImpl> m = created.value();
  torch::NoGradGuard no_grad;
  for (auto& p : m->parameters()) {
    if (p.dim() == 2) p.normal_(0.0, 0.25);
  }
  m->eval();
  return m;
}

// Full forward of one unpadded sequence: float32 logits [T, V].
inline torch::Tensor FullLogits(model::CausalLmImpl& m, const std::vector<int64_t>& ids) {
  torch::NoGradGuard no_grad;
  const int64_t t = static_cast<int64_t>(ids.size());
  torch::Tensor input = torch::tensor(ids, torch::kInt64).view({1, t});
  torch::Tensor mask = torch::ones({1, t}, torch::kInt64);
  torch::Tensor pos = torch::arange(t, torch::kInt64).view({1, t});
  return m.Forward(input, mask, pos)[0];
}

// Greedy continuation by argmax over a full forward per token (no KV cache).
inline std::vector<int64_t> ReferenceGreedy(model::CausalLmImpl& m, std::vector<int64_t> ids,
                                            int64_t new_tokens) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < new_tokens; ++i) {
    const int64_t next = FullLogits(m, ids)[-1].argmax().item<int64_t>();
    out.push_back(next);
    ids.push_back(next);
  }
  return out;
}

}  // namespace rlmesh::generation::testing
