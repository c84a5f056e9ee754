#include "common/config/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace rlmesh::config {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Elements one decoder layer keeps for backward per token, attention probabilities aside:
// input norm in and out (2H), q/k/v projections (Q + 2KV), q and k after RoPE (Q + KV),
// attention output (Q), o_proj output (H), post-attention norm in and out (2H), MLP gate, up,
// silu(gate) and their product (4I), down projection (H): 6H + 3Q + 3KV + 4I.
double LayerElementsPerToken(const model::ModelConfig& m) {
  const double h = static_cast<double>(m.hidden_size);
  const double q = static_cast<double>(m.num_attention_heads * m.head_dim);
  const double kv = static_cast<double>(m.num_key_value_heads * m.head_dim);
  const double i = static_cast<double>(m.intermediate_size);
  return 6 * h + 3 * q + 3 * kv + 4 * i;
}

// The GPUs of `all` (nvidia-smi's order) that CUDA_VISIBLE_DEVICES = `visible` leaves a process,
// as CUDA reads it: unset, all of them; empty, none; indices, those, up to the first one that
// is not a GPU. Names (GPU-<uuid>, MIG-...) cannot be matched to nvidia-smi's lines here: all.
std::vector<double> VisibleGpus(const std::vector<double>& all, const char* visible) {
  if (visible == nullptr) return all;
  std::vector<double> kept;
  for (absl::string_view entry : absl::StrSplit(visible, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    int index = -1;
    if (!absl::SimpleAtoi(entry, &index)) {
      if (entry.empty()) break;
      return all;
    }
    if (index < 0 || index >= static_cast<int>(all.size())) break;
    kept.push_back(all[index]);
  }
  return kept;
}

}  // namespace

Layout LayoutOf(const Config& config) {
  Layout layout;
  const auto& megatron = config.actor_rollout_ref.actor.megatron;
  layout.devices = config.trainer.n_gpus_per_node * config.trainer.nnodes;
  layout.tp = megatron.tensor_model_parallel_size;
  layout.pp = megatron.pipeline_model_parallel_size;
  layout.ep = megatron.expert_model_parallel_size;
  layout.dp = std::max<int64_t>(1, layout.devices / (layout.tp * layout.pp));
  layout.rollout_tp = config.actor_rollout_ref.rollout.tensor_model_parallel_size;
  return layout;
}

int64_t TrainMicroBatch(const Config& config, const Layout& layout) {
  const auto& actor = config.actor_rollout_ref.actor;
  if (actor.ppo_micro_batch_size_per_gpu.has_value()) return *actor.ppo_micro_batch_size_per_gpu;
  // verl's older global micro-batch, divided by the ranks.
  if (actor.ppo_micro_batch_size.has_value()) {
    return std::max<int64_t>(1, *actor.ppo_micro_batch_size / layout.dp);
  }
  return std::max<int64_t>(
      1, actor.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n / layout.dp);
}

int64_t WeightBytes(const Config& config) { return config.rlmesh.dtype == "bfloat16" ? 2 : 4; }

MemoryEstimate EstimateMemory(const Config& config, const ModelShape& shape, bool offload_param,
                              bool offload_optimizer) {
  const Layout layout = LayoutOf(config);
  const model::ModelConfig& m = shape.model;
  const double s = static_cast<double>(WeightBytes(config));
  const double tp = static_cast<double>(layout.tp);
  const double pp = static_cast<double>(layout.pp);
  const double seq =
      static_cast<double>(config.data.max_prompt_length + config.data.max_response_length);
  const double vocab = static_cast<double>(m.vocab_size);
  const double layers_here = static_cast<double>((m.num_hidden_layers + layout.pp - 1) / layout.pp);

  // Parameters on one trainer device: dense weights split by TP x PP, experts by EP x PP.
  const double dense = static_cast<double>(shape.total_params - shape.expert_params);
  const double params =
      dense / (tp * pp) + static_cast<double>(shape.expert_params) / (layout.ep * pp);
  // The sharded trainer (fsdp.h: fsdp_size -1 over several ranks, or any offload) keeps 1/F
  // of the parameters, gradients and optimizer state per rank, F the ranks of a shard group
  // (all W, or fsdp_size for hybrid sharding), and gathers the root (the embeddings /
  // lm_head, kept for a whole forward and backward) plus one decoder layer at a time. With
  // parameter offload only that gathered part is on the device.
  const auto& fsdp = config.actor_rollout_ref.actor.fsdp_config;
  const bool sharded = (layout.dp > 1 && fsdp.fsdp_size != 1) || offload_param || offload_optimizer;
  const int64_t shard_group =
      fsdp.fsdp_size > 0 ? std::min<int64_t>(fsdp.fsdp_size, layout.dp) : layout.dp;
  const double ranks = sharded ? static_cast<double>(shard_group) : 1.0;
  const double shard = params / ranks;
  const double gathered =
      std::min(params, static_cast<double>(shape.embedding_params + shape.layer_params) / tp);
  const auto& reduce = fsdp.mixed_precision.reduce_dtype;
  const double r = reduce.has_value() && (*reduce == "bf16" || *reduce == "bfloat16") ? 2 : 4;

  MemoryEstimate e;
  e.offload_param = offload_param;
  e.offload_optimizer = offload_optimizer;
  auto add = [&e](std::string name, double full, bool offloaded, double resident) {
    MemoryItem item{std::move(name), offloaded ? resident : full, offloaded ? full - resident : 0};
    e.device_total += item.bytes;
    e.host_total += item.host_bytes;
    e.items.push_back(std::move(item));
  };

  // AdamW: two fp32 moments, plus fp32 master weights when training in bfloat16.
  const double optimizer_bytes_per_param = 8 + (s == 2 ? 4 : 0);
  if (sharded) {
    add(absl::StrCat("trainer parameters (1/", ranks, " shard + gathered root and layer)"),
        (shard + gathered) * s, offload_param, gathered * s);
    // The reduce-dtype shard accumulates; a unit's whole gradient exists until it is
    // reduce-scattered.
    add(absl::StrCat("trainer gradients (1/", ranks, " shard + one unit's)"),
        shard * r + gathered * r, offload_param, gathered * r);
    add(absl::StrCat("trainer optimizer state (AdamW, 1/", ranks, " shard)"),
        shard * optimizer_bytes_per_param, offload_optimizer, 0);
  } else {
    add("trainer parameters", params * s, false, params * s);
    add("trainer gradients", params * s, false, params * s);
    add("trainer optimizer state (AdamW)", params * optimizer_bytes_per_param, false, 0);
  }

  const double micro = static_cast<double>(TrainMicroBatch(config, layout));
  const double heads = static_cast<double>(m.num_attention_heads);
  // One layer's saved activations for one sequence; attention keeps scores and
  // probabilities ([heads, T, T] each).
  const double layer_per_seq = seq * (LayerElementsPerToken(m) + 2 * heads * seq) * s / tp;
  double activations = 0;
  if (config.actor_rollout_ref.model.enable_gradient_checkpointing) {
    // Each layer's input is kept; one layer at a time is recomputed in full.
    activations = micro * (layers_here * seq * m.hidden_size * s / tp + layer_per_seq);
  } else {
    activations = micro * layers_here * layer_per_seq;
  }
  add(absl::StrCat("trainer activations (micro-batch ", micro, " x ", seq, " tokens)"), activations,
      false, activations);
  // Logits in the compute dtype, their fp32 log-softmax, and its gradient.
  const double logits = micro * seq * vocab * (s + 8) / tp;
  add(absl::StrCat("trainer logits [", micro, ", ", seq, ", ", m.vocab_size, "]"), logits, false,
      logits);
  // Old log-probs: a forward without autograd over rollout.log_prob_micro_batch_size_per_gpu
  // sequences (one layer's activations at a time, logits and their fp32 log-softmax). It runs
  // before the update and its memory is freed for the update's activations and logits to
  // reuse (the services use one malloc arena), so only what it needs beyond them counts.
  const auto& old_micro_key = config.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu;
  const double old_micro = old_micro_key.has_value() ? static_cast<double>(*old_micro_key) : micro;
  const double old_forward = old_micro * (layer_per_seq + seq * vocab * (s + 4) / tp);
  const double old_beyond = std::max(0.0, old_forward - activations - logits);
  add(absl::StrCat("trainer old log-prob forward beyond the update (micro-batch ", old_micro, ")"),
      old_beyond, false, old_beyond);
  // Publishing hands the parameters over one unit at a time (a sharded trainer's gathered
  // unit is the one counted with its parameters): shared memory (and the TCP chain's sender)
  // holds the whole version in its segment; inline gRPC two buckets in flight (the message and its
  // serialized copy); NCCL a snapshot of the whole parameters (it reads them again to catch up late
  // joiners) and two buckets (double buffering); CUDA IPC the snapshot alone (the replicas copy
  // from it in place).
  const double weight_bytes = params * s;
  const double bucket =
      std::min(weight_bytes, static_cast<double>(config.rlmesh.weight_sync.bucket_bytes));
  const std::string& transport = config.rlmesh.weight_sync.transport;
  double staging = 2 * bucket;
  const char* what = "grpc buckets";
  if (transport == "shm" || transport == "tcp") {
    staging = weight_bytes;
    what = transport == "shm" ? "shm segment" : "tcp sender's copy";
  } else if (transport == "nccl") {
    staging = weight_bytes + 2 * bucket;
    what = "nccl snapshot + buckets";
  } else if (transport == "cuda_ipc") {
    staging = weight_bytes;  // the snapshot the replicas copy from; no buckets
    what = "cuda_ipc snapshot";
  }
  add(absl::StrCat("trainer weight-sync staging (", what, ")"), staging, false, staging);

  // The reference holds its whole model, or in a group of rlmesh.reference.world_size R
  // ranks 1/R of it plus the unit of its forward (the root and one layer); with
  // ref.fsdp_config.param_offload only that gathered unit is on the device.
  const bool ref_offload = config.actor_rollout_ref.ref.fsdp_config.param_offload;
  const int64_t ref_ranks = std::max<int64_t>(1, config.rlmesh.reference.world_size);
  if (ref_ranks > 1) {
    const double ref_held = (params / static_cast<double>(ref_ranks) + gathered) * s;
    add(absl::StrCat("reference parameters (1/", ref_ranks, " shard + gathered root and layer)"),
        ref_held, ref_offload, gathered * s);
  } else {
    add("reference parameters", params * s, ref_offload, gathered * s);
  }
  const auto& ref_micro_key = config.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu;
  const double ref_micro = ref_micro_key.has_value() ? static_cast<double>(*ref_micro_key) : micro;
  // No autograd: one layer's activations at a time, plus logits and their fp32 log-softmax.
  const double ref_forward = ref_micro * (layer_per_seq + seq * vocab * (s + 4) / tp);
  add(absl::StrCat("reference forward (micro-batch ", ref_micro, ")"), ref_forward, false,
      ref_forward);

  const double rollout_tp = static_cast<double>(layout.rollout_tp);
  add("rollout parameters", static_cast<double>(shape.total_params) * s / rollout_tp, false, 0);
  const double kv_cache = static_cast<double>(config.actor_rollout_ref.rollout.max_num_seqs) * seq *
                          m.num_hidden_layers * 2 * m.num_key_value_heads * m.head_dim * s /
                          rollout_tp;
  add(absl::StrCat("rollout KV cache (", config.actor_rollout_ref.rollout.max_num_seqs,
                   " sequences x ", seq, " tokens)"),
      kv_cache, false, kv_cache);
  if (config.rlmesh.device == "cpu") {
    // On CPU every process's runtime lives in the same memory: LibTorch, OpenBLAS and gRPC
    // code and buffers, measured as the resident set of an idle service process.
    add("process runtime (LibTorch + OpenBLAS + gRPC) x 3 processes", 3 * kCpuProcessRuntimeBytes,
        false, 3 * kCpuProcessRuntimeBytes);
  }
  return e;
}

namespace {

double TrainerItemBytes(const MemoryEstimate& estimate, bool staging) {
  double bytes = 0;
  for (const MemoryItem& item : estimate.items) {
    if (item.name.rfind("trainer ", 0) != 0) continue;
    if (!staging && item.name.rfind("trainer weight-sync staging", 0) == 0) continue;
    bytes += item.bytes;
  }
  return bytes;
}

}  // namespace

double TrainerTensorBytes(const MemoryEstimate& estimate) {
  return TrainerItemBytes(estimate, /*staging=*/false);
}

double TrainerProcessBytes(const Config& config, const MemoryEstimate& estimate) {
  return TrainerItemBytes(estimate, /*staging=*/true) +
         (config.rlmesh.device == "cpu" ? kCpuProcessRuntimeBytes : 0.0);
}

DeviceCapacity DetectCapacity(const Config& config, const std::string& meminfo_path,
                              const std::string& gpu_query) {
  DeviceCapacity capacity;
  if (config.rlmesh.device_memory_gb > 0) {
    capacity.bytes = config.rlmesh.device_memory_gb * kGiB;
    capacity.source = "rlmesh.device_memory_gb";
    return capacity;
  }
  if (config.rlmesh.device == "cpu") {
    std::ifstream in(meminfo_path);
    std::string line;
    while (std::getline(in, line)) {
      absl::string_view rest = line;
      if (!absl::ConsumePrefix(&rest, "MemTotal:")) continue;
      rest = absl::StripAsciiWhitespace(rest);
      int64_t kib = 0;
      if (absl::ConsumeSuffix(&rest, "kB") &&
          absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib) && kib > 0) {
        const int64_t ranks = config.trainer.n_gpus_per_node;
        capacity.bytes = static_cast<double>(kib) * 1024 / static_cast<double>(ranks);
        capacity.source = ranks == 1 ? absl::StrCat(meminfo_path, " MemTotal")
                                     : absl::StrCat(meminfo_path, " MemTotal / ", ranks,
                                                    " ranks (trainer.n_gpus_per_node)");
      }
      break;
    }
    return capacity;
  }
  // cuda: ask the driver's tool; no CUDA runtime is linked into the dry-run.
  std::vector<double> gpus_mib;
  if (FILE* pipe = popen(gpu_query.c_str(), "r")) {
    char buffer[64] = {};
    double mib = 0;
    while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) {
      if (absl::SimpleAtod(absl::StripAsciiWhitespace(buffer), &mib) && mib > 0) {
        gpus_mib.push_back(mib);
      }
    }
    pclose(pipe);
  }
  gpus_mib = VisibleGpus(gpus_mib, std::getenv("CUDA_VISIBLE_DEVICES"));
  if (gpus_mib.empty()) return capacity;
  const int64_t gpus = static_cast<int64_t>(gpus_mib.size());
  const int64_t ranks = std::max<int64_t>(1, config.trainer.n_gpus_per_node);
  const int64_t per_gpu = (ranks + gpus - 1) / gpus;  // the most ranks one GPU holds
  capacity.bytes = *std::min_element(gpus_mib.begin(), gpus_mib.end()) * 1024 * 1024 /
                   static_cast<double>(per_gpu);
  capacity.source = gpus == 1
                        ? "nvidia-smi memory.total of GPU 0"
                        : absl::StrCat("nvidia-smi memory.total, the smallest of ", gpus, " GPUs");
  if (per_gpu > 1) {
    absl::StrAppend(&capacity.source, " / ", per_gpu, " ranks sharing a GPU (", ranks,
                    " ranks, trainer.n_gpus_per_node, on ", gpus, gpus == 1 ? " GPU)" : " GPUs)");
  }
  return capacity;
}

DeviceCapacity ReplicaMemoryCapacity(const Config& config, const std::string& meminfo_path,
                                     const std::string& cgroup_max_path) {
  if (config.rlmesh.device_memory_gb > 0 || config.rlmesh.device != "cpu") {
    Config one_rank = config;
    one_rank.trainer.n_gpus_per_node = 1;
    return DetectCapacity(one_rank, meminfo_path);
  }
  DeviceCapacity capacity;
  std::ifstream limit(cgroup_max_path);
  std::string text;
  double bytes = 0;
  if (limit >> text && absl::SimpleAtod(text, &bytes) && bytes > 0) {
    capacity.bytes = bytes;
    capacity.source = absl::StrCat(cgroup_max_path, " (the cgroup's memory limit)");
  }
  Config one_rank = config;
  one_rank.trainer.n_gpus_per_node = 1;
  const DeviceCapacity host = DetectCapacity(one_rank, meminfo_path);
  if (capacity.bytes == 0 || (host.bytes > 0 && host.bytes < capacity.bytes)) return host;
  return capacity;
}

std::string FormatBytes(double bytes) {
  if (bytes >= kGiB) return absl::StrFormat("%.2f GiB", bytes / kGiB);
  if (bytes >= 1024.0 * 1024.0) return absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024.0));
  if (bytes >= 1024.0) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  return absl::StrFormat("%.0f B", bytes);
}

}  // namespace rlmesh::config
