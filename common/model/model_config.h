// The architecture of a decoder-only policy, as read from a Hugging Face `config.json`
// (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM). Torch-free: the dry-run memory
// estimate and the LibTorch decoder both read it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rlmesh::model {

enum class Arch { kLlama, kQwen2, kQwen3 };

// Llama 3 "rope_scaling" with rope_type "llama3".
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// What sits on the decoder: the language-model head (…ForCausalLM: lm_head, logits over the
// vocabulary) or a reward model's score head (…ForSequenceClassification: `score`, a
// [num_labels, hidden] linear map without bias, read at each sequence's last token).
enum class Head { kCausalLm, kSequenceClassification };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  Head head = Head::kCausalLm;
  std::string architecture;  // the HF class name, e.g. "Qwen3ForCausalLM"
  std::string model_type;    // "llama", "qwen2", "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless config.json says otherwise
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases: true for Qwen2, config key for Llama
  bool qk_norm = false;         // per-head RMSNorm on q and k: Qwen3
  std::string torch_dtype = "float32";
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  // The score head's outputs (…ForSequenceClassification): config.json's num_labels, else
  // the size of id2label, else transformers' default 2. 0 for a causal LM.
  int64_t num_labels = 0;
  // Where a sequence classifier reads its score: the last token that is not pad_token_id
  // (transformers' rule); unset, the last token.
  std::optional<int64_t> pad_token_id;
  // Mixture-of-experts fields; 0 for dense models (all three supported families are dense).
  int64_t num_experts = 0;

  // Parses config.json text; `source` names the file in error messages. Unknown
  // architectures and missing or invalid sizes are InvalidArgument errors naming the key.
  static absl::StatusOr<ModelConfig> FromJson(const std::string& text, const std::string& source);
  static absl::StatusOr<ModelConfig> FromFile(const std::string& path);
  // config.json text that FromJson reads back to an equal config and that Hugging Face
  // transformers accepts for the same architecture.
  std::string ToJson() const;

  // Exact number of parameters, counting a tied lm_head once.
  int64_t NumParameters() const;
  // (name, shape) of every tensor of the Hugging Face checkpoint, in a fixed order:
  // model.embed_tokens.weight, model.layers.{i}.{input_layernorm, self_attn.{q,k,v,o}_proj,
  // self_attn.{q,k}_norm (Qwen3), post_attention_layernorm, mlp.{gate,up,down}_proj}.*,
  // model.norm.weight, lm_head.weight (absent when tied; score.weight [num_labels, hidden]
  // instead for a sequence classifier, which is never tied).
  std::vector<std::pair<std::string, std::vector<int64_t>>> TensorShapes() const;
};

}  // namespace rlmesh::model
