// Files of the actor's resumable state inside a checkpoint folder: the AdamW state and the
// RNG state (the mini-batch shuffling generator, LibTorch's default CPU generator, and the
// count of skipped steps). Each file is written to a temporary name, flushed to disk and
// renamed, so a crash leaves either the old file or the new one, never half of one.
// Callers serialize access to the objects passed in.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace rlmesh::trainer {

inline constexpr char kActorOptimizerFile[] = "actor_optimizer.pt";
inline constexpr char kActorRngFile[] = "actor_rng.pt";
inline constexpr char kActorMasterWeightsFile[] = "actor_master_weights.pt";

// Creates dir if needed and writes both files. Internal on an I/O failure, naming the path.
absl::Status WriteActorState(const std::string& dir, const torch::optim::Optimizer& optimizer,
                             const at::Generator& shuffle_generator, int64_t nonfinite_steps_total);

// Reads both files back into the objects. NotFound naming the file when one is missing;
// InvalidArgument when a file does not fit (another optimizer, a corrupt file).
absl::Status ReadActorState(const std::string& dir, torch::optim::Optimizer* optimizer,
                            at::Generator* shuffle_generator, int64_t* nonfinite_steps_total);

// The fp32 master weights of a low-precision policy (master_weights.h), in their order.
absl::Status WriteMasterWeights(const std::string& dir, const std::vector<torch::Tensor>& masters);
// Reads them back into `masters` (same count and shapes): NotFound naming the file when it is
// missing, InvalidArgument when it does not fit.
absl::Status ReadMasterWeights(const std::string& dir, const std::vector<torch::Tensor>& masters);

}  // namespace rlmesh::trainer
