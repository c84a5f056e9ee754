// Files of the actor's resumable state inside a checkpoint folder: the AdamW state and the
// RNG state (the mini-batch shuffling generator, LibTorch's default CPU generator, and the
// count of skipped steps). Each file is written to a temporary name, flushed to disk and
// renamed, so a crash leaves either the old file or the new one, never half of one.
// Callers serialize access to the objects passed in.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rlmesh::trainer {

// The key a LibTorch optimizer files a parameter's state under (Optimizer::state()): the
// parameter's TensorImpl, written out as text (the address, as c10::guts::to_string wrote it)
// in LibTorch 1.x, the pointer itself in 2.x. The map's own key type says which, so this
// compiles against both.
template <typename Optimizer>
auto OptimizerStateKey(Optimizer& optimizer, const torch::Tensor& param) {
  using Key = typename std::decay_t<decltype(optimizer.state())>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << static_cast<const void*>(param.unsafeGetTensorImpl());
    return Key(text.str());
  } else {
    return Key(param.unsafeGetTensorImpl());
  }
}

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

// A sharded actor's (fsdp.h) optimizer state: rank r of W writes
// actor_shard_<r>_of_<W>.pt with its flat fp32 shard of each unit's master weights and AdamW
// moments. Read back at any world size: every rank's file is read and each unit's shards are
// joined into the whole flat vectors (padding dropped), which the reader then cuts for its
// own world size (or maps onto whole parameters).
struct UnitState {
  torch::Tensor master;               // [numel] fp32, the unit's flat vector (fsdp.h)
  torch::Tensor exp_avg, exp_avg_sq;  // [numel] fp32; undefined before the first step
  int64_t step = 0;
};
std::string ShardStateFile(int rank, int world_size);
absl::Status WriteShardState(const std::string& dir, int rank, int world_size,
                             const std::vector<int64_t>& unit_numel,
                             const std::vector<torch::Tensor>& masters,
                             const torch::optim::Optimizer& optimizer);
// The world size of the sharded state in dir, or 0 when it holds none. InvalidArgument when
// files of several world sizes are there.
absl::StatusOr<int> ShardStateWorldSize(const std::string& dir);
// Every rank's file joined; NotFound naming a missing rank's file, InvalidArgument when the
// units do not match `unit_numel`.
absl::StatusOr<std::vector<UnitState>> ReadShardStates(const std::string& dir,
                                                       const std::vector<int64_t>& unit_numel);
// The RNG part of WriteActorState/ReadActorState alone (a sharded actor's rank 0 writes it).
absl::Status WriteRngState(const std::string& dir, const at::Generator& shuffle_generator,
                           int64_t nonfinite_steps_total);
absl::Status ReadRngState(const std::string& dir, at::Generator* shuffle_generator,
                          int64_t* nonfinite_steps_total);

// The fp32 master weights of a low-precision policy (master_weights.h), in their order.
absl::Status WriteMasterWeights(const std::string& dir, const std::vector<torch::Tensor>& masters);
// Reads them back into `masters` (same count and shapes): NotFound naming the file when it is
// missing, InvalidArgument when it does not fit.
absl::Status ReadMasterWeights(const std::string& dir, const std::vector<torch::Tensor>& masters);

}  // namespace rlmesh::trainer
