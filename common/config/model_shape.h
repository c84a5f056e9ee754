// The policy's sizes as the dry-run needs them: from the config.json of
// actor_rollout_ref.model.path when that folder has one, else from the rlmesh.model.* keys.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/config/config.h"
#include "common/model/model_config.h"

namespace rlmesh::config {

struct ModelShape {
  model::ModelConfig model;      // sizes of the dense architecture
  int64_t num_experts = 0;       // experts per MoE layer; 0 = dense
  int64_t total_params = 0;      // every parameter, all experts included
  int64_t embedding_params = 0;  // embed_tokens plus an untied lm_head
  int64_t layer_params = 0;      // one decoder layer, all experts included
  int64_t expert_params = 0;     // all layers' expert MLPs (0 for dense)
  std::string source;            // "<path>/config.json" or "rlmesh.model.*"
  std::string note;              // why rlmesh.model.* was used, when it was
};

// `path` with a leading "~/" replaced by $HOME, as a shell would.
std::string ExpandHome(const std::string& path);

// Sizes from an already-parsed architecture, with `num_experts` experts replacing each MLP.
ModelShape ShapeFromModelConfig(const model::ModelConfig& model, int64_t num_experts,
                                const std::string& source);

// From actor_rollout_ref.model.path/config.json if it exists (its errors are returned as
// they are), otherwise from rlmesh.model.*; an unset size there is an InvalidArgument error
// naming the key.
absl::StatusOr<ModelShape> LoadModelShape(const Config& config);

}  // namespace rlmesh::config
