// --device cpu|cuda and --dtype float32|bfloat16 of the commands that load a model (generate,
// logprobs): the model runs as rlmesh.device and rlmesh.dtype make the services run it.
#pragma once

#include <cstdio>
#include <string>

#include "common/model/causal_lm.h"
#include "common/model/pretrained.h"

namespace rlmesh::cli {

struct ModelFlags {
  std::string device = "cpu";
  std::string dtype = "float32";
};

inline constexpr char kModelFlagsUsage[] =
    "  --device D           cpu or cuda (default cpu)\n"
    "  --dtype T            float32 or bfloat16: parameters and activations (default float32)\n";

// Takes `arg` `value` when `arg` is --device or --dtype: 1 taken, 0 another flag, -1 a value
// outside the choices (said on stderr, naming `command` and the flag).
inline int TakeModelFlag(const char* command, const std::string& arg, const std::string& value,
                         ModelFlags& flags) {
  const bool is_device = arg == "--device";
  if (!is_device && arg != "--dtype") return 0;
  const bool valid =
      is_device ? (value == "cpu" || value == "cuda") : (value == "float32" || value == "bfloat16");
  if (!valid) {
    std::fprintf(stderr, "rlmesh %s: %s: expected %s, got \"%s\"\n", command, arg.c_str(),
                 is_device ? "cpu or cuda" : "float32 or bfloat16", value.c_str());
    return -1;
  }
  (is_device ? flags.device : flags.dtype) = value;
  return 1;
}

// The model options of `flags`; false, said on stderr, when --device cuda cannot run here (a
// LibTorch without CUDA, or no GPU visible).
inline bool ModelOptionsOf(const char* command, const ModelFlags& flags,
                           model::CausalLmOptions* options) {
  // TakeModelFlag checked the values, so only the device can be refused here, by its flag.
  absl::StatusOr<model::CausalLmOptions> made =
      model::CausalLmOptionsFromConfig(flags.dtype, flags.device, "--device");
  if (!made.ok()) {
    std::fprintf(stderr, "rlmesh %s: %s\n", command, std::string(made.status().message()).c_str());
    return false;
  }
  *options = *made;
  return true;
}

}  // namespace rlmesh::cli
