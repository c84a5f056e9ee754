#include "common/config/memory_estimate.h"

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::config {
namespace {

// An 18-token-vocabulary variant of the quickstart's model: Llama, hidden 128, MLP 352, 2 layers,
// 4 heads of 32.
// Parameters by hand: embeddings 18*128 = 2304; a layer has 2 norms (256), q/k/v/o
// (4*128*128 = 65536) and gate/up/down (3*128*352 = 135168) = 200960; final norm 128;
// untied lm_head 2304. Total 2304 + 2*200960 + 128 + 2304 = 406656.
constexpr char kTinyLlama[] = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 128,
  "intermediate_size": 352, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 4, "vocab_size": 18, "max_position_embeddings": 64})";

ModelShape TinyShape(int64_t num_experts = 0) {
  absl::StatusOr<model::ModelConfig> model = model::ModelConfig::FromJson(kTinyLlama, "tiny");
  EXPECT_TRUE(model.ok()) << model.status();
  return ShapeFromModelConfig(*model, num_experts, "tiny");
}

// Sequence 16 + 8 = 24 tokens, trainer micro-batch 64, reference micro-batch 256, 256
// rollout sequences, float32, no gradient checkpointing.
Config TinyConfig() {
  Config c = DefaultConfig();
  c.data.max_prompt_length = 16;
  c.data.max_response_length = 8;
  c.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = 64;
  c.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu = 256;
  c.actor_rollout_ref.model.enable_gradient_checkpointing = false;
  c.trainer.n_gpus_per_node = 1;
  return c;
}

double Item(const MemoryEstimate& e, const std::string& prefix) {
  for (const MemoryItem& item : e.items) {
    if (item.name.rfind(prefix, 0) == 0) return item.bytes;
  }
  ADD_FAILURE() << "no item " << prefix;
  return -1;
}

TEST(ModelShapeTest, CountsByHand) {
  const ModelShape shape = TinyShape();
  EXPECT_EQ(shape.total_params, 406656);
  EXPECT_EQ(shape.embedding_params, 4608);
  EXPECT_EQ(shape.layer_params, 200960);
  EXPECT_EQ(shape.expert_params, 0);
}

TEST(ModelShapeTest, ExpertsMultiplyTheMlp) {
  // 4 experts: each layer has 4 MLPs (4*135168) and a router 4*128 instead of one MLP.
  const ModelShape shape = TinyShape(4);
  EXPECT_EQ(shape.expert_params, 2 * 4 * 135168);
  EXPECT_EQ(shape.total_params, 406656 + 2 * (4 * 135168 + 4 * 128 - 135168));
  EXPECT_EQ(shape.layer_params, 200960 + 4 * 135168 + 4 * 128 - 135168);
}

TEST(MemoryEstimateTest, Float32ByHand) {
  const MemoryEstimate e = EstimateMemory(TinyConfig(), TinyShape(), false, false);
  EXPECT_DOUBLE_EQ(Item(e, "trainer parameters"), 406656.0 * 4);
  EXPECT_DOUBLE_EQ(Item(e, "trainer gradients"), 406656.0 * 4);
  EXPECT_DOUBLE_EQ(Item(e, "trainer optimizer"), 406656.0 * 8);  // m and v, no master copy
  // Per token and layer: 6*128 + 3*128 + 3*128 + 4*352 = 2944, attention 2*4*24 = 192;
  // 24 tokens * 3136 * 4 bytes = 301056 per sequence and layer; x 2 layers x 64 sequences.
  EXPECT_DOUBLE_EQ(Item(e, "trainer activations"), 301056.0 * 2 * 64);
  EXPECT_DOUBLE_EQ(Item(e, "trainer logits"), 64.0 * 24 * 18 * (4 + 8));
  EXPECT_DOUBLE_EQ(Item(e, "reference parameters"), 406656.0 * 4);
  // One layer (301056) and logits + log-softmax (24*18*8 = 3456) per sequence, x 256.
  EXPECT_DOUBLE_EQ(Item(e, "reference forward"), 256.0 * (301056 + 3456));
  EXPECT_DOUBLE_EQ(Item(e, "rollout parameters"), 406656.0 * 4);
  // 256 sequences x 24 tokens x 2 layers x (k, v) x 4 heads x 32 x 4 bytes.
  EXPECT_DOUBLE_EQ(Item(e, "rollout KV cache"), 256.0 * 24 * 2 * 2 * 4 * 32 * 4);
  // Old log-probs: the trainer micro-batch (64, rollout.log_prob_micro_batch_size_per_gpu
  // unset) x (one layer + logits and log-softmax), as for the reference: 19488768, less than
  // the update's activations and logits that reuse its memory, so nothing beyond them.
  EXPECT_DOUBLE_EQ(Item(e, "trainer old log-prob forward"), 0);
  // Default transport shm: the shared-memory segment holds the weights once (they are
  // published from the parameters unit by unit, not from a snapshot).
  EXPECT_DOUBLE_EQ(Item(e, "trainer weight-sync staging (shm segment)"), 406656.0 * 4);
  // CPU: three idle service processes' runtime.
  EXPECT_DOUBLE_EQ(Item(e, "process runtime"), 3 * 172.0 * 1024 * 1024);
  // 139164672 for the items above the old-log-prob forward, then 1626624 + 541065216.
  EXPECT_DOUBLE_EQ(e.device_total, 681856512.0);
  EXPECT_DOUBLE_EQ(e.host_total, 0);
  // The trainer's tensors: its items but the shm segment (1626624); its process: every item
  // plus one runtime (the 3 * 172 MiB count all three).
  const double tensors = 406656.0 * 16 + 301056.0 * 2 * 64 + 64.0 * 24 * 18 * 12;
  EXPECT_DOUBLE_EQ(TrainerTensorBytes(e), tensors);
  EXPECT_DOUBLE_EQ(TrainerProcessBytes(TinyConfig(), e), tensors + 1626624 + 172.0 * 1024 * 1024);
}

TEST(MemoryEstimateTest, EachTransportStagesWhatItHolds) {
  const double weights = 406656.0 * 4;
  Config c = TinyConfig();
  c.rlmesh.weight_sync.bucket_bytes = 4096;
  c.rlmesh.weight_sync.transport = "nccl";  // a snapshot and two buckets in flight
  EXPECT_DOUBLE_EQ(Item(EstimateMemory(c, TinyShape(), false, false),
                        "trainer weight-sync staging (nccl snapshot + buckets)"),
                   weights + 2 * 4096);
  c.rlmesh.weight_sync.transport = "cuda_ipc";  // the snapshot the replicas map, no buckets
  EXPECT_DOUBLE_EQ(Item(EstimateMemory(c, TinyShape(), false, false),
                        "trainer weight-sync staging (cuda_ipc snapshot)"),
                   weights);
  c.rlmesh.weight_sync.transport = "grpc";  // two buckets: the message and its serialized copy
  EXPECT_DOUBLE_EQ(
      Item(EstimateMemory(c, TinyShape(), false, false), "trainer weight-sync staging (grpc"),
      2 * 4096);
}

TEST(MemoryEstimateTest, OldLogProbForwardCountsWhatItNeedsBeyondTheUpdate) {
  // Micro-batches of 256 for the old log-probs: 256 * (301056 + 3456) = 77955072, of which
  // the update's activations (38535168) and logits (331776) cover 38866944.
  Config c = TinyConfig();
  c.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu = 256;
  const MemoryEstimate e = EstimateMemory(c, TinyShape(), false, false);
  EXPECT_DOUBLE_EQ(Item(e, "trainer old log-prob forward"), 77955072.0 - 38866944.0);
}

TEST(MemoryEstimateTest, Bfloat16KeepsMasterWeights) {
  Config c = TinyConfig();
  c.rlmesh.dtype = "bfloat16";
  const MemoryEstimate e = EstimateMemory(c, TinyShape(), false, false);
  EXPECT_DOUBLE_EQ(Item(e, "trainer parameters"), 406656.0 * 2);
  EXPECT_DOUBLE_EQ(Item(e, "trainer optimizer"), 406656.0 * 12);  // m, v and fp32 master
  EXPECT_DOUBLE_EQ(Item(e, "trainer logits"), 64.0 * 24 * 18 * (2 + 8));
}

TEST(MemoryEstimateTest, GradientCheckpointingKeepsLayerInputs) {
  Config c = TinyConfig();
  c.actor_rollout_ref.model.enable_gradient_checkpointing = true;
  const MemoryEstimate e = EstimateMemory(c, TinyShape(), false, false);
  // 64 x (2 layers x 24 tokens x 128 x 4 bytes + one full layer 301056).
  EXPECT_DOUBLE_EQ(Item(e, "trainer activations"), 64.0 * (2 * 24 * 128 * 4 + 301056));
}

TEST(MemoryEstimateTest, OffloadMovesTheTrainersShardsToHost) {
  const MemoryEstimate none = EstimateMemory(TinyConfig(), TinyShape(), false, false);
  const MemoryEstimate e = EstimateMemory(TinyConfig(), TinyShape(), true, true);
  // Resident: the gathered root (embeddings and lm_head, 4608) plus one layer (200960), and
  // that unit's gradient.
  const double gathered = (4608.0 + 200960) * 4;
  EXPECT_DOUBLE_EQ(Item(e, "trainer parameters"), gathered);
  EXPECT_DOUBLE_EQ(Item(e, "trainer gradients"), gathered);
  EXPECT_DOUBLE_EQ(Item(e, "trainer optimizer"), 0);
  EXPECT_DOUBLE_EQ(Item(e, "reference parameters"), 406656.0 * 4);  // its own key: below
  // On the host: the parameter and gradient shards (one rank: all of them) and AdamW's moments.
  const double moved = 2 * 406656.0 * 4 + 406656.0 * 8;
  EXPECT_DOUBLE_EQ(e.host_total, moved);
  EXPECT_DOUBLE_EQ(e.device_total, none.device_total - moved + 2 * gathered);
}

TEST(MemoryEstimateTest, ReferenceOffloadKeepsOneUnitOnTheDevice) {
  Config c = TinyConfig();
  c.actor_rollout_ref.ref.fsdp_config.param_offload = true;
  const MemoryEstimate e = EstimateMemory(c, TinyShape(), false, false);
  EXPECT_DOUBLE_EQ(Item(e, "reference parameters"), (4608.0 + 200960) * 4);
  EXPECT_DOUBLE_EQ(e.host_total, (406656.0 - 4608 - 200960) * 4);
}

TEST(MemoryEstimateTest, AReferenceGroupHoldsItsShardAndOneGatheredUnit) {
  Config c = TinyConfig();
  c.rlmesh.reference.world_size = 4;
  const double gathered = 4608.0 + 200960;
  MemoryEstimate e = EstimateMemory(c, TinyShape(), false, false);
  EXPECT_DOUBLE_EQ(Item(e, "reference parameters (1/4 shard"), (406656.0 / 4 + gathered) * 4);
  c.actor_rollout_ref.ref.fsdp_config.param_offload = true;
  e = EstimateMemory(c, TinyShape(), false, false);
  EXPECT_DOUBLE_EQ(Item(e, "reference parameters (1/4 shard"), gathered * 4);
  EXPECT_DOUBLE_EQ(e.host_total, 406656.0 / 4 * 4);
}

TEST(MemoryEstimateTest, ShardingDividesTheTrainersStateByTheRanks) {
  Config c = TinyConfig();
  c.trainer.n_gpus_per_node = 4;
  MemoryEstimate e = EstimateMemory(c, TinyShape(), false, false);
  const double gathered = 4608.0 + 200960;
  EXPECT_DOUBLE_EQ(Item(e, "trainer parameters"), (406656.0 / 4 + gathered) * 4);
  EXPECT_DOUBLE_EQ(Item(e, "trainer gradients"), (406656.0 / 4 + gathered) * 4);
  EXPECT_DOUBLE_EQ(Item(e, "trainer optimizer"), 406656.0 / 4 * 8);
  // Hybrid, fsdp_size 2: a shard group of 2 ranks holds the whole, so each rank a half.
  c.actor_rollout_ref.actor.fsdp_config.fsdp_size = 2;
  e = EstimateMemory(c, TinyShape(), false, false);
  EXPECT_DOUBLE_EQ(Item(e, "trainer parameters"), (406656.0 / 2 + gathered) * 4);
  EXPECT_DOUBLE_EQ(Item(e, "trainer optimizer"), 406656.0 / 2 * 8);
  // fsdp_size 1: every rank holds the whole.
  c.actor_rollout_ref.actor.fsdp_config.fsdp_size = 1;
  e = EstimateMemory(c, TinyShape(), false, false);
  EXPECT_DOUBLE_EQ(Item(e, "trainer parameters"), 406656.0 * 4);
  EXPECT_DOUBLE_EQ(Item(e, "trainer optimizer"), 406656.0 * 8);
}

TEST(MemoryEstimateTest, TensorParallelSplitsWeightsAndCache) {
  Config c = TinyConfig();
  c.actor_rollout_ref.actor.megatron.tensor_model_parallel_size = 2;
  c.actor_rollout_ref.rollout.tensor_model_parallel_size = 2;
  c.trainer.n_gpus_per_node = 2;
  const MemoryEstimate e = EstimateMemory(c, TinyShape(), false, false);
  EXPECT_DOUBLE_EQ(Item(e, "trainer parameters"), 406656.0 * 4 / 2);
  EXPECT_DOUBLE_EQ(Item(e, "rollout parameters"), 406656.0 * 4 / 2);
  EXPECT_DOUBLE_EQ(Item(e, "rollout KV cache"), 256.0 * 24 * 2 * 2 * 4 * 32 * 4 / 2);
}

TEST(MemoryEstimateTest, NullMicroBatchIsTheMiniBatchPerDevice) {
  Config c = TinyConfig();
  c.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu.reset();
  c.actor_rollout_ref.actor.ppo_mini_batch_size = 8;
  c.actor_rollout_ref.rollout.n = 8;
  c.trainer.n_gpus_per_node = 4;  // DP 4: 64 samples / 4
  EXPECT_EQ(TrainMicroBatch(c, LayoutOf(c)), 16);
}

TEST(CapacityTest, Sources) {
  Config c = TinyConfig();
  const std::string meminfo = testing::TempDir() + "/meminfo";
  {
    std::ofstream out(meminfo);
    out << "MemFree:  100 kB\nMemTotal:       2097152 kB\n";
  }
  DeviceCapacity capacity = DetectCapacity(c, meminfo);
  EXPECT_DOUBLE_EQ(capacity.bytes, 2.0 * 1024 * 1024 * 1024);
  c.trainer.n_gpus_per_node = 4;  // four CPU ranks share the host
  EXPECT_DOUBLE_EQ(DetectCapacity(c, meminfo).bytes, 0.5 * 1024 * 1024 * 1024);
  c.rlmesh.device_memory_gb = 80;
  capacity = DetectCapacity(c, meminfo);
  EXPECT_DOUBLE_EQ(capacity.bytes, 80.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(capacity.source, "rlmesh.device_memory_gb");
  c.rlmesh.device_memory_gb = 0;
  EXPECT_EQ(DetectCapacity(c, meminfo + ".missing").bytes, 0);
}

// CUDA_VISIBLE_DEVICES as given for the scope (nullptr: unset), restored after.
class VisibleDevices {
 public:
  explicit VisibleDevices(const char* value) {
    if (const char* was = std::getenv("CUDA_VISIBLE_DEVICES")) saved_ = was;
    value == nullptr ? unsetenv("CUDA_VISIBLE_DEVICES") : setenv("CUDA_VISIBLE_DEVICES", value, 1);
  }
  ~VisibleDevices() {
    saved_ ? setenv("CUDA_VISIBLE_DEVICES", saved_->c_str(), 1) : unsetenv("CUDA_VISIBLE_DEVICES");
  }

 private:
  std::optional<std::string> saved_;
};

TEST(CapacityTest, CudaTakesTheSmallestVisibleGpuSharedByTheRanksPlacedOnIt) {
  Config c = TinyConfig();
  c.rlmesh.device = "cuda";
  constexpr double kMiB = 1024.0 * 1024.0;
  // nvidia-smi's lines (MiB per GPU), as the dry-run reads them.
  const std::string two_gpus = "printf '81559\n40960\n'";
  VisibleDevices all(nullptr);
  c.trainer.n_gpus_per_node = 1;
  DeviceCapacity capacity = DetectCapacity(c, "/nonexistent", "printf '81559\n'");
  EXPECT_DOUBLE_EQ(capacity.bytes, 81559 * kMiB);
  EXPECT_EQ(capacity.source, "nvidia-smi memory.total of GPU 0");
  c.trainer.n_gpus_per_node = 2;  // a GPU each
  capacity = DetectCapacity(c, "/nonexistent", two_gpus);
  EXPECT_DOUBLE_EQ(capacity.bytes, 40960 * kMiB);
  EXPECT_EQ(capacity.source, "nvidia-smi memory.total, the smallest of 2 GPUs");
  c.trainer.n_gpus_per_node = 3;  // round-robin: GPU 0 holds ranks 0 and 2
  capacity = DetectCapacity(c, "/nonexistent", two_gpus);
  EXPECT_DOUBLE_EQ(capacity.bytes, 40960 * kMiB / 2);
  EXPECT_EQ(capacity.source,
            "nvidia-smi memory.total, the smallest of 2 GPUs / 2 ranks sharing a GPU (3 ranks, "
            "trainer.n_gpus_per_node, on 2 GPUs)");
  {
    VisibleDevices first(" 0");  // only the 81559 MiB GPU: all three ranks on it
    capacity = DetectCapacity(c, "/nonexistent", two_gpus);
    EXPECT_DOUBLE_EQ(capacity.bytes, 81559 * kMiB / 3);
    EXPECT_EQ(capacity.source,
              "nvidia-smi memory.total of GPU 0 / 3 ranks sharing a GPU (3 ranks, "
              "trainer.n_gpus_per_node, on 1 GPU)");
  }
  {
    VisibleDevices swapped("1,0,7,0");  // CUDA stops at 7, which is not a GPU
    EXPECT_DOUBLE_EQ(DetectCapacity(c, "/nonexistent", two_gpus).bytes, 40960 * kMiB / 2);
  }
  {
    VisibleDevices none("");  // hides every GPU
    EXPECT_EQ(DetectCapacity(c, "/nonexistent", two_gpus).bytes, 0);
  }
  {
    VisibleDevices uuid("GPU-8d4f2a3e");  // a name nvidia-smi's lines do not carry: all GPUs
    EXPECT_DOUBLE_EQ(DetectCapacity(c, "/nonexistent", two_gpus).bytes, 40960 * kMiB / 2);
  }
  // No nvidia-smi, or nothing it could parse: unknown.
  EXPECT_EQ(DetectCapacity(c, "/nonexistent", "exit 1").bytes, 0);
  EXPECT_EQ(DetectCapacity(c, "/nonexistent", "echo '[N/A]'").bytes, 0);
  // rlmesh.device_memory_gb is one device's memory, as before.
  c.rlmesh.device_memory_gb = 80;
  EXPECT_DOUBLE_EQ(DetectCapacity(c, "/nonexistent", two_gpus).bytes, 80.0 * 1024 * kMiB);
}

TEST(FormatBytesTest, Units) {
  EXPECT_EQ(FormatBytes(640), "640 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(12.0 * 1024 * 1024), "12.0 MiB");
  EXPECT_EQ(FormatBytes(1.5 * 1024 * 1024 * 1024), "1.50 GiB");
}

}  // namespace
}  // namespace rlmesh::config
