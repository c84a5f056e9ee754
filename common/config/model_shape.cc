#include "common/config/model_shape.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace rlmesh::config {
namespace {

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The rlmesh.model.* keys as a config.json text, so that one parser (ModelConfig::FromJson)
// decides what the sizes mean for each family.
absl::StatusOr<model::ModelConfig> FromSizeKeys(const ModelSizeConfig& m) {
  const std::pair<const char*, int64_t> required[] = {
      {"rlmesh.model.hidden_size", m.hidden_size},
      {"rlmesh.model.intermediate_size", m.intermediate_size},
      {"rlmesh.model.num_hidden_layers", m.num_hidden_layers},
      {"rlmesh.model.num_attention_heads", m.num_attention_heads},
      {"rlmesh.model.vocab_size", m.vocab_size},
  };
  for (const auto& [key, value] : required) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config key ", key, ": expected the model size (an integer >= 1), got \"", value,
          "\" (needed because actor_rollout_ref.model.path has no config.json)"));
    }
  }
  nlohmann::json j;
  j["architectures"] = nlohmann::json::array({m.architecture});
  j["hidden_size"] = m.hidden_size;
  j["intermediate_size"] = m.intermediate_size;
  j["num_hidden_layers"] = m.num_hidden_layers;
  j["num_attention_heads"] = m.num_attention_heads;
  j["num_key_value_heads"] =
      m.num_key_value_heads > 0 ? m.num_key_value_heads : m.num_attention_heads;
  if (m.head_dim > 0) j["head_dim"] = m.head_dim;
  j["vocab_size"] = m.vocab_size;
  j["max_position_embeddings"] = m.max_position_embeddings;
  j["tie_word_embeddings"] = m.tie_word_embeddings;
  return model::ModelConfig::FromJson(j.dump(), "rlmesh.model.*");
}

}  // namespace

std::string ExpandHome(const std::string& path) {
  if (!absl::StartsWith(path, "~/")) return path;
  const char* home = std::getenv("HOME");
  return absl::StrCat(home == nullptr ? "" : home, path.substr(1));
}

ModelShape ShapeFromModelConfig(const model::ModelConfig& model, int64_t num_experts,
                                const std::string& source) {
  ModelShape shape;
  shape.model = model;
  shape.num_experts = num_experts;
  shape.source = source;
  int64_t mlp_params = 0;  // one layer's dense MLP
  for (const auto& [name, dims] : model.TensorShapes()) {
    const int64_t n = Elements(dims);
    shape.total_params += n;
    if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
      shape.embedding_params += n;
    } else if (absl::StartsWith(name, "model.layers.0.")) {
      shape.layer_params += n;
      if (absl::StrContains(name, ".mlp.")) mlp_params += n;
    }
  }
  if (num_experts > 0) {
    // Each MoE layer holds num_experts copies of the MLP plus a router [num_experts, hidden].
    const int64_t per_layer = num_experts * mlp_params + num_experts * model.hidden_size;
    shape.expert_params = model.num_hidden_layers * num_experts * mlp_params;
    shape.total_params += model.num_hidden_layers * (per_layer - mlp_params);
    shape.layer_params += per_layer - mlp_params;
  }
  return shape;
}

absl::StatusOr<ModelShape> LoadModelShape(const Config& config) {
  const std::string& path = config.actor_rollout_ref.model.path;
  std::string note;
  if (path.empty()) {
    note = "actor_rollout_ref.model.path is empty";
  } else {
    const std::filesystem::path file = std::filesystem::path(ExpandHome(path)) / "config.json";
    std::error_code ec;
    if (std::filesystem::is_regular_file(file, ec)) {
      ASSIGN_OR_RETURN(model::ModelConfig model, model::ModelConfig::FromFile(file.string()));
      return ShapeFromModelConfig(model, 0, file.string());
    }
    note = absl::StrCat(file.string(), " not found");
  }
  ASSIGN_OR_RETURN(model::ModelConfig model, FromSizeKeys(config.rlmesh.model));
  ModelShape shape = ShapeFromModelConfig(model, config.rlmesh.model.num_experts, "rlmesh.model.*");
  shape.note = std::move(note);
  return shape;
}

}  // namespace rlmesh::config
