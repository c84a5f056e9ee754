// Cross-key consistency checks of a loaded config (each key alone was validated by the
// loader): batch-size divisibility, parallel layouts that must agree between actor,
// reference and rollout, expert parallelism only for MoE models, devices = TP x PP x DP,
// sequence length against the model, data sources, services and TLS. Pure function of its
// inputs apart from file-existence checks.
#pragma once

#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/config/model_shape.h"

namespace rlmesh::config {

struct Finding {
  enum class Severity { kWarning, kError };
  Severity severity = Severity::kError;
  std::string message;  // names the key(s), the value(s) and why
  // A warning of planning that is an error at start: `rlmesh run` would refuse this config.
  bool blocks_run = false;
};

// `shape` null (the model's sizes are unknown) skips the checks that need them; `check_data`
// false skips the data files and the synthetic task.
std::vector<Finding> CheckConfig(const Config& config, const ModelShape* shape,
                                 bool check_data = true);

// Findings about the folder of actor_rollout_ref.model.path, read without loading it: that it
// exists and holds config.json (whose parse errors LoadModelShape reports), safetensors
// weights whose headers fit their files and match config.json's shapes, and tokenizer.json.
// A missing folder is a warning when rlmesh.model.* gives the sizes instead, unless
// `for_run`: the services are about to load it, so anything missing is an error.
std::vector<Finding> CheckModelFolder(const Config& config, bool for_run);

}  // namespace rlmesh::config
