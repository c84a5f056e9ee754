// Full sharding of a policy across a trainer group (verl's FSDP backend, ZeRO-3): each of the
// W ranks holds 1/W of every unit's parameters, gradients, fp32 master weights and AdamW
// state. A unit (causal_lm.h, ParameterSharding: the root — embeddings, final norm, lm_head —
// or one decoder layer) is gathered from the shards just before the model computes with it
// and released right after; its gradients are reduce-scattered into the shards as soon as its
// backward is done. The optimizer steps on the shards only.
//
// Layout: a unit's parameters live in a few storages (a layer's q/k/v rows share one, its
// gate/up rows another); the unit's flat vector is those storages one after the other, padded
// with zeros to a multiple of W, and rank r holds elements [r x n, (r + 1) x n) of it, n =
// ceil(numel / W). Shard tensors are flat, so the optimizer's state is flat as well.
//
// Offload: with param_offload the parameter and gradient shards live in host memory and only
// a gathered unit is on the compute device; with optimizer_offload the fp32 masters and AdamW
// state live in host memory and the optimizer steps there. On a CPU trainer both are already
// in host memory and the options move nothing.
//
// Hybrid sharding (actor_rollout_ref.actor.fsdp_config.fsdp_size F between 1 and W): the
// shards span the F ranks of this rank's shard group (dist::Group::FormMesh), the W / F
// groups each hold the whole policy, and a gradient shard is reduce-scattered within the
// group and then summed across the groups that hold the same shard.
//
// Not thread-safe: the actor serializes its steps.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/causal_lm.h"

namespace rlmesh::dist {
class Group;
}  // namespace rlmesh::dist

namespace rlmesh::trainer {

struct FsdpOptions {
  bool param_offload = false;      // actor_rollout_ref.actor.fsdp_config.param_offload
  bool optimizer_offload = false;  // actor_rollout_ref.actor.fsdp_config.optimizer_offload
  // Gradients are accumulated over micro-batches and reduced in this dtype (mixed_precision).
  torch::Dtype reduce_dtype = torch::kFloat32;
  // False for a frozen model (the reference): no master weights, no gradients.
  bool trainable = true;
};

// Where each parameter of a unit sits in the unit's flat vector.
struct FlatUnit {
  std::vector<torch::Tensor> params;    // UnitParameters order
  std::vector<int64_t> param_offsets;   // element offset of each in the flat vector
  std::vector<torch::Tensor> storages;  // 1-D views of the unit's distinct storages, in order
  std::vector<int64_t> storage_offsets;
  int64_t numel = 0;  // without padding
};

// The flat layout of the given units' parameters. Fails when a storage is shared between
// units, when a unit mixes dtypes or devices, or when a parameter is not contiguous.
absl::StatusOr<std::vector<FlatUnit>> FlatLayout(
    const std::vector<std::vector<torch::Tensor>>& units);

class ShardedParameters : public model::ParameterSharding {
 public:
  // Takes over the parameters of `units` (usually CausalLmImpl::UnitParameters for each unit):
  // keeps this rank's slice of each and releases the whole storage. `group` is not owned and
  // outlives this object; null or a world of one keeps every unit whole in shards of one.
  static absl::StatusOr<std::shared_ptr<ShardedParameters>> Create(
      const std::vector<std::vector<torch::Tensor>>& units, dist::Group* group,
      const FsdpOptions& options);
  ~ShardedParameters() override = default;

  // model::ParameterSharding. Throw std::runtime_error when a collective fails.
  void Gather(int unit) override;
  void Release(int unit) override;
  void ReduceGradients(int unit, const std::vector<torch::Tensor>& grads) override;

  // After each backward pass: the root's gradients (in its parameters' .grad) are
  // reduce-scattered into its shard and cleared, and the root is released.
  void AfterBackward();
  void GatherAll();
  void ReleaseAll();

  // What the optimizer updates: one fp32 flat shard per unit, with .grad set by
  // FinishGradients.
  const std::vector<torch::Tensor>& masters() const { return masters_; }
  // Before the optimizer step: the masters' fp32 gradients from the accumulators.
  void FinishGradients();
  void ZeroGradients();
  // After the optimizer step: the parameter shards := the masters (rounded to their dtype).
  void CopyToParameters();
  // After whole weights were written into the gathered parameters (loading a checkpoint):
  // the shards (and masters) := this rank's slice of them.
  void CopyFromParameters();
  // Loading without gathering (no collective): each unit in turn is allocated whole, `fill`
  // writes the whole weights into its parameters (layout(u).params), this rank keeps its
  // slice as shards and masters, and the unit is released, so a rank holds one unit beyond its
  // shards. Stops at fill's first error (the units loaded before keep the new weights).
  absl::Status LoadUnitByUnit(const std::function<absl::Status(int unit)>& fill);

  // The shard group's size and this rank's place in it (the whole group without a mesh).
  int world_size() const { return world_; }
  int rank() const { return rank_; }
  // Shards are held by every replica; replica 0 writes them (checkpoints).
  int replica() const;
  int num_units() const { return static_cast<int>(units_.size()); }
  int64_t unit_numel(int unit) const { return units_[unit].layout.numel; }
  const FlatUnit& layout(int unit) const { return units_[unit].layout; }
  int64_t shard_numel(int unit) const { return units_[unit].shard_numel; }
  // This rank's slice of a unit's flat parameter vector: elements [rank() x shard_numel(unit),
  // (rank() + 1) x shard_numel(unit)), in the parameters' dtype. Writing into it (a frozen
  // model's new weights, received slice by slice) takes effect at the unit's next Gather.
  const torch::Tensor& param_shard(int unit) const { return units_[unit].param_shard; }
  // Bytes of this rank's parameter and gradient shards that are not masters() or their
  // gradients themselves.
  int64_t ShardBytes() const;
  // The sum of squares of the masters' gradients over the whole group, every rank's shard.
  absl::StatusOr<double> GlobalGradSquareSum();
  // The most units gathered at once since the last ResetPeakGathered (or creation).
  int peak_gathered_units() const { return peak_gathered_; }
  void ResetPeakGathered() { peak_gathered_ = gathered_now_; }
  dist::Group* group() const { return group_; }

 private:
  struct Unit {
    FlatUnit layout;
    int64_t shard_numel = 0;
    torch::Tensor param_shard;  // [shard_numel] in the parameters' dtype
    torch::Tensor grad_shard;   // [shard_numel] in the reduce dtype; undefined until a gradient
    // While gathered: the flat vector (padded) the unit's storages point into.
    torch::Tensor buffer;
    bool gathered = true;
  };
  ShardedParameters(std::vector<Unit> units, dist::Group* group, int rank, int world,
                    const FsdpOptions& options);
  // Flat buffers for gathered units and gradients, kept for reuse as a caching allocator
  // keeps its blocks: every layer of a model has the same size, so the same few buffers serve
  // every gather of a step, and memory does not depend on where the heap places each one.
  torch::Tensor TakeBuffer(int64_t numel, torch::ScalarType dtype, torch::Device device);
  void ReturnBuffer(torch::Tensor buffer);
  // Points the unit's storages into unit.buffer and counts it gathered.
  void PointStorages(Unit& unit);
  // Whether the group's collectives run on `device` itself (NCCL on a GPU); otherwise units
  // and gradients go through host memory for them (Gloo).
  bool OnDevice(const torch::Device& device) const;

  std::vector<Unit> units_;
  int gathered_now_ = 0;
  int peak_gathered_ = 0;
  std::vector<torch::Tensor> masters_;       // fp32; the param shard itself when that is fp32
  std::vector<torch::Tensor> free_buffers_;  // TakeBuffer / ReturnBuffer
  dist::Group* const group_;
  const int rank_;
  const int world_;
  const FsdpOptions options_;
};

// Loads the Hugging Face folder `dir` (model.safetensors or its shards, checked against
// `model`'s config first) into `sharded`, one unit at a time (LoadUnitByUnit): a rank never
// holds more of the weights than its shards and one unit. `model` is the network whose
// parameters `sharded` took over. No collective: each rank reads what it keeps.
absl::Status LoadFolderUnitByUnit(ShardedParameters& sharded, const model::CausalLmImpl& model,
                                  const std::string& dir);

// A policy read from a Hugging Face folder, whole or sharded.
struct LoadedPolicy {
  std::shared_ptr<model::CausalLmImpl> model;
  std::shared_ptr<ShardedParameters> sharded;  // null when whole
};

// The policy of the Hugging Face folder `dir`. Without `fsdp`, whole: read at once. With it,
// sharded over `group` (its mesh's shard group when formed; null: shards of one rank): the
// network is allocated without being written, cut into shards, and each unit read in turn
// (LoadFolderUnitByUnit), so a rank never holds the whole policy, as FSDP starts from a
// meta-device model.
absl::StatusOr<LoadedPolicy> LoadPolicy(const std::string& dir,
                                        const model::CausalLmOptions& options, dist::Group* group,
                                        const std::optional<FsdpOptions>& fsdp);

// Writes the whole policy as a Hugging Face folder (model::SavePretrained into `dir`, the
// tokenizer files from `tokenizer_dir`) while gathering it one unit at a time, in the order
// `model`'s parameters are written: the root from its first tensor to the end, each decoder
// layer only while its tensors are written, so no rank holds more than the root and one layer
// beyond its shards. A collective of the shard group: each of its ranks calls it, and the one
// with `write` writes (the others take part in the gathers; a failed write still completes
// them). Every unit is released afterwards.
absl::Status SaveGatheredUnitByUnit(ShardedParameters& sharded, const model::CausalLmImpl& model,
                                    const std::string& dir, const std::string& tokenizer_dir,
                                    bool write);

}  // namespace rlmesh::trainer
