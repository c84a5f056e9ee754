// trainer_scale_bench: the sharded trainer group at W = 1, 2 and 4 ranks (separate processes
// over c10d Gloo on loopback, as `rlmesh run` starts them) for a ~25 M and a ~120 M
// parameter Qwen3-style model on CPU. Each rank loads the model from a Hugging Face folder as
// the trainer does (whole at W = 1, unit by unit into its shards at W > 1) and runs the
// trainer's step (old log-probs, then the GRPO update) on the same synthetic batch; W > 1
// shards (fsdp_size -1). Printed per (model, W): seconds per step; per rank bytes of
// parameters + gradients + AdamW state (the actor's own count) against W = 1's; rank 0's peak
// of tensor memory after loading (what the trainer reports as perf/max_memory_allocated_gb)
// against `rlmesh dry-run`'s estimate of the trainer's tensors, and its peak resident set
// (perf/max_memory_reserved_gb) against the estimate of the whole process; and the bytes each
// rank sent through the collectives per step against full sharding's volume.
// Not a ctest (it takes minutes); run by hand:
//
//   build/bin/trainer_scale_bench [--sizes 25m,120m] [--worlds 1,2,4] [--steps 3]
//
// TRAINER_SCALE_TRACE=1 prints rank 0's resident set and tensor memory at each phase.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/config/config.h"
#include "common/config/memory_estimate.h"
#include "common/config/model_shape.h"
#include "common/dist/group.h"
#include "common/model/causal_lm.h"
#include "common/model/pretrained.h"
#include "common/process/malloc_arenas.h"
#include "common/process/subprocess.h"
#include "common/process/tensor_memory.h"
#include "services/trainer/actor.h"
#include "services/trainer/fsdp.h"

namespace {

using rlmesh::trainer::ActorBatch;

// A Qwen3-style model (grouped-query attention, q/k norms, tied embeddings).
std::string ModelJson(const std::string& size) {
  if (size == "25m") {
    return R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 512,
               "intermediate_size": 1536, "num_hidden_layers": 6, "num_attention_heads": 8,
               "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 8192,
               "max_position_embeddings": 128, "tie_word_embeddings": true})";
  }
  return R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 768,
             "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 12,
             "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 32000,
             "max_position_embeddings": 128, "tie_word_embeddings": true})";
}

constexpr int64_t kRows = 16;      // samples per step (one mini-batch)
constexpr int64_t kPrompt = 32;    // tokens
constexpr int64_t kResponse = 32;  // tokens
constexpr int64_t kMicro = 2;      // samples per forward/backward on a rank

ActorBatch Batch(int64_t vocab) {
  const int64_t cols = kPrompt + kResponse;
  ActorBatch b;
  b.input_ids = torch::randint(1, vocab, {kRows, cols}, torch::kInt64);
  b.attention_mask = torch::ones({kRows, cols}, torch::kInt64);
  b.response_mask = torch::zeros({kRows, cols}, torch::kInt64);
  b.response_mask.narrow(1, kPrompt, kResponse).fill_(1);
  b.advantages = torch::zeros({kRows, cols});
  for (int64_t r = 0; r < kRows; ++r) b.advantages[r].fill_(r % 2 == 0 ? 1.0 : -1.0);
  b.advantages.mul_(b.response_mask);
  b.position_ids = torch::arange(cols, torch::kInt64).unsqueeze(0).repeat({kRows, 1});
  return b;
}

double RssNowBytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * sysconf(_SC_PAGESIZE);
}

void Trace(const char* where) {
  if (std::getenv("TRAINER_SCALE_TRACE") == nullptr) return;
  std::fprintf(stderr, "  rss %-28s %8.1f MiB\n", where, RssNowBytes() / (1 << 20));
  const auto tensors = rlmesh::process::CpuTensorMemory();
  std::fprintf(stderr, "  rss %-28s %8.1f MiB held by tensors (peak %.1f MiB)\n", "",
               tensors.allocated_bytes / 1048576.0, tensors.peak_bytes / 1048576.0);
}

double PeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024;
}

// A randomly initialised model of `size` (fixed seed) written as a Hugging Face folder.
absl::Status WriteModel(const std::string& size, const std::string& dir) {
  auto config = rlmesh::model::ModelConfig::FromJson(ModelJson(size), "bench");
  if (!config.ok()) return config.status();
  torch::manual_seed(1);
  auto model = rlmesh::model::CausalLmImpl::Create(*config, {});
  if (!model.ok()) return model.status();
  return rlmesh::model::SavePretrained(**model, dir, "");
}

int Worker(int rank, int world, int port, const std::string& model_dir, int steps) {
  // As the trainer's main does, before any thread starts.
  rlmesh::process::UseOneMallocArena();
  rlmesh::process::KeepFreedMemory();
  rlmesh::process::CountCpuTensorMemory();
  at::set_num_threads(std::max(1u, std::thread::hardware_concurrency() / world));
  rlmesh::dist::GroupOptions group_options;
  group_options.rank = rank;
  group_options.world_size = world;
  group_options.port = port;
  group_options.listening = [](int p) {
    std::printf("PORT %d\n", p);
    std::fflush(stdout);
  };
  auto group = rlmesh::dist::Group::Join(group_options);
  if (!group.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, group.status().ToString().c_str());
    return 1;
  }
  // The trainer's own loading: whole at W = 1, read unit by unit into the shards at W > 1.
  std::optional<rlmesh::trainer::FsdpOptions> fsdp;
  if (world > 1) fsdp.emplace();
  auto loaded = rlmesh::trainer::LoadPolicy(model_dir, {}, group->get(), fsdp);
  if (!loaded.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, loaded.status().ToString().c_str());
    return 1;
  }
  auto policy = loaded->model;
  std::shared_ptr<rlmesh::trainer::ShardedParameters> sharded = loaded->sharded;
  policy->train();
  Trace("loaded");
  rlmesh::process::ResetPeakCpuTensorMemory();  // as the trainer does after loading
  rlmesh::trainer::ActorOptions options;
  options.ppo_mini_batch_size = kRows;
  options.ppo_micro_batch_size = kMicro;
  options.log_prob_micro_batch_size = kMicro;
  auto forward = [policy](const torch::Tensor& ids, const torch::Tensor& mask,
                          const torch::Tensor& positions) {
    return policy->Forward(ids, mask, positions);
  };
  auto actor =
      rlmesh::trainer::Actor::Create(options, policy, forward, nullptr, group->get(), sharded);
  if (!actor.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, actor.status().ToString().c_str());
    return 1;
  }
  torch::manual_seed(2);
  ActorBatch batch = Batch(policy->config().vocab_size);
  std::vector<double> seconds;
  int64_t bytes_before = 0;
  for (int step = 0; step <= steps; ++step) {  // step 0 warms up and is not counted
    if (step == 1) bytes_before = (*group)->bytes_communicated();
    const absl::Time start = absl::Now();
    Trace("step start");
    auto logp = (*actor)->ComputeLogProbs(batch);
    Trace("old log-probs");
    if (!logp.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, logp.status().ToString().c_str());
      return 1;
    }
    batch.old_log_probs = logp->log_probs.to(torch::kFloat32);
    auto metrics = (*actor)->UpdatePolicy(batch);
    if (!metrics.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, metrics.status().ToString().c_str());
      return 1;
    }
    Trace("updated");
    if (step > 0) seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  int64_t params = 0;
  for (const auto& p : policy->parameters()) params += p.numel();
  std::sort(seconds.begin(), seconds.end());
  nlohmann::json result = {
      {"rank", rank},
      {"step_seconds", seconds[seconds.size() / 2]},
      {"state_bytes", (*actor)->peak_state_bytes()},
      {"bytes_per_step",
       static_cast<double>((*group)->bytes_communicated() - bytes_before) / steps},
      {"peak_rss", PeakRssBytes()},
      {"peak_tensor_bytes", rlmesh::process::CpuTensorMemory().peak_bytes},
      {"params", params},
      {"passes", kRows / world / kMicro},
  };
  std::printf("RESULT %s\n", result.dump().c_str());
  return 0;
}

// `rlmesh dry-run`'s estimate of the trainer's tensors for this layout (its weight-sync
// staging is not a tensor, and the benchmark publishes nothing).
double EstimateTensors(const std::string& size, int world) {
  rlmesh::config::Config c = rlmesh::config::DefaultConfig();
  c.rlmesh.device = "cpu";
  c.rlmesh.dtype = "float32";
  c.trainer.n_gpus_per_node = world;
  c.data.max_prompt_length = kPrompt;
  c.data.max_response_length = kResponse;
  c.actor_rollout_ref.model.enable_gradient_checkpointing = false;
  c.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = kMicro;
  c.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu = kMicro;
  auto model = rlmesh::model::ModelConfig::FromJson(ModelJson(size), "bench");
  const auto shape = rlmesh::config::ShapeFromModelConfig(*model, 0, "bench");
  const auto e = rlmesh::config::EstimateMemory(c, shape, false, false);
  return rlmesh::config::TrainerTensorBytes(e);
}

std::vector<nlohmann::json> RunGroup(const std::string& self, const std::string& model_dir,
                                     int world, int steps) {
  std::vector<std::unique_ptr<rlmesh::process::Subprocess>> ranks;
  std::string port = "0";
  for (int r = 0; r < world; ++r) {
    rlmesh::process::SubprocessOptions options;
    options.argv = {self, "--worker", std::to_string(r),    std::to_string(world),
                    port, model_dir,  std::to_string(steps)};
    options.keep_lines = 1000;
    auto p = rlmesh::process::Subprocess::Start(options);
    if (!p.ok()) {
      std::fprintf(stderr, "trainer_scale_bench: %s\n", p.status().ToString().c_str());
      std::exit(1);
    }
    ranks.push_back(std::move(p).value());
    if (r == 0 && world > 1) {
      auto line = ranks[0]->WaitForLine(
          [](const std::string& l) { return l.rfind("PORT ", 0) == 0; }, absl::Seconds(60));
      if (!line.ok()) {
        std::fprintf(stderr, "trainer_scale_bench: rank 0 did not host the group\n");
        std::exit(1);
      }
      port = line->substr(5);
    }
  }
  std::vector<nlohmann::json> results;
  for (auto& p : ranks) {
    auto status = p->Wait(absl::Hours(1));
    if (!status.has_value() || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
      for (const auto& l : p->LastLines(20)) std::fprintf(stderr, "  %s\n", l.c_str());
      std::fprintf(stderr, "trainer_scale_bench: a rank failed\n");
      std::exit(1);
    }
    for (const auto& l : p->LastLines(1000)) {
      if (l.rfind("RESULT ", 0) == 0) results.push_back(nlohmann::json::parse(l.substr(7)));
      if (l.rfind("  rss ", 0) == 0 && p == ranks.front()) std::printf("%s\n", l.c_str());
    }
  }
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "--worker") {
    return Worker(std::stoi(argv[2]), std::stoi(argv[3]), std::stoi(argv[4]), argv[5],
                  std::stoi(argv[6]));
  }
  std::vector<std::string> sizes = {"25m", "120m"};
  std::vector<int> worlds = {1, 2, 4};
  int steps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr,
                   "usage: trainer_scale_bench [--sizes 25m,120m] [--worlds 1,2,4] [--steps N]\n");
      return 2;
    }
    if (arg == "--sizes") {
      sizes = absl::StrSplit(argv[++i], ',');
    } else if (arg == "--worlds") {
      worlds.clear();
      for (absl::string_view w : absl::StrSplit(argv[++i], ','))
        worlds.push_back(std::stoi(std::string(w)));
    } else if (arg == "--steps") {
      steps = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr, "trainer_scale_bench: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  const std::string self = "/proc/self/exe";
  char path[4096] = {};
  const ssize_t n = readlink(self.c_str(), path, sizeof(path) - 1);
  const std::string exe = n > 0 ? std::string(path, n) : std::string(argv[0]);
  std::printf(
      "trainer_scale_bench: %lld samples of %lld + %lld tokens per step, micro-batches of %lld "
      "per rank, float32, %u cores shared by the ranks, median of %d steps\n",
      static_cast<long long>(kRows), static_cast<long long>(kPrompt),
      static_cast<long long>(kResponse), static_cast<long long>(kMicro),
      std::thread::hardware_concurrency(), steps);
  std::printf("%-6s %2s %9s %8s %12s %7s %11s %11s %7s %11s %11s %7s %11s %11s %7s\n", "model", "W",
              "params", "step s", "state/rank", "vs W=1", "tensors pk", "est tensors", "ratio",
              "rss rank0", "est process", "ratio", "sent/step", "theory", "ratio");
  const std::string folder = absl::StrCat(std::filesystem::temp_directory_path().string(),
                                          "/trainer_scale_bench_", getpid());
  for (const std::string& size : sizes) {
    // The ranks read the model from a Hugging Face folder, as the trainer does.
    const std::string model_dir = absl::StrCat(folder, "/", size);
    if (absl::Status written = WriteModel(size, model_dir); !written.ok()) {
      std::fprintf(stderr, "trainer_scale_bench: %s\n", written.ToString().c_str());
      return 1;
    }
    double state_one = 0;
    for (int world : worlds) {
      const auto results = RunGroup(exe, model_dir, world, steps);
      const nlohmann::json* r0 = nullptr;
      double state = 0, sent = 0, seconds = 0;
      for (const auto& r : results) {
        if (r["rank"] == 0) r0 = &r;
        state = std::max(state, r["state_bytes"].get<double>());
        sent = std::max(sent, r["bytes_per_step"].get<double>());
        seconds = std::max(seconds, r["step_seconds"].get<double>());
      }
      if (r0 == nullptr) return 1;
      if (world == 1) state_one = state;
      const double params = (*r0)["params"].get<double>();
      const double passes = (*r0)["passes"].get<double>();
      // Full sharding per forward/backward pass: the parameters gathered for the forward and
      // again for the backward, and the fp32 gradients reduce-scattered; plus one gather per
      // old-log-prob forward. Each moves (W-1)/W of the full bytes.
      const double theory = (3 * passes + passes) * params * 4 * (world - 1) / world;
      // The estimate's tensors, and the process: the tensors plus one process runtime.
      const double estimate_tensors = EstimateTensors(size, world);
      const double estimate = estimate_tensors + rlmesh::config::kCpuProcessRuntimeBytes;
      const double tensors = (*r0)["peak_tensor_bytes"].get<double>();
      const double rss = (*r0)["peak_rss"].get<double>();
      constexpr double kMiB = 1 << 20;
      std::printf(
          "%-6s %2d %8.1fM %8.3f %9.1fMiB %7.3f %8.1fMiB %8.1fMiB %7.2f %8.1fMiB %8.1fMiB %7.2f "
          "%8.1fMiB %8.1fMiB %7s\n",
          size.c_str(), world, params / 1e6, seconds, state / kMiB,
          state_one > 0 ? state / state_one : 0.0, tensors / kMiB, estimate_tensors / kMiB,
          tensors / estimate_tensors, rss / kMiB, estimate / kMiB, rss / estimate, sent / kMiB,
          theory / kMiB, world > 1 ? absl::StrCat(absl::SixDigits(sent / theory)).c_str() : "-");
      std::fflush(stdout);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(folder, ec);
  return 0;
}
