#include "common/model/decoder_layers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/model/causal_lm.h"

namespace rlmesh::model::internal {

torch::Tensor MakeParameter(const std::vector<int64_t>& shape, Init init,
                            const torch::TensorOptions& options) {
  switch (init) {
    case Init::kNone:
      return torch::empty(shape, options);
    case Init::kOnes:
      return torch::ones(shape, options);
    case Init::kZeros:
      return torch::zeros(shape, options);
    case Init::kNormal:
      return torch::empty(shape, torch::kFloat32).normal_(0.0, 0.02).to(options);
  }
  return torch::Tensor();
}

torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias) {
  if (x.device().is_cpu() && x.numel() == x.size(-1)) {
    torch::Tensor y = at::mv(weight, x.reshape({-1}));
    if (bias.defined()) y = y + bias;
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = weight.size(0);
    return y.view(shape);
  }
  return bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
}

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias, Init init,
                       const torch::TensorOptions& options) {
  weight = register_parameter("weight", MakeParameter({out, in}, init, options));
  if (with_bias) {
    bias = register_parameter(
        "bias", MakeParameter({out}, init == Init::kNone ? Init::kNone : Init::kZeros, options));
  }
}

LinearImpl::LinearImpl(const torch::Tensor& w, const torch::Tensor& b) {
  weight = register_parameter("weight", w);
  if (b.defined()) bias = register_parameter("bias", b);
}

torch::Tensor FusedRows(const torch::Tensor& fused, int64_t begin, int64_t end) {
  return fused.narrow(0, begin, end - begin).detach();
}

namespace {

// Whether `part` still is rows [begin, ...) of `fused`.
bool IsRowsOf(const torch::Tensor& part, const torch::Tensor& fused, int64_t begin) {
  const char* row = static_cast<const char*>(fused.data_ptr()) +
                    begin * fused.stride(0) * static_cast<int64_t>(fused.element_size());
  return part.is_contiguous() && part.data_ptr() == row;
}

}  // namespace

EmbeddingImpl::EmbeddingImpl(int64_t vocab, int64_t dim, Init init,
                             const torch::TensorOptions& options) {
  weight = register_parameter("weight", MakeParameter({vocab, dim}, init, options));
}

RmsNormImpl::RmsNormImpl(int64_t dim, double eps_in, bool initialize,
                         const torch::TensorOptions& options)
    : eps(eps_in) {
  weight = register_parameter("weight",
                              MakeParameter({dim}, initialize ? Init::kOnes : Init::kNone, options));
}

torch::Tensor RmsNormImpl::Forward(const torch::Tensor& x) const {
  torch::Tensor xf = x.to(torch::kFloat32);
  torch::Tensor normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

namespace {

// HF "rotate_half": (x1, x2) -> (-x2, x1) over the two halves of the last dimension.
torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos,
                        const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  torch::Tensor x1 = x.narrow(-1, 0, half);
  torch::Tensor x2 = x.narrow(-1, half, half);
  return x * cos + torch::cat({-x2, x1}, -1) * sin;
}

}  // namespace

AttentionImpl::AttentionImpl(const ModelConfig& c, Init init, const torch::TensorOptions& options)
    : num_heads(c.num_attention_heads), num_kv_heads(c.num_key_value_heads), head_dim(c.head_dim) {
  const int64_t q_dim = num_heads * head_dim, kv_dim = num_kv_heads * head_dim;
  // Drawn part by part (the random sequence of separate q/k/v parameters), then fused.
  const Init bias_init = init == Init::kNone ? Init::kNone : Init::kZeros;
  qkv_weight = torch::cat({MakeParameter({q_dim, c.hidden_size}, init, options),
                           MakeParameter({kv_dim, c.hidden_size}, init, options),
                           MakeParameter({kv_dim, c.hidden_size}, init, options)});
  if (c.attention_bias) qkv_bias = MakeParameter({q_dim + 2 * kv_dim}, bias_init, options);
  auto part = [&](const char* name, int64_t begin, int64_t end) {
    return register_module(
        name, std::make_shared<LinearImpl>(
                  FusedRows(qkv_weight, begin, end),
                  qkv_bias.defined() ? FusedRows(qkv_bias, begin, end) : torch::Tensor()));
  };
  q_proj = part("q_proj", 0, q_dim);
  k_proj = part("k_proj", q_dim, q_dim + kv_dim);
  v_proj = part("v_proj", q_dim + kv_dim, q_dim + 2 * kv_dim);
  // Qwen2 has q/k/v biases but none on o_proj; Llama and Qwen3 follow attention_bias.
  const bool o_bias = c.attention_bias && c.arch != Arch::kQwen2;
  o_proj = register_module("o_proj",
                           std::make_shared<LinearImpl>(q_dim, c.hidden_size, o_bias, init, options));
  if (c.qk_norm) {
    const bool ones = init != Init::kNone;
    q_norm = register_module(
        "q_norm", std::make_shared<RmsNormImpl>(head_dim, c.rms_norm_eps, ones, options));
    k_norm = register_module(
        "k_norm", std::make_shared<RmsNormImpl>(head_dim, c.rms_norm_eps, ones, options));
  }
}

bool AttentionImpl::FusedIntact() const {
  const int64_t q_dim = num_heads * head_dim, kv_dim = num_kv_heads * head_dim;
  bool ok = IsRowsOf(q_proj->weight, qkv_weight, 0) &&
            IsRowsOf(k_proj->weight, qkv_weight, q_dim) &&
            IsRowsOf(v_proj->weight, qkv_weight, q_dim + kv_dim);
  if (qkv_bias.defined()) {
    ok = ok && IsRowsOf(q_proj->bias, qkv_bias, 0) && IsRowsOf(k_proj->bias, qkv_bias, q_dim) &&
         IsRowsOf(v_proj->bias, qkv_bias, q_dim + kv_dim);
  }
  return ok;
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> AttentionImpl::Project(
    const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) const {
  const int64_t b = x.size(0), t = x.size(1);
  torch::Tensor q = q_proj->Forward(x).view({b, t, num_heads, head_dim});
  torch::Tensor k = k_proj->Forward(x).view({b, t, num_kv_heads, head_dim});
  torch::Tensor v = v_proj->Forward(x).view({b, t, num_kv_heads, head_dim});
  if (q_norm) {
    q = q_norm->Forward(q);
    k = k_norm->Forward(k);
  }
  torch::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);  // [B, 1, T, hd]
  q = ApplyRope(q.transpose(1, 2), c, s);
  k = ApplyRope(k.transpose(1, 2), c, s);
  return {q, k, v.transpose(1, 2)};
}

torch::Tensor AttentionImpl::Context(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& mask) const {
  const int64_t b = q.size(0), t = q.size(2), l = k.size(2);
  const int64_t groups = num_heads / num_kv_heads;
  // Fold each key/value head's query heads into the row dimension so k and v are used
  // without being repeated: [B, KV, G*T, hd] x [B, KV, hd, L].
  torch::Tensor qg = q.reshape({b, num_kv_heads, groups * t, head_dim});
  torch::Tensor scores = torch::matmul(qg, k.transpose(-1, -2))
                             .mul_(1.0 / std::sqrt(static_cast<double>(head_dim)))
                             .view({b, num_kv_heads, groups, t, l});
  if (mask.defined()) {
    scores.add_(mask);
  } else {  // causal over keys that are all real (t == l)
    const auto future =
        torch::ones({t, l}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
    scores.masked_fill_(future, -std::numeric_limits<double>::infinity());
  }
  torch::Tensor probs = torch::softmax(scores, -1, torch::kFloat32).to(q.scalar_type());
  // [B, KV, G*T, hd] = [B, H, T, hd]
  return torch::matmul(probs.view({b, num_kv_heads, groups * t, l}), v)
      .view({b, num_heads, t, head_dim});
}

torch::Tensor AttentionImpl::Attend(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, const torch::Tensor& mask) const {
  const int64_t b = q.size(0), t = q.size(2);
  torch::Tensor out;
  if (mask.scalar_type() == torch::kInt64) {
    TORCH_CHECK(b == 1 && mask.dim() == 1 && mask.device().is_cpu(),
                "Attend: a packed batch is one row with CPU int64 cu_seqlens [S + 1], got ", b,
                " rows and cu_seqlens ", mask.sizes());
    out = AttendPacked(q, k, v, mask);
  } else {
    out = Context(q, k, v, mask);
  }
  // [B, H, T, hd] -> [B, T, H*hd]
  out = out.transpose(1, 2).reshape({b, t, num_heads * head_dim});
  return o_proj->Forward(out);
}

namespace {
PackedAttention packed_attention = PackedAttention::kAuto;
}  // namespace

void SetPackedAttention(PackedAttention how) { packed_attention = how; }

torch::Tensor AttentionImpl::AttendPacked(const torch::Tensor& q, const torch::Tensor& k,
                                          const torch::Tensor& v,
                                          const torch::Tensor& cu_seqlens) const {
  const int64_t t = q.size(2);
  const auto* cu = cu_seqlens.data_ptr<int64_t>();
  const int64_t segments = cu_seqlens.numel() - 1;
  TORCH_CHECK(cu[segments] == t, "Attend: cu_seqlens end at ", cu[segments], " for ", t,
              " packed tokens");
  int64_t longest = 0, sequences = 0;
  for (int64_t s = 0; s < segments; ++s) {
    longest = std::max(longest, cu[s + 1] - cu[s]);
    sequences += cu[s + 1] > cu[s] ? 1 : 0;
  }
  const bool loop = packed_attention == PackedAttention::kPerSequence ||
                    (packed_attention == PackedAttention::kAuto &&
                     (sequences == 1 || longest >= kPerSequenceFromLength));
  if (loop) {
    // Sequence by sequence: no query sees another sequence, and no padding is computed.
    std::vector<torch::Tensor> parts;
    for (int64_t s = 0; s < segments; ++s) {
      const int64_t start = cu[s], len = cu[s + 1] - cu[s];
      if (len == 0) continue;
      parts.push_back(Context(q.narrow(2, start, len), k.narrow(2, start, len),
                              v.narrow(2, start, len), torch::Tensor()));
    }
    return torch::cat(parts, 2);
  }
  // Many short sequences: one batched attention over the sequences laid out as rows of the
  // longest one's length (what the projections and MLPs run on stays packed), then back.
  std::vector<int64_t> gather(static_cast<size_t>(sequences * longest), 0), keep;
  std::vector<int64_t> lengths;
  keep.reserve(static_cast<size_t>(t));
  int64_t row = 0;
  for (int64_t s = 0; s < segments; ++s) {
    const int64_t len = cu[s + 1] - cu[s];
    if (len == 0) continue;
    for (int64_t j = 0; j < len; ++j) {
      gather[static_cast<size_t>(row * longest + j)] = cu[s] + j;
      keep.push_back(row * longest + j);
    }
    lengths.push_back(len);
    ++row;
  }
  const auto device = q.device();
  const auto to_rows = torch::tensor(gather, torch::kInt64).to(device);
  const auto from_rows = torch::tensor(keep, torch::kInt64).to(device);
  auto rows = [&](const torch::Tensor& x) {  // [1, h, N, hd] -> [S, h, L, hd]
    return x.index_select(2, to_rows)
        .view({x.size(1), sequences, longest, head_dim})
        .transpose(0, 1);
  };
  // Key j of row s is real when j < its length; with causality that is all a real query needs.
  const auto key_real = torch::arange(longest, torch::kInt64).unsqueeze(0) <
                        torch::tensor(lengths, torch::kInt64).unsqueeze(1);  // [S, L]
  const auto allowed =
      torch::ones({longest, longest}, torch::kBool).tril().unsqueeze(0) & key_real.unsqueeze(1);
  const auto mask =
      torch::zeros({sequences, 1, 1, longest, longest}, q.options())
          .masked_fill_(allowed.logical_not().view({sequences, 1, 1, longest, longest}).to(device),
                        -std::numeric_limits<double>::infinity());
  const torch::Tensor context = Context(rows(q), rows(k), rows(v), mask);  // [S, H, L, hd]
  return context.transpose(0, 1)
      .reshape({1, num_heads, sequences * longest, head_dim})
      .index_select(2, from_rows);
}

MlpImpl::MlpImpl(const ModelConfig& c, Init init, const torch::TensorOptions& options) {
  const int64_t inter = c.intermediate_size;
  gate_up_weight = torch::cat({MakeParameter({inter, c.hidden_size}, init, options),
                               MakeParameter({inter, c.hidden_size}, init, options)});
  gate_proj = register_module(
      "gate_proj",
      std::make_shared<LinearImpl>(FusedRows(gate_up_weight, 0, inter), torch::Tensor()));
  up_proj = register_module(
      "up_proj",
      std::make_shared<LinearImpl>(FusedRows(gate_up_weight, inter, 2 * inter), torch::Tensor()));
  down_proj = register_module(
      "down_proj", std::make_shared<LinearImpl>(c.intermediate_size, c.hidden_size, false, init, options));
}

bool MlpImpl::FusedIntact() const {
  return IsRowsOf(gate_proj->weight, gate_up_weight, 0) &&
         IsRowsOf(up_proj->weight, gate_up_weight, gate_proj->weight.size(0));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, Init init,
                                   const torch::TensorOptions& options) {
  const bool ones = init != Init::kNone;
  input_layernorm = register_module(
      "input_layernorm", std::make_shared<RmsNormImpl>(c.hidden_size, c.rms_norm_eps, ones, options));
  self_attn = register_module("self_attn", std::make_shared<AttentionImpl>(c, init, options));
  post_attention_layernorm = register_module(
      "post_attention_layernorm",
      std::make_shared<RmsNormImpl>(c.hidden_size, c.rms_norm_eps, ones, options));
  mlp = register_module("mlp", std::make_shared<MlpImpl>(c, init, options));
}

torch::Tensor DecoderLayerImpl::Forward(const torch::Tensor& x, const torch::Tensor& cos,
                                        const torch::Tensor& sin, const torch::Tensor& mask) const {
  auto [q, k, v] = self_attn->Project(input_layernorm->Forward(x), cos, sin);
  torch::Tensor h = x + self_attn->Attend(q, k, v, mask);
  return h + mlp->Forward(post_attention_layernorm->Forward(h));
}

BackboneImpl::BackboneImpl(const ModelConfig& c, bool initialize,
                           const torch::TensorOptions& options) {
  const Init init = initialize ? Init::kNormal : Init::kNone;
  embed_tokens = register_module(
      "embed_tokens", std::make_shared<EmbeddingImpl>(c.vocab_size, c.hidden_size, init, options));
  auto list = register_module("layers", std::make_shared<torch::nn::Module>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers.push_back(list->register_module(std::to_string(i),
                                           std::make_shared<DecoderLayerImpl>(c, init, options)));
  }
  norm = register_module("norm",
                         std::make_shared<RmsNormImpl>(c.hidden_size, c.rms_norm_eps, initialize, options));
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // `params` are passed so that autograd routes their gradients through this node.
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor cos,
                               torch::Tensor sin, torch::Tensor mask, at::TensorList params,
                               int64_t layer_address) {
    ctx->saved_data["layer"] = layer_address;
    ctx->saved_data["num_params"] = static_cast<int64_t>(params.size());
    ctx->save_for_backward({x, cos, sin, mask});
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(layer_address);
    return layer->Forward(x, cos, sin, mask);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(ctx->saved_data["layer"].toInt());
    const int64_t num_params = ctx->saved_data["num_params"].toInt();
    variable_list saved = ctx->get_saved_variables();
    torch::Tensor x = saved[0].detach().requires_grad_(saved[0].requires_grad());
    torch::Tensor out;
    {
      torch::AutoGradMode enable(true);
      out = layer->Forward(x, saved[1], saved[2], saved[3]);
    }
    std::vector<torch::Tensor> params = layer->parameters();
    variable_list inputs;
    std::vector<int64_t> where;  // index into `inputs` of x and each parameter, or -1
    auto add = [&](const torch::Tensor& t) {
      where.push_back(t.requires_grad() ? static_cast<int64_t>(inputs.size()) : -1);
      if (t.requires_grad()) inputs.push_back(t);
    };
    add(x);
    for (const auto& p : params) add(p);
    variable_list grads;
    if (!inputs.empty()) {
      grads = torch::autograd::grad({out}, inputs, {grad_outputs[0]}, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    }
    auto pick = [&](size_t i) { return where[i] < 0 ? torch::Tensor() : grads[where[i]]; };
    variable_list result = {pick(0), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    for (int64_t i = 0; i < num_params; ++i) result.push_back(pick(1 + i));
    result.push_back(torch::Tensor());  // layer_address
    return result;
  }
};

// The sharded layer. Its parameters are not inputs (their storage comes and goes), so their
// gradients go to the sharding instead of to autograd. With `recompute` x, cos, sin and mask
// are saved and the backward pass runs the layer again; without, the layer's inner graph is
// kept from the forward pass and the backward pass only gathers the parameters it reads.
class ShardedLayerFunction : public torch::autograd::Function<ShardedLayerFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor cos,
                               torch::Tensor sin, torch::Tensor mask, int64_t layer_address,
                               int64_t unit, int64_t sharding_address, bool recompute) {
    ctx->saved_data["layer"] = layer_address;
    ctx->saved_data["unit"] = unit;
    ctx->saved_data["sharding"] = sharding_address;
    ctx->saved_data["recompute"] = recompute;
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(layer_address);
    auto* sharding = reinterpret_cast<ParameterSharding*>(sharding_address);
    sharding->Gather(static_cast<int>(unit));
    torch::Tensor out;
    if (recompute) {
      ctx->save_for_backward({x, cos, sin, mask});
      out = layer->Forward(x, cos, sin, mask);
    } else {
      // The layer's own graph is kept (its activations, and references to the parameters'
      // storage, which the backward pass fills again before it runs).
      torch::AutoGradMode enable(true);
      torch::Tensor inner_x = x.detach().requires_grad_(x.requires_grad());
      torch::Tensor inner_out = layer->Forward(inner_x, cos, sin, mask);
      ctx->saved_data["inner_x"] = inner_x;
      ctx->saved_data["inner_out"] = inner_out;
      out = inner_out.detach();
    }
    sharding->Release(static_cast<int>(unit));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(ctx->saved_data["layer"].toInt());
    const int unit = static_cast<int>(ctx->saved_data["unit"].toInt());
    auto* sharding = reinterpret_cast<ParameterSharding*>(ctx->saved_data["sharding"].toInt());
    const bool recompute = ctx->saved_data["recompute"].toBool();
    variable_list saved = recompute ? ctx->get_saved_variables() : variable_list();
    torch::Tensor x = recompute ? saved[0] : ctx->saved_data["inner_x"].toTensor();
    const bool x_grad = x.requires_grad();
    if (recompute) x = x.detach().requires_grad_(x_grad);
    sharding->Gather(unit);
    std::vector<torch::Tensor> params = layer->parameters();
    variable_list inputs;
    if (x_grad) inputs.push_back(x);
    std::vector<int64_t> where;  // index into `inputs` of each parameter, or -1
    for (const auto& p : params) {
      where.push_back(p.requires_grad() ? static_cast<int64_t>(inputs.size()) : -1);
      if (p.requires_grad()) inputs.push_back(p);
    }
    variable_list grads;
    if (!inputs.empty()) {
      torch::AutoGradMode enable(true);
      torch::Tensor out = recompute ? layer->Forward(x, saved[1], saved[2], saved[3])
                                    : ctx->saved_data["inner_out"].toTensor();
      grads = torch::autograd::grad({out}, inputs, {grad_outputs[0]}, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    }
    ctx->saved_data.erase("inner_out");  // the layer's graph and activations
    ctx->saved_data.erase("inner_x");
    std::vector<torch::Tensor> param_grads;
    for (int64_t w : where) param_grads.push_back(w < 0 ? torch::Tensor() : grads[w]);
    sharding->ReduceGradients(unit, param_grads);
    sharding->Release(unit);
    return {x_grad ? grads[0] : torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ShardedLayerForward(DecoderLayerImpl& layer, int unit, ParameterSharding& sharding,
                                  const torch::Tensor& x, const torch::Tensor& cos,
                                  const torch::Tensor& sin, const torch::Tensor& mask,
                                  bool recompute) {
  if (!torch::GradMode::is_enabled()) {
    sharding.Gather(unit);
    torch::Tensor out = layer.Forward(x, cos, sin, mask);
    sharding.Release(unit);
    return out;
  }
  return ShardedLayerFunction::apply(x, cos, sin, mask, reinterpret_cast<int64_t>(&layer),
                                     static_cast<int64_t>(unit),
                                     reinterpret_cast<int64_t>(&sharding), recompute);
}

torch::Tensor CheckpointedLayerForward(DecoderLayerImpl& layer, const torch::Tensor& x,
                                       const torch::Tensor& cos, const torch::Tensor& sin,
                                       const torch::Tensor& mask) {
  std::vector<torch::Tensor> params = layer.parameters();
  return CheckpointFunction::apply(x, cos, sin, mask, at::TensorList(params),
                                   reinterpret_cast<int64_t>(&layer));
}

}  // namespace rlmesh::model::internal
