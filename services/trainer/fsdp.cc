#include "services/trainer/fsdp.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dist/group.h"
#include "common/model/pretrained.h"
#include "common/model/safetensors.h"
#include "common/model/safetensors_reader.h"
#include "common/status/status_macros.h"

namespace rlmesh::trainer {
namespace {

c10::StorageImpl* StorageOf(const torch::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }

// Points the storage of `view` (a 1-D view of the whole storage) at `bytes` bytes from
// `data`, memory the storage does not own (a unit's gathered buffer).
void PointAt(const torch::Tensor& view, void* data, size_t bytes) {
  c10::StorageImpl* impl = StorageOf(view);
  impl->set_data_ptr_noswap(at::DataPtr(data, impl->device()));
  impl->set_nbytes(bytes);
}

// Frees (or lets go of) the storage's memory; the tensors on it keep their shapes and must
// not be read.
void Free(const torch::Tensor& view) {
  c10::StorageImpl* impl = StorageOf(view);
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, impl->device()));
  impl->set_nbytes(0);
}

// Elements [begin, begin + out.numel()) of the unit's flat vector (its storages one after the
// other, zeros beyond them) into `out`, reading only the storages' part in that range.
void CutShard(const FlatUnit& unit, int64_t begin, const torch::Tensor& out) {
  out.zero_();
  const int64_t end = begin + out.numel();
  for (size_t i = 0; i < unit.storages.size(); ++i) {
    const int64_t from = std::max(begin, unit.storage_offsets[i]);
    const int64_t to = std::min(end, unit.storage_offsets[i] + unit.storages[i].numel());
    if (from >= to) continue;
    out.narrow(0, from - begin, to - from)
        .copy_(unit.storages[i].narrow(0, from - unit.storage_offsets[i], to - from));
  }
}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw std::runtime_error(std::string(status.message()));
}

}  // namespace

absl::StatusOr<std::vector<FlatUnit>> FlatLayout(
    const std::vector<std::vector<torch::Tensor>>& units) {
  std::set<c10::StorageImpl*> seen;
  std::vector<FlatUnit> layout;
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < units.size(); ++u) {
    FlatUnit unit;
    std::set<c10::StorageImpl*> mine;
    std::vector<int64_t> base;  // of each storage of this unit, by position in `storages`
    for (const torch::Tensor& p : units[u]) {
      if (!p.is_contiguous()) {
        return absl::InvalidArgumentError(
            absl::StrCat("sharding unit ", u, ": a parameter is not contiguous"));
      }
      if (!unit.params.empty() && (p.scalar_type() != unit.params[0].scalar_type() ||
                                   p.device() != unit.params[0].device())) {
        return absl::InvalidArgumentError(
            absl::StrCat("sharding unit ", u, ": parameters of several dtypes or devices"));
      }
      c10::StorageImpl* impl = StorageOf(p);
      if (!mine.count(impl)) {
        if (seen.count(impl)) {
          return absl::InvalidArgumentError(
              absl::StrCat("sharding unit ", u, ": shares a storage with an earlier unit"));
        }
        seen.insert(impl);
        mine.insert(impl);
        const int64_t numel = static_cast<int64_t>(impl->nbytes()) / p.element_size();
        unit.storages.push_back(
            torch::empty({0}, p.options().requires_grad(false)).set_(p.storage(), 0, {numel}, {1}));
        unit.storage_offsets.push_back(unit.numel);
        unit.numel += numel;
      }
      size_t which = 0;
      while (StorageOf(unit.storages[which]) != impl) ++which;
      unit.params.push_back(p);
      unit.param_offsets.push_back(unit.storage_offsets[which] + p.storage_offset());
    }
    layout.push_back(std::move(unit));
  }
  return layout;
}

absl::StatusOr<std::shared_ptr<ShardedParameters>> ShardedParameters::Create(
    const std::vector<std::vector<torch::Tensor>>& units, dist::Group* group,
    const FsdpOptions& options) {
  if (options.reduce_dtype != torch::kFloat32 && options.reduce_dtype != torch::kBFloat16) {
    return absl::InvalidArgumentError("sharding: the reduce dtype must be float32 or bfloat16");
  }
  auto layout = FlatLayout(units);
  if (!layout.ok()) return layout.status();
  // Hybrid sharding (Group::FormMesh): the shards span this rank's shard group only.
  const int world = group != nullptr ? group->shard_size() : 1;
  const int rank = group != nullptr ? group->shard_rank() : 0;
  std::vector<Unit> sharded;
  torch::NoGradGuard no_grad;
  for (FlatUnit& flat : *layout) {
    if (flat.params.empty()) return absl::InvalidArgumentError("sharding: a unit is empty");
    Unit unit;
    unit.shard_numel = (flat.numel + world - 1) / world;
    const torch::Device device =
        options.param_offload ? torch::Device(torch::kCPU) : flat.params[0].device();
    // Only this rank's part of the storages is read, so storage that was never written (a
    // network allocated for loading) is never touched beyond it.
    unit.param_shard =
        torch::empty({unit.shard_numel},
                     torch::TensorOptions().dtype(flat.params[0].scalar_type()).device(device));
    CutShard(flat, rank * unit.shard_numel, unit.param_shard);
    unit.layout = std::move(flat);
    sharded.push_back(std::move(unit));
  }
  auto result = std::shared_ptr<ShardedParameters>(
      new ShardedParameters(std::move(sharded), group, rank, world, options));
  result->ReleaseAll();
  return result;
}

ShardedParameters::ShardedParameters(std::vector<Unit> units, dist::Group* group, int rank,
                                     int world, const FsdpOptions& options)
    : units_(std::move(units)), group_(group), rank_(rank), world_(world), options_(options) {
  // Whole until Create releases them.
  gathered_now_ = peak_gathered_ = static_cast<int>(units_.size());
  torch::NoGradGuard no_grad;
  if (!options_.trainable) return;
  for (Unit& unit : units_) {
    const torch::Device where =
        options_.optimizer_offload ? torch::Device(torch::kCPU) : unit.param_shard.device();
    if (unit.param_shard.scalar_type() == torch::kFloat32 && unit.param_shard.device() == where) {
      masters_.push_back(unit.param_shard);  // the optimizer updates the shard itself
    } else {
      masters_.push_back(unit.param_shard.to(where, torch::kFloat32).clone());
    }
    masters_.back().requires_grad_(true);
  }
}

torch::Tensor ShardedParameters::TakeBuffer(int64_t numel, torch::ScalarType dtype,
                                            torch::Device device) {
  for (auto it = free_buffers_.begin(); it != free_buffers_.end(); ++it) {
    if (it->numel() == numel && it->scalar_type() == dtype && it->device() == device) {
      torch::Tensor buffer = std::move(*it);
      free_buffers_.erase(it);
      return buffer;
    }
  }
  return torch::empty({numel}, torch::TensorOptions().dtype(dtype).device(device));
}

void ShardedParameters::ReturnBuffer(torch::Tensor buffer) {
  free_buffers_.push_back(std::move(buffer));
}

void ShardedParameters::PointStorages(Unit& unit) {
  const torch::Tensor& buffer = unit.buffer;
  auto* base = static_cast<char*>(buffer.data_ptr());
  for (size_t i = 0; i < unit.layout.storages.size(); ++i) {
    const torch::Tensor& view = unit.layout.storages[i];
    PointAt(view, base + unit.layout.storage_offsets[i] * buffer.element_size(),
            static_cast<size_t>(view.numel()) * buffer.element_size());
  }
  unit.gathered = true;
  peak_gathered_ = std::max(peak_gathered_, ++gathered_now_);
}

bool ShardedParameters::OnDevice(const torch::Device& device) const {
  return group_ != nullptr && group_->device_collectives() && device.is_cuda();
}

void ShardedParameters::Gather(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (unit.gathered) return;
  torch::NoGradGuard no_grad;
  const auto dtype = unit.param_shard.scalar_type();
  const torch::Device device = unit.layout.storages[0].device();
  unit.buffer = TakeBuffer(unit.shard_numel * world_, dtype, device);
  if (group_ != nullptr) {
    // Over NCCL a unit on its GPU is gathered there; otherwise the collectives run on host
    // memory, and a unit on another device is gathered there first.
    const bool on_device = OnDevice(device) && unit.param_shard.device() == device;
    torch::Tensor whole =
        on_device || device.is_cpu()
            ? unit.buffer
            : torch::empty_like(unit.buffer, torch::TensorOptions().device(torch::kCPU));
    ThrowIfError(group_->AllGather(
        on_device ? unit.param_shard : unit.param_shard.to(torch::kCPU).contiguous(), whole,
        absl::StrCat("gathering sharding unit ", u), dist::Scope::kShard));
    if (!whole.is_same(unit.buffer)) unit.buffer.copy_(whole);
  } else {
    unit.buffer.copy_(unit.param_shard);
  }
  PointStorages(unit);
}

void ShardedParameters::Release(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (!unit.gathered) return;
  for (const torch::Tensor& view : unit.layout.storages) Free(view);
  if (unit.buffer.defined()) ReturnBuffer(std::move(unit.buffer));
  unit.buffer = torch::Tensor();
  unit.gathered = false;
  --gathered_now_;
}

void ShardedParameters::GatherAll() {
  for (int u = 0; u < num_units(); ++u) Gather(u);
}

void ShardedParameters::ReleaseAll() {
  for (int u = 0; u < num_units(); ++u) Release(u);
}

// The flat gradient of `grads` (UnitParameters order) reduce-scattered into the shard.
void ShardedParameters::ReduceGradients(int u, const std::vector<torch::Tensor>& grads) {
  Unit& unit = units_[static_cast<size_t>(u)];
  torch::NoGradGuard no_grad;
  // Over NCCL the gradients are reduced on their GPU, otherwise in host memory.
  const torch::Device grads_on = unit.layout.storages[0].device();
  const torch::Device where = OnDevice(grads_on) ? grads_on : torch::Device(torch::kCPU);
  const auto options = torch::TensorOptions().dtype(options_.reduce_dtype).device(where);
  torch::Tensor whole = TakeBuffer(unit.shard_numel * world_, options_.reduce_dtype, where);
  whole.zero_();
  for (size_t i = 0; i < unit.layout.params.size() && i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    whole.narrow(0, unit.layout.param_offsets[i], grads[i].numel())
        .copy_(grads[i].reshape({-1}).to(where));
  }
  auto mine = torch::empty({unit.shard_numel}, options);
  if (group_ != nullptr) {
    ThrowIfError(group_->ReduceScatterSum(
        whole, mine, absl::StrCat("reducing the gradients of sharding unit ", u),
        dist::Scope::kShard));
    // Hybrid: the shard's sum over this shard group, then over the groups holding the same
    // shard, so every replica of it has the whole group's gradient.
    if (group_->replicas() > 1) {
      ThrowIfError(group_->AllReduceSum(
          {mine}, absl::StrCat("reducing the gradients of sharding unit ", u, " across replicas"),
          dist::Scope::kReplicate));
    }
  } else {
    mine.copy_(whole);
  }
  ReturnBuffer(std::move(whole));
  const torch::Device device = unit.param_shard.device();
  if (unit.grad_shard.defined()) {
    unit.grad_shard.add_(mine.to(device));
  } else {
    unit.grad_shard = mine.to(device);
  }
}

void ShardedParameters::AfterBackward() {
  Unit& root = units_[0];
  if (root.gathered) {
    std::vector<torch::Tensor> grads;
    for (torch::Tensor& p : root.layout.params) {
      grads.push_back(p.grad());
      p.mutable_grad() = torch::Tensor();
    }
    ReduceGradients(0, grads);
  }
  ReleaseAll();
}

void ShardedParameters::FinishGradients() {
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    const torch::Tensor& g = units_[u].grad_shard;
    // An fp32 accumulator where the master lives is the master's gradient itself.
    masters_[u].mutable_grad() =
        g.defined() ? g.to(masters_[u].device(), torch::kFloat32) : torch::zeros_like(masters_[u]);
  }
}

void ShardedParameters::ZeroGradients() {
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    // Kept and zeroed rather than dropped: made anew, the accumulators would be allocated in
    // the middle of the next backward's transient tensors and outlive them, leaving holes in
    // the heap that grow it step after step.
    if (units_[u].grad_shard.defined()) units_[u].grad_shard.zero_();
    masters_[u].mutable_grad() = torch::Tensor();
    for (torch::Tensor& p : units_[u].layout.params) p.mutable_grad() = torch::Tensor();
  }
}

void ShardedParameters::CopyToParameters() {
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!masters_[u].is_same(units_[u].param_shard)) units_[u].param_shard.copy_(masters_[u]);
  }
}

void ShardedParameters::CopyFromParameters() {
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    TORCH_CHECK(unit.gathered, "CopyFromParameters: unit ", u, " is not gathered");
    CutShard(unit.layout, rank_ * unit.shard_numel, unit.param_shard);
    if (!masters_[u].is_same(unit.param_shard)) masters_[u].copy_(unit.param_shard);
  }
}

absl::Status ShardedParameters::LoadUnitByUnit(const std::function<absl::Status(int unit)>& fill) {
  torch::NoGradGuard no_grad;
  for (int u = 0; u < num_units(); ++u) {
    Unit& unit = units_[static_cast<size_t>(u)];
    if (!unit.gathered) {
      unit.buffer = TakeBuffer(unit.shard_numel * world_, unit.param_shard.scalar_type(),
                               unit.layout.storages[0].device());
      PointStorages(unit);
    }
    absl::Status status = fill(u);
    if (status.ok()) {
      CutShard(unit.layout, rank_ * unit.shard_numel, unit.param_shard);
      if (static_cast<size_t>(u) < masters_.size() && !masters_[u].is_same(unit.param_shard)) {
        masters_[u].copy_(unit.param_shard);
      }
    }
    Release(u);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

int ShardedParameters::replica() const { return group_ != nullptr ? group_->replica() : 0; }

int64_t ShardedParameters::ShardBytes() const {
  int64_t bytes = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& unit = units_[u];
    const bool master = u < masters_.size() && masters_[u].is_same(unit.param_shard);
    if (!master) bytes += unit.param_shard.nbytes();
    if (unit.grad_shard.defined() &&
        !(u < masters_.size() && unit.grad_shard.is_same(masters_[u].grad()))) {
      bytes += unit.grad_shard.nbytes();
    }
  }
  return bytes;
}

absl::StatusOr<double> ShardedParameters::GlobalGradSquareSum() {
  double local = 0;
  for (const torch::Tensor& m : masters_) {
    if (m.grad().defined()) local += m.grad().to(torch::kFloat64).square().sum().item<double>();
  }
  auto sum = torch::tensor({local}, torch::kFloat64);
  if (group_ != nullptr) {
    // Over one shard group: the others hold the same shards.
    absl::Status status =
        group_->AllReduceSum({sum}, "summing the gradient norm", dist::Scope::kShard);
    if (!status.ok()) return status;
  }
  return sum.item<double>();
}

absl::Status LoadFolderUnitByUnit(ShardedParameters& sharded, const model::CausalLmImpl& model,
                                  const std::string& dir) {
  ASSIGN_OR_RETURN(auto reader, model::SafetensorsReader::Open(dir));
  RETURN_IF_ERROR(reader->ValidateAgainst(model.config()));
  std::map<const c10::TensorImpl*, std::string> names;
  for (const auto& item : model.named_parameters()) {
    names[item.value().unsafeGetTensorImpl()] = item.key();
  }
  try {
    return sharded.LoadUnitByUnit([&](int u) -> absl::Status {
      torch::NoGradGuard no_grad;
      for (const torch::Tensor& p : sharded.layout(u).params) {
        const std::string& name = names.at(p.unsafeGetTensorImpl());
        ASSIGN_OR_RETURN(torch::Tensor saved, model::ReadTensor(*reader, name, p.scalar_type()));
        const_cast<torch::Tensor&>(p).copy_(saved);
      }
      return absl::OkStatus();
    });
  } catch (const std::exception& e) {
    sharded.ReleaseAll();
    return absl::InternalError(absl::StrCat("loading ", dir, " into the shards: ", e.what()));
  }
}

absl::StatusOr<LoadedPolicy> LoadPolicy(const std::string& dir,
                                        const model::CausalLmOptions& options, dist::Group* group,
                                        const std::optional<FsdpOptions>& fsdp) {
  LoadedPolicy policy;
  if (!fsdp.has_value()) {
    ASSIGN_OR_RETURN(policy.model, model::LoadPretrained(dir, options));
    return policy;
  }
  ASSIGN_OR_RETURN(
      model::ModelConfig config,
      model::ModelConfig::FromFile((std::filesystem::path(dir) / "config.json").string()));
  ASSIGN_OR_RETURN(policy.model, model::CausalLmImpl::CreateUninitialized(config, options));
  std::vector<std::vector<torch::Tensor>> units;
  for (int u = 0; u < policy.model->NumUnits(); ++u) {
    units.push_back(policy.model->UnitParameters(u));
  }
  ASSIGN_OR_RETURN(policy.sharded, ShardedParameters::Create(units, group, *fsdp));
  policy.model->SetSharding(policy.sharded.get());
  RETURN_IF_ERROR(LoadFolderUnitByUnit(*policy.sharded, *policy.model, dir));
  return policy;
}

absl::Status SaveGatheredUnitByUnit(ShardedParameters& sharded, const model::CausalLmImpl& model,
                                    const std::string& dir, const std::string& tokenizer_dir,
                                    bool write) {
  // The units in the order their tensors are written: the same on every rank.
  std::map<const c10::TensorImpl*, int> unit_of;
  for (int u = 0; u < sharded.num_units(); ++u) {
    for (const torch::Tensor& p : sharded.layout(u).params) unit_of[p.unsafeGetTensorImpl()] = u;
  }
  std::vector<int> order;
  std::vector<bool> listed(static_cast<size_t>(sharded.num_units()), false);
  for (const auto& item : model.named_parameters()) {
    auto it = unit_of.find(item.value().unsafeGetTensorImpl());
    if (it == unit_of.end()) {
      return absl::InternalError(
          absl::StrCat("saving: parameter ", item.key(), " is in no sharding unit"));
    }
    if (!listed[static_cast<size_t>(it->second)]) {
      listed[static_cast<size_t>(it->second)] = true;
      order.push_back(it->second);
    }
  }
  if (order.size() != static_cast<size_t>(sharded.num_units())) {
    return absl::InternalError("saving: a sharding unit holds none of the model's parameters");
  }
  // Gathers the units of `order` up to and including `until` (all: -1); a decoder layer is
  // released when the next one is gathered, the root stays.
  size_t next = 0;
  int held = -1;
  auto advance = [&](int until) {
    while (next < order.size()) {
      const int u = order[next++];
      if (u != 0 && held >= 0) sharded.Release(held);
      sharded.Gather(u);
      if (u != 0) held = u;
      if (u == until) return;
    }
  };
  absl::Status status;
  try {
    if (write) {
      model::SaveOptions options;
      options.fetch = [&](const std::string&,
                          const torch::Tensor& param) -> absl::StatusOr<torch::Tensor> {
        const int u = unit_of.at(param.unsafeGetTensorImpl());
        const auto at = std::find(order.begin(), order.end(), u) - order.begin();
        if (static_cast<size_t>(at) >= next) advance(u);
        return param;
      };
      status = model::SavePretrained(model, dir, tokenizer_dir, options);
    }
    advance(-1);  // the others' gathers, and the rest of them after a failed write
    sharded.ReleaseAll();
  } catch (const std::exception& e) {
    sharded.ReleaseAll();
    return absl::InternalError(absl::StrCat("gathering the weights to save: ", e.what()));
  }
  return status;
}

}  // namespace rlmesh::trainer
