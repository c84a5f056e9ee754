// Building blocks of the decoder (internal to common/model): modules whose registered names
// reproduce the Hugging Face parameter names under "model.", and the attention kernel shared
// by the full and the KV-cached forward.
#pragma once

#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "common/model/model_config.h"

namespace rlmesh::model {
class ParameterSharding;
}  // namespace rlmesh::model

namespace rlmesh::model::internal {

// Parameter storage: float32 normal(0, std) or ones/zeros drawn on the CPU (so a seed gives the
// same weights for every dtype and device), then converted; or left uninitialised.
enum class Init { kNone, kNormal, kOnes, kZeros };
torch::Tensor MakeParameter(const std::vector<int64_t>& shape, Init init,
                            const torch::TensorOptions& options);

// y = x W^T (+ b) for x [..., in]. A single row on the CPU goes through matrix-vector
// multiplication: BLAS gemm packs (copies) the whole weight even for one row, which costs
// batch-1 decoding about twice the weight-read time.
torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// "weight" [out, in], "bias" [out].
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias, Init init, const torch::TensorOptions& options);
  // Registers the given storage (for example rows of a fused matrix); bias may be undefined.
  LinearImpl(const torch::Tensor& weight, const torch::Tensor& bias);
  torch::Tensor Forward(const torch::Tensor& x) const { return Linear(x, weight, bias); }
  torch::Tensor weight;
  torch::Tensor bias;  // undefined without bias
};

// Hugging Face RMSNorm: normalise in float32, cast back, then scale by "weight".
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps, bool initialize, const torch::TensorOptions& options);
  torch::Tensor Forward(const torch::Tensor& x) const;
  torch::Tensor weight;
  double eps;
};

// Rows [begin, end) of `fused` as a parameter tensor: contiguous, sharing fused's storage, so
// in-place writes to either (loading, weight updates, optimizer steps) are seen by both.
torch::Tensor FusedRows(const torch::Tensor& fused, int64_t begin, int64_t end);

// How a packed row's attention runs (the result is the same to rounding). Sequence by
// sequence computes nothing on padding but takes a few operators per sequence, which costs
// more than it saves when there are many short sequences (the quickstart's 64 sequences of
// about 16 tokens per micro-batch: 0.21 s per update padded against 0.35 s); batched lays
// the sequences out as rows of the longest one's length for the attention alone (as a padded
// batch would) and keeps the rest packed. kAuto: sequence by sequence when there is one
// sequence or the longest has kPerSequenceFromLength tokens or more, else batched.
enum class PackedAttention { kAuto, kPerSequence, kBatched };
constexpr int64_t kPerSequenceFromLength = 256;
// Process-wide; tests use it to run both ways.
void SetPackedAttention(PackedAttention how);

// q/k/v/o projections (+ Qwen3 q_norm/k_norm). Heads of q are grouped by key/value head:
// head h uses key/value head h / (num_heads / num_kv_heads), as HF's repeat_kv.
// q_proj, k_proj and v_proj are rows of one matrix qkv_weight [(H + 2 KV) * hd, D] (and
// qkv_bias), so inference runs one matrix product for the three.
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& config, Init init, const torch::TensorOptions& options);
  // x [B, T, D] -> q [B, H, T, hd], k and v [B, KV, T, hd], with RoPE (cos/sin [B, T, hd])
  // applied to q and k (after q/k norm for Qwen3).
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> Project(const torch::Tensor& x,
                                                                 const torch::Tensor& cos,
                                                                 const torch::Tensor& sin) const;
  // Scaled dot-product attention of q [B, H, T, hd] over k, v [B, KV, L, hd] with an
  // additive mask [B, 1, 1, T, L], then o_proj -> [B, T, D]. For a packed row (B = 1, see
  // CausalLmImpl::ForwardPacked) `mask` is instead the int64 CPU cu_seqlens [S + 1]: token
  // spans cu[s] .. cu[s+1]-1 are sequences, each attending causally within itself only.
  torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& mask) const;
  // A packed row's attention [1, H, N, hd] before o_proj (see Attend and PackedAttention).
  torch::Tensor AttendPacked(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& cu_seqlens) const;
  // The attention itself: [B, H, T, hd] before o_proj; an undefined mask is causal over
  // keys that are all real (T == L).
  torch::Tensor Context(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask) const;

  // False when a parameter no longer lives in qkv_weight/qkv_bias (replaced, not written).
  bool FusedIntact() const;

  std::shared_ptr<LinearImpl> q_proj, k_proj, v_proj, o_proj;
  std::shared_ptr<RmsNormImpl> q_norm, k_norm;  // null unless config.qk_norm
  int64_t num_heads, num_kv_heads, head_dim;
  torch::Tensor qkv_weight;  // not registered: its rows are the q/k/v parameters
  torch::Tensor qkv_bias;    // undefined without attention bias
};

// gate/up/down SwiGLU MLP. gate_proj and up_proj are rows of gate_up_weight [2 I, D].
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelConfig& config, Init init, const torch::TensorOptions& options);
  torch::Tensor Forward(const torch::Tensor& x) const {
    return down_proj->Forward(torch::silu(gate_proj->Forward(x)) * up_proj->Forward(x));
  }
  bool FusedIntact() const;
  std::shared_ptr<LinearImpl> gate_proj, up_proj, down_proj;
  torch::Tensor gate_up_weight;  // not registered: its rows are the gate/up parameters
};

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& config, Init init, const torch::TensorOptions& options);
  // Pre-norm residual block over the whole sequence (keys = the sequence itself).
  torch::Tensor Forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask) const;
  std::shared_ptr<RmsNormImpl> input_layernorm, post_attention_layernorm;
  std::shared_ptr<AttentionImpl> self_attn;
  std::shared_ptr<MlpImpl> mlp;
};

// Token embedding table "weight" [V, D].
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t vocab, int64_t dim, Init init, const torch::TensorOptions& options);
  torch::Tensor weight;
};

// "model": embed_tokens, layers.{i}, norm.
class BackboneImpl : public torch::nn::Module {
 public:
  BackboneImpl(const ModelConfig& config, bool initialize, const torch::TensorOptions& options);
  std::shared_ptr<EmbeddingImpl> embed_tokens;
  std::vector<std::shared_ptr<DecoderLayerImpl>> layers;
  std::shared_ptr<RmsNormImpl> norm;
};

// Runs layer.Forward without keeping its activations; the backward pass runs it again
// (activation checkpointing). Gradients reach x and the layer's parameters.
torch::Tensor CheckpointedLayerForward(DecoderLayerImpl& layer, const torch::Tensor& x,
                                       const torch::Tensor& cos, const torch::Tensor& sin,
                                       const torch::Tensor& mask);

// Layer `unit` of a sharded model (causal_lm.h, ParameterSharding): gathers the layer, runs
// it and releases it; with a graph, its backward gathers it again, computes the gradients
// (recomputing the layer's activations when `recompute`, else from the ones the forward pass
// kept), hands the parameter gradients to sharding.ReduceGradients and releases it.
// Gradients reach x only.
torch::Tensor ShardedLayerForward(DecoderLayerImpl& layer, int unit, ParameterSharding& sharding,
                                  const torch::Tensor& x, const torch::Tensor& cos,
                                  const torch::Tensor& sin, const torch::Tensor& mask,
                                  bool recompute);

}  // namespace rlmesh::model::internal
