#include "common/model/causal_lm.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/model/decoder_layers.h"

namespace rlmesh::model {
namespace {

// RoPE inverse frequencies theta^(-2i/d), with Llama 3's wavelength-dependent scaling.
torch::Tensor InverseFrequencies(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / c.head_dim);
    if (c.rope_scaling.has_value()) {
      const RopeScaling& s = *c.rope_scaling;
      const double old_len = static_cast<double>(s.original_max_position_embeddings);
      const double low_freq_wavelen = old_len / s.low_freq_factor;
      const double high_freq_wavelen = old_len / s.high_freq_factor;
      const double wavelen = 2 * M_PI / f;
      if (wavelen > low_freq_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    inv[i] = static_cast<float>(f);
  }
  return torch::tensor(inv, torch::kFloat32);
}

// Additive mask value: the dtype's lowest finite number, so a row with every key masked
// (a left-padding query) gives a uniform softmax instead of NaN.
double MaskValue(torch::Dtype dtype) {
  return dtype == torch::kBFloat16 ? -3.3895313892515355e38
                                   : static_cast<double>(std::numeric_limits<float>::lowest());
}

}  // namespace

CausalLmImpl::CausalLmImpl(const ModelConfig& config, const CausalLmOptions& options,
                           bool initialize)
    : config_(config), options_(options) {
  const auto topts = torch::TensorOptions().dtype(options.dtype).device(options.device);
  model_ = register_module("model", std::make_shared<internal::BackboneImpl>(config, initialize, topts));
  if (config.head == Head::kSequenceClassification) {
    // A reward model's score head takes the lm_head's place: Forward's "logits" are then
    // [B, T, num_labels] (SequenceScores reads them at the last token).
    lm_head_ = register_module(
        "score", std::make_shared<internal::LinearImpl>(
                     config.hidden_size, config.num_labels, false,
                     initialize ? internal::Init::kNormal : internal::Init::kNone, topts));
  } else if (!config.tie_word_embeddings) {
    lm_head_ = register_module(
        "lm_head", std::make_shared<internal::LinearImpl>(
                       config.hidden_size, config.vocab_size, false,
                       initialize ? internal::Init::kNormal : internal::Init::kNone, topts));
  }
  inv_freq_ = InverseFrequencies(config).to(options.device);
}

namespace {

absl::Status ValidateForBuild(const ModelConfig& config, const CausalLmOptions& options) {
  if (options.dtype != torch::kFloat32 && options.dtype != torch::kBFloat16) {
    return absl::InvalidArgumentError(absl::StrCat("CausalLmOptions.dtype: expected float32 or ",
                                                   "bfloat16, got ", c10::toString(options.dtype)));
  }
  if (config.vocab_size <= 0 || config.hidden_size <= 0 || config.intermediate_size <= 0 ||
      config.num_hidden_layers <= 0 || config.num_attention_heads <= 0 ||
      config.num_key_value_heads <= 0 || config.head_dim <= 0 || config.head_dim % 2 != 0 ||
      config.num_attention_heads % config.num_key_value_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config of ", config.architecture, ": sizes must be positive, head_dim even and ",
        "num_attention_heads a multiple of num_key_value_heads"));
  }
  const bool scorer = config.head == Head::kSequenceClassification;
  if (scorer != options.sequence_classification) {
    return absl::InvalidArgumentError(
        scorer ? absl::StrCat(config.architecture,
                              " is a reward model (a score head, no lm_head): it scores "
                              "sequences and cannot generate or be trained as the policy")
               : absl::StrCat(config.architecture,
                              " has no score head: a reward model is a "
                              "…ForSequenceClassification checkpoint"));
  }
  if (scorer && config.num_labels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config of ", config.architecture, ": num_labels must be >= 1"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<CausalLmImpl>> CausalLmImpl::Create(const ModelConfig& config,
                                                                   const CausalLmOptions& options) {
  if (absl::Status st = ValidateForBuild(config, options); !st.ok()) return st;
  try {
    return std::shared_ptr<CausalLmImpl>(new CausalLmImpl(config, options, /*initialize=*/true));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("building ", config.architecture, " on ",
                                            options.device.str(), ": ", e.what_without_backtrace()));
  }
}

absl::StatusOr<std::shared_ptr<CausalLmImpl>> CausalLmImpl::CreateUninitialized(
    const ModelConfig& config, const CausalLmOptions& options) {
  if (absl::Status st = ValidateForBuild(config, options); !st.ok()) return st;
  try {
    return std::shared_ptr<CausalLmImpl>(new CausalLmImpl(config, options, /*initialize=*/false));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("building ", config.architecture, " on ",
                                            options.device.str(), ": ", e.what_without_backtrace()));
  }
}

std::pair<torch::Tensor, torch::Tensor> CausalLmImpl::Rope(const torch::Tensor& position_ids) const {
  // Angles in float32 as HF does, cast to the model dtype afterwards.
  torch::Tensor freqs = position_ids.to(torch::kFloat32).unsqueeze(-1) * inv_freq_;  // [B,T,hd/2]
  torch::Tensor emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos().to(options_.dtype), emb.sin().to(options_.dtype)};
}

torch::Tensor CausalLmImpl::Logits(const torch::Tensor& hidden) {
  const torch::Tensor& w = lm_head_ ? lm_head_->weight : model_->embed_tokens->weight;
  return internal::Linear(model_->norm->Forward(hidden), w, torch::Tensor()).to(torch::kFloat32);
}

torch::Tensor CausalLmImpl::Forward(const torch::Tensor& input_ids_in,
                                    const torch::Tensor& attention_mask_in,
                                    const torch::Tensor& position_ids_in) {
  TORCH_CHECK(input_ids_in.dim() == 2, "Forward: input_ids must be [B, T], got ",
              input_ids_in.sizes());
  TORCH_CHECK(attention_mask_in.sizes() == input_ids_in.sizes() &&
                  position_ids_in.sizes() == input_ids_in.sizes(),
              "Forward: attention_mask ", attention_mask_in.sizes(), " and position_ids ",
              position_ids_in.sizes(), " must match input_ids ", input_ids_in.sizes());
  const torch::Device dev = options_.device;
  torch::Tensor valid = attention_mask_in.to(dev).to(torch::kBool);
  const int64_t b = input_ids_in.size(0), t = input_ids_in.size(1);
  // Query i sees key j when j <= i and key j is a real token.
  torch::Tensor causal =
      torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(dev)).tril();
  torch::Tensor allowed = causal.unsqueeze(0) & valid.unsqueeze(1);  // [B, T, T]
  torch::Tensor mask =
      torch::zeros({b, 1, 1, t, t}, torch::TensorOptions().dtype(options_.dtype).device(dev))
          .masked_fill_(allowed.logical_not().view({b, 1, 1, t, t}), MaskValue(options_.dtype));
  return Run(input_ids_in, position_ids_in, mask);
}

torch::Tensor CausalLmImpl::ForwardPacked(const torch::Tensor& input_ids,
                                          const torch::Tensor& position_ids,
                                          const torch::Tensor& cu_seqlens) {
  TORCH_CHECK(input_ids.dim() == 2 && input_ids.size(0) == 1,
              "ForwardPacked: input_ids must be one packed row [1, N], got ", input_ids.sizes());
  TORCH_CHECK(position_ids.sizes() == input_ids.sizes(), "ForwardPacked: position_ids ",
              position_ids.sizes(), " must match input_ids ", input_ids.sizes());
  TORCH_CHECK(
      cu_seqlens.dim() == 1 && cu_seqlens.numel() >= 2 && cu_seqlens.scalar_type() == torch::kInt64,
      "ForwardPacked: cu_seqlens must be int64 [S + 1], got ", cu_seqlens.sizes());
  const torch::Tensor cu = cu_seqlens.to(torch::kCPU).contiguous();
  const auto* c = cu.data_ptr<int64_t>();
  TORCH_CHECK(c[0] == 0 && c[cu.numel() - 1] == input_ids.size(1),
              "ForwardPacked: cu_seqlens must run from 0 to the ", input_ids.size(1),
              " packed tokens, got ", c[0], " .. ", c[cu.numel() - 1]);
  for (int64_t s = 0; s + 1 < cu.numel(); ++s) {
    TORCH_CHECK(c[s] <= c[s + 1], "ForwardPacked: cu_seqlens must not decrease, got ", c[s],
                " then ", c[s + 1]);
  }
  return Run(input_ids, position_ids, cu);
}

torch::Tensor CausalLmImpl::Run(const torch::Tensor& input_ids_in,
                                const torch::Tensor& position_ids_in, const torch::Tensor& mask) {
  const torch::Device dev = options_.device;
  torch::Tensor input_ids = input_ids_in.to(dev, torch::kLong);
  if (sharding_ != nullptr) sharding_->Gather(0);
  torch::Tensor x = torch::embedding(model_->embed_tokens->weight, input_ids);
  auto [cos, sin] = Rope(position_ids_in.to(dev, torch::kLong));
  const bool checkpoint = options_.gradient_checkpointing && is_training() &&
                          torch::GradMode::is_enabled();
  if (sharding_ != nullptr) {
    for (size_t i = 0; i < model_->layers.size(); ++i) {
      x = internal::ShardedLayerForward(*model_->layers[i], static_cast<int>(i) + 1, *sharding_, x,
                                        cos, sin, mask, options_.gradient_checkpointing);
    }
    torch::Tensor logits = Logits(x);
    // With a graph the root's parameters stay gathered for the backward pass.
    if (!torch::GradMode::is_enabled()) sharding_->Release(0);
    return logits;
  }
  for (auto& layer : model_->layers) {
    x = checkpoint ? internal::CheckpointedLayerForward(*layer, x, cos, sin, mask)
                   : layer->Forward(x, cos, sin, mask);
  }
  return Logits(x);
}

std::vector<torch::Tensor> CausalLmImpl::UnitParameters(int unit) const {
  TORCH_CHECK(unit >= 0 && unit < NumUnits(), "UnitParameters: no unit ", unit);
  if (unit > 0) return model_->layers[static_cast<size_t>(unit - 1)]->parameters();
  std::vector<torch::Tensor> root = {model_->embed_tokens->weight, model_->norm->weight};
  if (lm_head_) root.push_back(lm_head_->weight);
  return root;
}

KvCache CausalLmImpl::NewCache(int64_t max_seqs, int64_t max_len) const {
  KvCache cache;
  cache.max_len = max_len;
  cache.lengths.assign(max_seqs, 0);
  const auto topts = torch::TensorOptions().dtype(options_.dtype).device(options_.device);
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    cache.keys.push_back(
        torch::zeros({max_seqs, config_.num_key_value_heads, max_len, config_.head_dim}, topts));
    cache.values.push_back(torch::zeros_like(cache.keys.back()));
  }
  return cache;
}

torch::Tensor CausalLmImpl::ForwardCached(const torch::Tensor& input_ids,
                                          const std::vector<int64_t>& slots,
                                          const std::vector<int64_t>& num_new, KvCache* cache) {
  return RunCached(input_ids, slots, num_new, cache, /*last_only=*/false);
}

torch::Tensor CausalLmImpl::ForwardCachedLast(const torch::Tensor& input_ids,
                                              const std::vector<int64_t>& slots,
                                              const std::vector<int64_t>& num_new,
                                              KvCache* cache) {
  return RunCached(input_ids, slots, num_new, cache, /*last_only=*/true);
}

torch::Tensor CausalLmImpl::RunCached(const torch::Tensor& input_ids_in,
                                      const std::vector<int64_t>& slots,
                                      const std::vector<int64_t>& num_new, KvCache* cache,
                                      bool last_only) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(input_ids_in.dim() == 2, "ForwardCached: input_ids must be [B, T], got ",
              input_ids_in.sizes());
  const int64_t b = input_ids_in.size(0), t = input_ids_in.size(1);
  TORCH_CHECK(static_cast<int64_t>(slots.size()) == b && static_cast<int64_t>(num_new.size()) == b,
              "ForwardCached: ", slots.size(), " slots and ", num_new.size(),
              " num_new for a batch of ", b);
  const torch::Device dev = options_.device;
  const int64_t max_seqs = static_cast<int64_t>(cache->lengths.size());

  // Host-side bookkeeping: positions, write targets and the key span to attend over.
  std::vector<int64_t> lens(b), write_rows, write_slots, write_pos;
  int64_t span = 1;
  bool contiguous_slots = true;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t s = slots[i];
    TORCH_CHECK(s >= 0 && s < max_seqs, "ForwardCached: slot ", s, " outside [0, ", max_seqs, ")");
    TORCH_CHECK(num_new[i] >= 0 && num_new[i] <= t, "ForwardCached: num_new[", i, "] = ",
                num_new[i], " outside [0, ", t, "]");
    lens[i] = cache->lengths[s];
    TORCH_CHECK(lens[i] + num_new[i] <= cache->max_len, "ForwardCached: slot ", s, " holds ",
                lens[i], " tokens; ", num_new[i], " more exceed max_len ", cache->max_len);
    span = std::max(span, lens[i] + num_new[i]);
    if (i > 0 && s != slots[i - 1] + 1) contiguous_slots = false;
    for (int64_t j = 0; j < num_new[i]; ++j) {
      write_rows.push_back(i * t + j);
      write_slots.push_back(s);
      write_pos.push_back(lens[i] + j);
    }
  }
  if (UseCpuKernels(*cache))
    return RunCachedCpu(input_ids_in, slots, num_new, lens, cache, last_only);
  auto to_dev = [&](const std::vector<int64_t>& v) {
    return torch::tensor(v, torch::kLong).to(dev);
  };
  torch::Tensor lens_t = to_dev(lens).unsqueeze(1);                 // [B, 1]
  torch::Tensor ends_t = lens_t + to_dev(num_new).unsqueeze(1);     // [B, 1]
  torch::Tensor steps = torch::arange(t, torch::TensorOptions().dtype(torch::kLong).device(dev));
  torch::Tensor positions = lens_t + steps.unsqueeze(0);            // [B, T]
  torch::Tensor keys = torch::arange(span, torch::TensorOptions().dtype(torch::kLong).device(dev));
  // Query (b, i) sees cached or new key j when j <= its position and j is a written token.
  torch::Tensor allowed = (keys.view({1, 1, span}) <= positions.unsqueeze(2)) &
                          (keys.view({1, 1, span}) < ends_t.unsqueeze(2));  // [B, T, S]
  // Padding queries of a row with nothing cached could see no key: let them see key 0.
  allowed = allowed | (allowed.any(-1, /*keepdim=*/true).logical_not() & (keys.view({1, 1, span}) == 0));
  const auto topts = torch::TensorOptions().dtype(options_.dtype).device(dev);
  torch::Tensor mask = torch::zeros({b, 1, 1, t, span}, topts)
                           .masked_fill_(allowed.logical_not().view({b, 1, 1, t, span}),
                                         MaskValue(options_.dtype));
  torch::Tensor rows_t = to_dev(write_rows), slots_w = to_dev(write_slots), pos_w = to_dev(write_pos);
  torch::Tensor slot_sel = contiguous_slots ? torch::Tensor() : to_dev(slots);

  torch::Tensor x = torch::embedding(model_->embed_tokens->weight, input_ids_in.to(dev, torch::kLong));
  auto [cos, sin] = Rope(positions);
  const int64_t kv = config_.num_key_value_heads, hd = config_.head_dim;
  using torch::indexing::Slice;
  for (size_t l = 0; l < model_->layers.size(); ++l) {
    internal::DecoderLayerImpl& layer = *model_->layers[l];
    auto [q, k, v] = layer.self_attn->Project(layer.input_layernorm->Forward(x), cos, sin);
    torch::Tensor& ck = cache->keys[l];
    torch::Tensor& cv = cache->values[l];
    if (!write_rows.empty()) {
      // [B, KV, T, hd] -> the real tokens' rows [N, KV, hd], stored at (slot, :, position).
      ck.index_put_({slots_w, Slice(), pos_w},
                    k.transpose(1, 2).reshape({b * t, kv, hd}).index_select(0, rows_t));
      cv.index_put_({slots_w, Slice(), pos_w},
                    v.transpose(1, 2).reshape({b * t, kv, hd}).index_select(0, rows_t));
    }
    torch::Tensor kk = ck.narrow(2, 0, span), vv = cv.narrow(2, 0, span);
    if (contiguous_slots) {
      kk = kk.narrow(0, slots[0], b);
      vv = vv.narrow(0, slots[0], b);
    } else {
      kk = kk.index_select(0, slot_sel);
      vv = vv.index_select(0, slot_sel);
    }
    torch::Tensor h = x + layer.self_attn->Attend(q, kk, vv, mask);
    x = h + layer.mlp->Forward(layer.post_attention_layernorm->Forward(h));
  }
  for (int64_t i = 0; i < b; ++i) cache->lengths[slots[i]] += num_new[i];
  if (!last_only) return Logits(x);
  std::vector<int64_t> last(b);
  for (int64_t i = 0; i < b; ++i) last[i] = i * t + std::max<int64_t>(num_new[i] - 1, 0);
  return Logits(x.reshape({b * t, x.size(2)}).index_select(0, to_dev(last)));
}

torch::Tensor SequenceScores(const torch::Tensor& logits, const torch::Tensor& input_ids,
                             const torch::Tensor& attention_mask,
                             std::optional<int64_t> pad_token_id) {
  TORCH_CHECK(logits.dim() == 3 && input_ids.dim() == 2 && attention_mask.sizes() == input_ids.sizes() &&
                  logits.size(0) == input_ids.size(0) && logits.size(1) == input_ids.size(1),
              "SequenceScores: logits [B, T, L] and input_ids, attention_mask [B, T] expected");
  const int64_t t = input_ids.size(1);
  torch::Tensor keep = attention_mask.to(torch::kBool);
  if (pad_token_id.has_value()) keep = keep & input_ids.ne(*pad_token_id);
  // The last kept position: argmax of position x kept (0 when nothing is kept).
  const torch::Tensor positions = torch::arange(t, input_ids.options().dtype(torch::kLong));
  const torch::Tensor last = (positions.unsqueeze(0) * keep.to(torch::kLong)).argmax(-1);
  const torch::Tensor rows = torch::arange(input_ids.size(0), last.options());
  return logits.index({rows, last});
}

torch::Tensor LogProbsFromLogits(const torch::Tensor& logits, const torch::Tensor& targets,
                                 double temperature) {
  torch::Tensor scaled = logits.to(torch::kFloat32) / temperature;
  // log p(y) = z_y - logsumexp(z), without materialising the [B, T, V] log-softmax.
  torch::Tensor picked = scaled.gather(-1, targets.to(scaled.device(), torch::kLong).unsqueeze(-1)).squeeze(-1);
  return picked - torch::logsumexp(scaled, -1);
}

torch::Tensor EntropyFromLogits(const torch::Tensor& logits, double temperature) {
  torch::Tensor scaled = logits.to(torch::kFloat32) / temperature;
  torch::Tensor logp = torch::log_softmax(scaled, -1);
  return -(logp.exp() * logp).sum(-1);
}

}  // namespace rlmesh::model
