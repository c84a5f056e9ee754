// CausalLmImpl's KV-cached forward on the float32 CPU kernels of cpu_kernels.h: the same
// arithmetic as the ATen path of RunCached (causal_lm.cc), in nine kernel calls per layer
// over [rows * t, width] buffers allocated once per call, with no attention mask and no
// gather of cache rows.
#include <algorithm>

#include "common/model/causal_lm.h"
#include "common/model/cpu_kernels.h"
#include "common/model/decoder_layers.h"

namespace rlmesh::model {

bool CausalLmImpl::UseCpuKernels(const KvCache& cache) const {
  if (!options_.device.is_cpu() || options_.dtype != torch::kFloat32 ||
      !internal::CpuKernelsAvailable() || !inv_freq_.is_contiguous()) {
    return false;
  }
  for (size_t l = 0; l < model_->layers.size(); ++l) {
    const internal::DecoderLayerImpl& layer = *model_->layers[l];
    if (!layer.self_attn->FusedIntact() || !layer.mlp->FusedIntact() ||
        !cache.keys[l].is_contiguous() || !cache.values[l].is_contiguous() ||
        cache.keys[l].scalar_type() != torch::kFloat32 ||
        cache.values[l].scalar_type() != torch::kFloat32) {
      return false;
    }
  }
  return true;
}

torch::Tensor CausalLmImpl::RunCachedCpu(const torch::Tensor& input_ids,
                                         const std::vector<int64_t>& slots,
                                         const std::vector<int64_t>& num_new,
                                         const std::vector<int64_t>& lens, KvCache* cache,
                                         bool last_only) {
  using internal::LinearF32;
  using internal::RmsNormF32;
  const int64_t b = input_ids.size(0), t = input_ids.size(1), m = b * t;
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size, inter = c.intermediate_size;
  const int64_t attn_width = c.num_attention_heads * c.head_dim;
  const int64_t qkv_width = attn_width + 2 * c.num_key_value_heads * c.head_dim;
  const internal::CachedRows rows{b, t, slots.data(), lens.data(), num_new.data()};
  const internal::AttentionShape shape{c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                                       cache->max_len};
  auto f32 = [](const torch::Tensor& tensor) {
    return tensor.defined() ? tensor.data_ptr<float>() : nullptr;
  };
  const auto topts = torch::TensorOptions().dtype(torch::kFloat32);

  // x is the residual stream [m, d]; the others are per-layer scratch.
  torch::Tensor x = torch::embedding(model_->embed_tokens->weight, input_ids.to(torch::kLong))
                        .reshape({m, d})
                        .contiguous();
  torch::Tensor h = torch::empty({m, d}, topts), qkv = torch::empty({m, qkv_width}, topts);
  torch::Tensor q = torch::empty({m, attn_width}, topts),
                att = torch::empty({m, attn_width}, topts);
  torch::Tensor gate_up = torch::empty({m, 2 * inter}, topts),
                act = torch::empty({m, inter}, topts);
  const int64_t half = c.head_dim / 2;
  torch::Tensor cos = torch::empty({m, half}, topts), sin = torch::empty({m, half}, topts);
  internal::RopeTableF32(rows, inv_freq_.data_ptr<float>(), half, cos.data_ptr<float>(),
                         sin.data_ptr<float>());
  // Each row's last token: the only one whose logits ForwardCachedLast returns.
  std::vector<int64_t> last(b), last_lens(b), last_new(b);
  for (int64_t i = 0; i < b; ++i) {
    last[i] = i * t + std::max<int64_t>(num_new[i] - 1, 0);
    last_lens[i] = lens[i] + std::max<int64_t>(num_new[i] - 1, 0);
    last_new[i] = std::min<int64_t>(num_new[i], 1);
  }
  // With last_only and several tokens per row (a prefill), the last layer's attention, o_proj
  // and MLP run for the last tokens alone: the other tokens' outputs of that layer feed nothing
  // but their own logits, which are not computed (their keys and values, written to the cache
  // by the q/k/v projection, are all later steps need). This spares ~1/layers of a prefill.
  const bool prune_last_layer = last_only && t > 1;
  float* hp = h.data_ptr<float>();
  // Attention over the cache, o_proj and the MLP, for `n` tokens laid out as `r`, adding to
  // the residual stream x_io [n, d].
  auto attend_and_mlp = [&](size_t l, const internal::CachedRows& r, int64_t n, const float* q_in,
                            float* x_io) {
    const internal::DecoderLayerImpl& layer = *model_->layers[l];
    const internal::AttentionImpl& attn = *layer.self_attn;
    internal::CachedAttentionF32(q_in, r, shape, cache->keys[l].data_ptr<float>(),
                                 cache->values[l].data_ptr<float>(), att.data_ptr<float>());
    LinearF32(att.data_ptr<float>(), attn_width, n, attn_width, f32(attn.o_proj->weight), d,
              f32(attn.o_proj->bias), x_io, d, /*accumulate=*/true);
    RmsNormF32(x_io, n, d, f32(layer.post_attention_layernorm->weight),
               layer.post_attention_layernorm->eps, hp);
    LinearF32(hp, d, n, d, f32(layer.mlp->gate_up_weight), 2 * inter, nullptr,
              gate_up.data_ptr<float>(), 2 * inter, /*accumulate=*/false);
    internal::SiluMulF32(gate_up.data_ptr<float>(), n, inter, act.data_ptr<float>());
    LinearF32(act.data_ptr<float>(), inter, n, inter, f32(layer.mlp->down_proj->weight), d,
              nullptr, x_io, d, /*accumulate=*/true);
  };
  float* xp = x.data_ptr<float>();
  torch::Tensor final_rows = x;
  for (size_t l = 0; l < model_->layers.size(); ++l) {
    const internal::DecoderLayerImpl& layer = *model_->layers[l];
    const internal::AttentionImpl& attn = *layer.self_attn;
    RmsNormF32(xp, m, d, f32(layer.input_layernorm->weight), layer.input_layernorm->eps, hp);
    LinearF32(hp, d, m, d, f32(attn.qkv_weight), qkv_width, f32(attn.qkv_bias),
              qkv.data_ptr<float>(), qkv_width, /*accumulate=*/false);
    internal::PrepareQkvF32(qkv.data_ptr<float>(), rows, shape,
                            attn.q_norm ? f32(attn.q_norm->weight) : nullptr,
                            attn.k_norm ? f32(attn.k_norm->weight) : nullptr, c.rms_norm_eps,
                            cos.data_ptr<float>(), sin.data_ptr<float>(), q.data_ptr<float>(),
                            cache->keys[l].data_ptr<float>(), cache->values[l].data_ptr<float>());
    if (prune_last_layer && l + 1 == model_->layers.size()) {
      const torch::Tensor last_t = torch::tensor(last, torch::kLong);
      const torch::Tensor q_last = q.index_select(0, last_t);
      final_rows = x.index_select(0, last_t);
      const internal::CachedRows last_rows{b, 1, slots.data(), last_lens.data(),
                                           last_new.data()};
      attend_and_mlp(l, last_rows, b, q_last.data_ptr<float>(), final_rows.data_ptr<float>());
    } else {
      attend_and_mlp(l, rows, m, q.data_ptr<float>(), xp);
    }
  }
  for (int64_t i = 0; i < b; ++i) cache->lengths[slots[i]] += num_new[i];

  // Final norm and vocabulary projection of every position, or of each row's last one.
  if (last_only && !prune_last_layer) {
    final_rows = x.index_select(0, torch::tensor(last, torch::kLong));
  }
  const int64_t n = final_rows.size(0);
  torch::Tensor normed = torch::empty({n, d}, topts);
  RmsNormF32(final_rows.data_ptr<float>(), n, d, f32(model_->norm->weight), model_->norm->eps,
             normed.data_ptr<float>());
  const torch::Tensor& head = lm_head_ ? lm_head_->weight : model_->embed_tokens->weight;
  torch::Tensor logits = torch::empty({n, c.vocab_size}, topts);
  LinearF32(normed.data_ptr<float>(), d, n, d, head.contiguous().data_ptr<float>(), c.vocab_size,
            nullptr, logits.data_ptr<float>(), c.vocab_size, /*accumulate=*/false);
  return last_only ? logits : logits.view({b, t, c.vocab_size});
}

}  // namespace rlmesh::model
