#include "common/model/model_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status/nesting.h"
#include "common/status/status_macros.h"

namespace rlmesh::model {
namespace {

using nlohmann::json;

absl::Status Invalid(const std::string& source, const std::string& key,
                     const std::string& expected, const json& found) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": key \"", key, "\": expected ",
                                                 expected, ", got ", found.dump()));
}

// Reads a required (or defaulted, when `fallback` is set) integer >= `min`.
absl::StatusOr<int64_t> GetInt(const json& j, const std::string& source, const std::string& key,
                               int64_t min, std::optional<int64_t> fallback = std::nullopt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback.has_value()) return *fallback;
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": missing key \"", key, "\" (an integer >= ", min, ")"));
  }
  if (!it->is_number_integer()) return Invalid(source, key, "an integer", *it);
  const int64_t v = it->get<int64_t>();
  if (v < min) return Invalid(source, key, absl::StrCat("an integer >= ", min), *it);
  return v;
}

absl::StatusOr<double> GetPositiveDouble(const json& j, const std::string& source,
                                         const std::string& key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) return Invalid(source, key, "a number", *it);
  const double v = it->get<double>();
  if (!(v > 0)) return Invalid(source, key, "a number > 0", *it);
  return v;
}

absl::StatusOr<bool> GetBool(const json& j, const std::string& source, const std::string& key,
                             bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Invalid(source, key, "true or false", *it);
  return it->get<bool>();
}

absl::StatusOr<std::optional<RopeScaling>> ParseRopeScaling(const json& j,
                                                            const std::string& source) {
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return std::optional<RopeScaling>();
  if (!it->is_object()) return Invalid(source, "rope_scaling", "an object or null", *it);
  const json& rs = *it;
  // Transformers >= 4.43 writes "rope_type"; older files wrote "type".
  std::string type;
  if (rs.contains("rope_type") && rs["rope_type"].is_string()) {
    type = rs["rope_type"].get<std::string>();
  } else if (rs.contains("type") && rs["type"].is_string()) {
    type = rs["type"].get<std::string>();
  }
  if (type == "default") return std::optional<RopeScaling>();
  if (type != "llama3") {
    return Invalid(source, "rope_scaling.rope_type", "\"llama3\" (the only supported scaling)",
                   rs.value("rope_type", rs.value("type", json())));
  }
  RopeScaling out;
  ASSIGN_OR_RETURN(out.factor, GetPositiveDouble(rs, source, "factor", out.factor));
  ASSIGN_OR_RETURN(out.low_freq_factor,
                   GetPositiveDouble(rs, source, "low_freq_factor", out.low_freq_factor));
  ASSIGN_OR_RETURN(out.high_freq_factor,
                   GetPositiveDouble(rs, source, "high_freq_factor", out.high_freq_factor));
  ASSIGN_OR_RETURN(out.original_max_position_embeddings,
                   GetInt(rs, source, "original_max_position_embeddings", 1,
                          out.original_max_position_embeddings));
  if (out.high_freq_factor <= out.low_freq_factor) {
    // Not rs["high_freq_factor"]: operator[] of a const json reads freed memory when the key
    // is missing (the default is in use then).
    return Invalid(
        source, "rope_scaling.high_freq_factor", "a number > low_freq_factor",
        rs.contains("high_freq_factor") ? rs.at("high_freq_factor") : json(out.high_freq_factor));
  }
  return std::optional<RopeScaling>(out);
}

// TensorShapes() lists ~10 tensors per layer; more layers than any checkpoint has (Llama 3.1
// 405B has 126) would make it, and the dry-run that calls it, allocate without bound.
constexpr int64_t kMaxLayers = 4096;

// True when every dimension of TensorShapes() and the parameter count fit in int64 (so that
// NumParameters() and the memory estimate do not overflow).
bool ParameterCountFits(const ModelConfig& c) {
  int64_t q_dim = 0, kv_dim = 0, total = 0;
  if (__builtin_mul_overflow(c.num_attention_heads, c.head_dim, &q_dim) ||
      __builtin_mul_overflow(c.num_key_value_heads, c.head_dim, &kv_dim)) {
    return false;
  }
  for (const auto& [name, shape] : c.TensorShapes()) {
    int64_t n = 1;
    for (int64_t d : shape) {
      if (__builtin_mul_overflow(n, d, &n)) return false;
    }
    if (__builtin_add_overflow(total, n, &total)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::FromJson(const std::string& text,
                                                  const std::string& source) {
  if (absl::Status deep = CheckNesting(text, source); !deep.ok()) return deep;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(source + ": not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError(source + ": expected a JSON object");

  ModelConfig c;
  auto arch_it = j.find("architectures");
  if (arch_it == j.end() || !arch_it->is_array() || arch_it->size() != 1 ||
      !(*arch_it)[0].is_string()) {
    return Invalid(source, "architectures", "a list with one class name",
                   arch_it == j.end() ? json() : *arch_it);
  }
  c.architecture = (*arch_it)[0].get<std::string>();
  std::string family = c.architecture;
  if (absl::EndsWith(family, "ForCausalLM")) {
    family.resize(family.size() - std::string("ForCausalLM").size());
  } else if (absl::EndsWith(family, "ForSequenceClassification")) {
    family.resize(family.size() - std::string("ForSequenceClassification").size());
    c.head = Head::kSequenceClassification;
  }
  if (family == "Llama") {
    c.arch = Arch::kLlama;
    c.model_type = "llama";
  } else if (family == "Qwen2") {
    c.arch = Arch::kQwen2;
    c.model_type = "qwen2";
  } else if (family == "Qwen3") {
    c.arch = Arch::kQwen3;
    c.model_type = "qwen3";
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": unsupported architecture \"", c.architecture,
        "\" (expected LlamaForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM, or the same "
        "families ForSequenceClassification)"));
  }
  if (c.architecture != family + "ForCausalLM" &&
      c.architecture != family + "ForSequenceClassification") {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": unsupported architecture \"", c.architecture, "\""));
  }
  if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string() &&
                                      mt->get<std::string>() != c.model_type) {
    return Invalid(source, "model_type", absl::StrCat("\"", c.model_type, "\" for ",
                                                      c.architecture), *mt);
  }

  ASSIGN_OR_RETURN(c.vocab_size, GetInt(j, source, "vocab_size", 1));
  ASSIGN_OR_RETURN(c.hidden_size, GetInt(j, source, "hidden_size", 1));
  ASSIGN_OR_RETURN(c.intermediate_size, GetInt(j, source, "intermediate_size", 1));
  ASSIGN_OR_RETURN(c.num_hidden_layers, GetInt(j, source, "num_hidden_layers", 1));
  ASSIGN_OR_RETURN(c.num_attention_heads, GetInt(j, source, "num_attention_heads", 1));
  ASSIGN_OR_RETURN(c.num_key_value_heads,
                   GetInt(j, source, "num_key_value_heads", 1, c.num_attention_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return Invalid(source, "num_key_value_heads",
                   absl::StrCat("a divisor of num_attention_heads (", c.num_attention_heads, ")"),
                   j["num_key_value_heads"]);
  }
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    ASSIGN_OR_RETURN(c.head_dim, GetInt(j, source, "head_dim", 1));
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return Invalid(source, "hidden_size",
                     absl::StrCat("a multiple of num_attention_heads (", c.num_attention_heads,
                                  ") when head_dim is absent"),
                     j["hidden_size"]);
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) return Invalid(source, "head_dim", "an even integer", c.head_dim);
  ASSIGN_OR_RETURN(c.max_position_embeddings,
                   GetInt(j, source, "max_position_embeddings", 1, 2048));
  ASSIGN_OR_RETURN(c.rms_norm_eps, GetPositiveDouble(j, source, "rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(c.rope_theta, GetPositiveDouble(j, source, "rope_theta", 10000.0));
  ASSIGN_OR_RETURN(c.rope_scaling, ParseRopeScaling(j, source));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, GetBool(j, source, "tie_word_embeddings", false));
  switch (c.arch) {
    case Arch::kQwen2:
      c.attention_bias = true;  // Qwen2Attention always has q/k/v biases
      break;
    case Arch::kLlama:
    case Arch::kQwen3:
      ASSIGN_OR_RETURN(c.attention_bias, GetBool(j, source, "attention_bias", false));
      break;
  }
  c.qk_norm = c.arch == Arch::kQwen3;
  ASSIGN_OR_RETURN(bool mlp_bias, GetBool(j, source, "mlp_bias", false));
  if (mlp_bias) return Invalid(source, "mlp_bias", "false (MLP biases are unsupported)", true);
  if (auto act = j.find("hidden_act"); act != j.end() && *act != "silu") {
    return Invalid(source, "hidden_act", "\"silu\"", *act);
  }

  // Newer transformers write "dtype", older ones "torch_dtype".
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (auto it = j.find(key); it != j.end() && it->is_string()) {
      c.torch_dtype = it->get<std::string>();
      break;
    }
  }
  if (auto it = j.find("bos_token_id"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return Invalid(source, "bos_token_id", "an integer", *it);
    c.bos_token_id = it->get<int64_t>();
  }
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    if (it->is_number_integer()) {
      c.eos_token_ids.push_back(it->get<int64_t>());
    } else if (it->is_array()) {
      for (const json& e : *it) {
        if (!e.is_number_integer()) {
          return Invalid(source, "eos_token_id", "an integer or a list of integers", *it);
        }
        c.eos_token_ids.push_back(e.get<int64_t>());
      }
    } else {
      return Invalid(source, "eos_token_id", "an integer or a list of integers", *it);
    }
  }
  if (auto it = j.find("pad_token_id"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return Invalid(source, "pad_token_id", "an integer", *it);
    c.pad_token_id = it->get<int64_t>();
  }
  if (c.head == Head::kSequenceClassification) {
    // transformers' PretrainedConfig: num_labels, else len(id2label), else 2.
    if (auto it = j.find("num_labels"); it != j.end() && !it->is_null()) {
      ASSIGN_OR_RETURN(c.num_labels, GetInt(j, source, "num_labels", 1));
    } else if (auto labels = j.find("id2label"); labels != j.end() && labels->is_object() &&
                                                 !labels->empty()) {
      c.num_labels = static_cast<int64_t>(labels->size());
    } else {
      c.num_labels = 2;
    }
  }
  if (auto it = j.find("num_experts"); it != j.end() && it->is_number_integer() &&
                                       it->get<int64_t>() > 0) {
    return Invalid(source, "num_experts", "0 (mixture-of-experts models are unsupported)", *it);
  }
  if (c.num_hidden_layers > kMaxLayers) {
    return Invalid(source, "num_hidden_layers", absl::StrCat("an integer <= ", kMaxLayers),
                   c.num_hidden_layers);
  }
  if (!ParameterCountFits(c)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the sizes (vocab_size ", c.vocab_size, ", hidden_size ",
                     c.hidden_size, ", intermediate_size ", c.intermediate_size,
                     ", num_attention_heads ", c.num_attention_heads, ", head_dim ", c.head_dim,
                     ") give a tensor or a parameter count beyond int64 (2^63 - 1)"));
  }
  return c;
}

absl::StatusOr<ModelConfig> ModelConfig::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return FromJson(ss.str(), path);
}

std::string ModelConfig::ToJson() const {
  json j;
  j["architectures"] = json::array({architecture});
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  if (rope_scaling.has_value()) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rope_scaling->factor},
                         {"low_freq_factor", rope_scaling->low_freq_factor},
                         {"high_freq_factor", rope_scaling->high_freq_factor},
                         {"original_max_position_embeddings",
                          rope_scaling->original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  if (arch != Arch::kQwen2) j["attention_bias"] = attention_bias;
  if (arch == Arch::kLlama) j["mlp_bias"] = false;
  if (arch != Arch::kLlama) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = num_hidden_layers;
  }
  j["hidden_act"] = "silu";
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["torch_dtype"] = torch_dtype;
  if (bos_token_id.has_value()) j["bos_token_id"] = *bos_token_id;
  if (pad_token_id.has_value()) j["pad_token_id"] = *pad_token_id;
  if (head == Head::kSequenceClassification) {
    // transformers reads num_labels from id2label.
    json id2label = json::object(), label2id = json::object();
    for (int64_t i = 0; i < num_labels; ++i) {
      id2label[absl::StrCat(i)] = absl::StrCat("LABEL_", i);
      label2id[absl::StrCat("LABEL_", i)] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
  }
  if (eos_token_ids.size() == 1) {
    j["eos_token_id"] = eos_token_ids[0];
  } else if (!eos_token_ids.empty()) {
    j["eos_token_id"] = eos_token_ids;
  }
  return j.dump(2) + "\n";
}

std::vector<std::pair<std::string, std::vector<int64_t>>> ModelConfig::TensorShapes() const {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  const int64_t q_dim = num_attention_heads * head_dim;
  const int64_t kv_dim = num_key_value_heads * head_dim;
  out.push_back({"model.embed_tokens.weight", {vocab_size, hidden_size}});
  for (int64_t i = 0; i < num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    out.push_back({p + "input_layernorm.weight", {hidden_size}});
    out.push_back({p + "self_attn.q_proj.weight", {q_dim, hidden_size}});
    if (attention_bias) out.push_back({p + "self_attn.q_proj.bias", {q_dim}});
    out.push_back({p + "self_attn.k_proj.weight", {kv_dim, hidden_size}});
    if (attention_bias) out.push_back({p + "self_attn.k_proj.bias", {kv_dim}});
    out.push_back({p + "self_attn.v_proj.weight", {kv_dim, hidden_size}});
    if (attention_bias) out.push_back({p + "self_attn.v_proj.bias", {kv_dim}});
    out.push_back({p + "self_attn.o_proj.weight", {hidden_size, q_dim}});
    // Llama with attention_bias=true also has an o_proj bias; Qwen2 does not.
    if (attention_bias && arch != Arch::kQwen2) {
      out.push_back({p + "self_attn.o_proj.bias", {hidden_size}});
    }
    if (qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {head_dim}});
      out.push_back({p + "self_attn.k_norm.weight", {head_dim}});
    }
    out.push_back({p + "post_attention_layernorm.weight", {hidden_size}});
    out.push_back({p + "mlp.gate_proj.weight", {intermediate_size, hidden_size}});
    out.push_back({p + "mlp.up_proj.weight", {intermediate_size, hidden_size}});
    out.push_back({p + "mlp.down_proj.weight", {hidden_size, intermediate_size}});
  }
  out.push_back({"model.norm.weight", {hidden_size}});
  if (head == Head::kSequenceClassification) {
    out.push_back({"score.weight", {num_labels, hidden_size}});
  } else if (!tie_word_embeddings) {
    out.push_back({"lm_head.weight", {vocab_size, hidden_size}});
  }
  return out;
}

int64_t ModelConfig::NumParameters() const {
  int64_t total = 0;
  for (const auto& [name, shape] : TensorShapes()) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    total += n;
  }
  return total;
}

}  // namespace rlmesh::model
