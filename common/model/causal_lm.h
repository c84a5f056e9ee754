// The policy network: a decoder-only transformer (Llama / Qwen2 / Qwen3) in LibTorch whose
// parameter names are exactly the Hugging Face checkpoint names (named_parameters() yields
// "model.layers.0.self_attn.q_proj.weight", ...), so weights load and save by name.
// One instance may be used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "common/model/model_config.h"

namespace rlmesh::model {

namespace internal {
class BackboneImpl;
class LinearImpl;
}  // namespace internal

struct CausalLmOptions {
  torch::Dtype dtype = torch::kFloat32;  // parameters and activations; kFloat32 or kBFloat16
  torch::Device device = torch::kCPU;
  bool gradient_checkpointing = false;  // recompute layer activations in backward
  // Expect a …ForSequenceClassification checkpoint (a reward model) instead of a causal LM;
  // building either from the other's config is an error naming the architecture.
  bool sequence_classification = false;
};

// Key/value storage for up to `max_seqs` sequences ("slots") of up to `max_len` tokens each.
struct KvCache {
  std::vector<torch::Tensor> keys;    // per layer: [max_seqs, num_kv_heads, max_len, head_dim]
  std::vector<torch::Tensor> values;  // per layer: same shape as keys
  std::vector<int64_t> lengths;       // per slot: tokens cached so far
  int64_t max_len = 0;
};

// Set on a model whose parameters a trainer group shards across its ranks
// (services/trainer/fsdp.h). The parameters are split into units: unit 0 holds embed_tokens,
// the final norm and lm_head (the root), unit 1 + i decoder layer i. Between uses a unit's
// parameter storage is released (the tensors keep their shapes but hold no memory); Forward
// gathers a unit just before it computes with it. A layer is gathered for its forward and
// released after it; in a backward pass it is gathered once more (its activations
// recomputed there under gradient_checkpointing, else kept from the forward), its parameter
// gradients are handed to ReduceGradients (they never
// reach the parameters' .grad) and it is released again. The root is gathered for the whole
// forward and, when gradients are recorded, stays gathered until the caller releases it
// after the backward pass; its gradients arrive in the parameters' .grad as usual.
// Failures are thrown (the caller's forward or backward then throws).
class ParameterSharding {
 public:
  virtual ~ParameterSharding() = default;
  virtual void Gather(int unit) = 0;   // no-op when gathered
  virtual void Release(int unit) = 0;  // no-op when released
  // The gradients of UnitParameters(unit) in that order (undefined where none flowed).
  virtual void ReduceGradients(int unit, const std::vector<torch::Tensor>& grads) = 0;
};

class CausalLmImpl : public torch::nn::Module {
 public:
  // Builds the network with randomly initialised parameters (load weights afterwards).
  static absl::StatusOr<std::shared_ptr<CausalLmImpl>> Create(const ModelConfig& config,
                                                               const CausalLmOptions& options);

  // Full forward over a padded batch. input_ids, attention_mask (1 = real token, 0 = pad;
  // padding may be on either side) and position_ids are [B, T] int64. Returns float32 logits
  // [B, T, V]. Rows are independent: a row's logits do not depend on the other rows.
  torch::Tensor Forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                        const torch::Tensor& position_ids);

  // Padding-free forward (verl's use_remove_padding): the sequences of a batch packed into
  // one row, input_ids and position_ids [1, N] int64 (each sequence's own positions), with
  // cu_seqlens [S + 1] int64 marking sequence s as tokens cu[s] .. cu[s+1]-1 (cu[0] = 0,
  // cu[S] = N). Attention never crosses a sequence boundary and nothing is computed on
  // padding. Returns float32 logits [1, N, V]; a sequence's logits equal those Forward gives
  // its real tokens in a padded batch, to rounding.
  torch::Tensor ForwardPacked(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                              const torch::Tensor& cu_seqlens);

  // An empty cache for `max_seqs` slots of `max_len` tokens on the model's device and dtype.
  KvCache NewCache(int64_t max_seqs, int64_t max_len) const;

  // Incremental forward with the KV cache (prefill and decode alike). Row b of input_ids
  // [B, T] holds new tokens for slot slots[b]; its first num_new[b] entries are real and the
  // rest padding. The new tokens take positions lengths[slot] .. lengths[slot]+num_new[b]-1,
  // attend to the slot's cached tokens and causally to each other, and are appended to the
  // cache. Returns float32 logits [B, T, V] (rows past num_new[b] are meaningless). No grad.
  // A float32 model on an AVX-512 CPU runs this on the kernels of cpu_kernels.h, otherwise
  // on ATen operators; the two agree to float32 rounding (tests hold them to 1e-5).
  torch::Tensor ForwardCached(const torch::Tensor& input_ids, const std::vector<int64_t>& slots,
                              const std::vector<int64_t>& num_new, KvCache* cache);

  // Like ForwardCached, but returns only the float32 logits [B, V] of each row's last new
  // token (row b: position num_new[b]-1), which is all that sampling needs; it skips the
  // vocabulary projection of the other positions (a long prefill would need B*T*V floats).
  torch::Tensor ForwardCachedLast(const torch::Tensor& input_ids,
                                  const std::vector<int64_t>& slots,
                                  const std::vector<int64_t>& num_new, KvCache* cache);

  const ModelConfig& config() const { return config_; }
  const CausalLmOptions& options() const { return options_; }

  // The sharding units (see ParameterSharding): 1 + num_hidden_layers of them; unit 0 is
  // embed_tokens.weight, norm.weight and (untied) lm_head.weight, unit 1 + i the parameters
  // of layer i in registration order. Every parameter is in exactly one unit.
  int NumUnits() const { return 1 + static_cast<int>(config_.num_hidden_layers); }
  std::vector<torch::Tensor> UnitParameters(int unit) const;
  // Not owned; null (the default) when the parameters are whole. Forward only: the cached
  // forwards of generation need whole parameters.
  void SetSharding(ParameterSharding* sharding) { sharding_ = sharding; }

  // Builds the network with uninitialised parameter storage, for callers that overwrite
  // every parameter straight away (LoadPretrained).
  static absl::StatusOr<std::shared_ptr<CausalLmImpl>> CreateUninitialized(
      const ModelConfig& config, const CausalLmOptions& options);

 private:
  CausalLmImpl(const ModelConfig& config, const CausalLmOptions& options, bool initialize);
  // Forward and ForwardPacked past their checks: `mask` is the additive mask or cu_seqlens.
  torch::Tensor Run(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                    const torch::Tensor& mask);
  torch::Tensor RunCached(const torch::Tensor& input_ids, const std::vector<int64_t>& slots,
                          const std::vector<int64_t>& num_new, KvCache* cache, bool last_only);
  // RunCached on the float32 CPU kernels (causal_lm_cpu.cc), when UseCpuKernels(*cache):
  // a float32 model on an AVX-512 CPU whose fused q/k/v and gate/up storage is intact.
  // `lens` are the rows' cached lengths before the call; arguments are validated.
  bool UseCpuKernels(const KvCache& cache) const;
  torch::Tensor RunCachedCpu(const torch::Tensor& input_ids, const std::vector<int64_t>& slots,
                             const std::vector<int64_t>& num_new, const std::vector<int64_t>& lens,
                             KvCache* cache, bool last_only);
  // cos and sin [B, T, head_dim] in the model dtype for int64 positions [B, T].
  std::pair<torch::Tensor, torch::Tensor> Rope(const torch::Tensor& position_ids) const;
  torch::Tensor Logits(const torch::Tensor& hidden);

  ModelConfig config_;
  CausalLmOptions options_;
  std::shared_ptr<internal::BackboneImpl> model_;    // registered as "model"
  // Registered as "lm_head" (null when tied), or as "score" for a sequence classifier.
  std::shared_ptr<internal::LinearImpl> lm_head_;
  torch::Tensor inv_freq_;                           // [head_dim / 2] float32, RoPE frequencies
  ParameterSharding* sharding_ = nullptr;
};

// A sequence classifier's scores [B, num_labels] from Forward's output `logits` [B, T, L] of
// `input_ids` [B, T] with `attention_mask` (1 = real token), read where transformers'
// …ForSequenceClassification reads them: at each row's last token whose id is not
// `pad_token_id` (its last real token when pad_token_id is unset; position 0 when every token
// is the pad id).
torch::Tensor SequenceScores(const torch::Tensor& logits, const torch::Tensor& input_ids,
                             const torch::Tensor& attention_mask,
                             std::optional<int64_t> pad_token_id);

// Per-token log-probabilities of `targets` [B, T] under `logits` [B, T, V] divided by
// `temperature` first (as verl does). Returns [B, T] float32, differentiable.
torch::Tensor LogProbsFromLogits(const torch::Tensor& logits, const torch::Tensor& targets,
                                 double temperature);

// Per-token entropy of softmax(logits / temperature) [B, T, V] -> [B, T] float32,
// differentiable.
torch::Tensor EntropyFromLogits(const torch::Tensor& logits, double temperature);

}  // namespace rlmesh::model
