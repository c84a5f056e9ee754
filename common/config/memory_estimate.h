// Per-device memory estimate of a GRPO run, for `rlmesh dry-run`. Every role's share of one
// device is counted as resident at once (rlmesh runs trainer, reference and rollout as
// separate processes, and on one machine they share the device). Formulas are in
// docs/config.md; all sizes are bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/config/model_shape.h"

namespace rlmesh::config {

struct MemoryItem {
  std::string name;       // "trainer optimizer state (AdamW)"
  double bytes = 0;       // on the device
  double host_bytes = 0;  // moved to host memory by offload
};

struct MemoryEstimate {
  bool offload_param = false;
  bool offload_optimizer = false;
  std::vector<MemoryItem> items;
  double device_total = 0;
  double host_total = 0;
};

// The parallel layout the estimate divides by.
struct Layout {
  int64_t devices = 1;  // trainer.n_gpus_per_node * trainer.nnodes
  int64_t tp = 1;       // actor tensor parallel
  int64_t pp = 1;       // actor pipeline parallel
  int64_t ep = 1;       // actor expert parallel
  int64_t dp = 1;       // devices / (tp * pp), at least 1
  int64_t rollout_tp = 1;
};
Layout LayoutOf(const Config& config);

// Samples in one trainer micro-batch on one device: ppo_micro_batch_size_per_gpu, or when it
// is null the whole per-device mini-batch (ppo_mini_batch_size * n / dp).
int64_t TrainMicroBatch(const Config& config, const Layout& layout);

// Bytes of one weight in rlmesh.dtype, as every model copy holds it: 2 in bfloat16, else 4.
int64_t WeightBytes(const Config& config);

// Resident set of an idle rlmesh service process on CPU (LibTorch 1.13, OpenBLAS, gRPC) with a
// model of negligible size, measured on Debian 12 (docs/performance.md): 172 MiB.
inline constexpr double kCpuProcessRuntimeBytes = 172.0 * 1024 * 1024;

// The trainer's tensors at their peak on CPU (what the trainer reports as
// perf/max_memory_allocated_gb): its items of `estimate` but the weight-sync staging, which on
// CPU is a shared-memory segment or gRPC messages, not tensors.
double TrainerTensorBytes(const MemoryEstimate& estimate);

// What the trainer process holds at its peak: its items of `estimate`, plus on CPU the
// process runtime (on CUDA the device holds only the tensors; the CUDA context is not
// counted).
double TrainerProcessBytes(const Config& config, const MemoryEstimate& estimate);

MemoryEstimate EstimateMemory(const Config& config, const ModelShape& shape, bool offload_param,
                              bool offload_optimizer);

struct DeviceCapacity {
  double bytes = 0;    // 0 = unknown
  std::string source;  // "rlmesh.device_memory_gb", "/proc/meminfo MemTotal / 2 ranks", ...
};

// The shell command that lists the GPUs' memory, one line of MiB per GPU.
inline constexpr char kGpuMemoryQuery[] =
    "nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null";

// rlmesh.device_memory_gb when set; else for cpu the host's MemTotal (from `meminfo_path`)
// divided among the trainer.n_gpus_per_node ranks of a node; else for cuda the smallest GPU's
// memory as `gpu_query` lists it (only the GPUs CUDA_VISIBLE_DEVICES names, when it names
// them by index), divided among the ranks that share a GPU when the node has fewer GPUs than
// ranks (they are placed round-robin, common/dist/placement.h); unknown when none answers.
DeviceCapacity DetectCapacity(const Config& config,
                              const std::string& meminfo_path = "/proc/meminfo",
                              const std::string& gpu_query = kGpuMemoryQuery);

// "1.50 GiB", "12.0 MiB", "640 B".
std::string FormatBytes(double bytes);

// The memory one rollout replica's gpu_memory_utilization is a fraction of: on cuda the
// device's (rlmesh.device_memory_gb, else nvidia-smi's), on cpu the memory limit of the process
// (the cgroup's memory.max when it sets one, else MemTotal).
DeviceCapacity ReplicaMemoryCapacity(
    const Config& config, const std::string& meminfo_path = "/proc/meminfo",
    const std::string& cgroup_max_path = "/sys/fs/cgroup/memory.max");

}  // namespace rlmesh::config
