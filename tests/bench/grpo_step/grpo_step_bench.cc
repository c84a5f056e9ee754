// grpo_step_bench: runs the quickstart configuration through the real `rlmesh run` (five
// processes, gRPC on loopback) for a fixed number of GRPO steps and prints, from the run's
// metrics.jsonl, the seconds per step, its split into generation, reward, reference, old
// log-probs, update and weight sync, and the share of the step spent outside model compute
// (serialization, gRPC, waiting between stages), against the 5% target. It also prints the
// trainer's measured peaks, of its tensors (perf/max_memory_allocated_gb) and of its resident
// set (perf/max_memory_reserved_gb), next to `rlmesh dry-run`'s estimates for the same
// config. `--size 120m` runs a ~120 M-parameter model for a few steps for the memory check.
//
//   build/bin/grpo_step_bench [--steps N] [--skip K] [--size quickstart|120m] [key=value ...]
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"

namespace {

namespace fs = std::filesystem;

struct Options {
  int steps = 30;
  int skip = 3;  // first steps left out of the averages (allocator and cache warm-up)
  std::string size = "quickstart";
  std::vector<std::string> overrides;
};

// Runs `argv` to its end with output in `log`; returns its stdout lines (kept in memory) or
// exits the benchmark on failure.
std::vector<std::string> RunOrDie(const std::vector<std::string>& argv, const std::string& log,
                                  bool echo = false) {
  rlmesh::process::SubprocessOptions options;
  options.argv = argv;
  options.log_path = log;
  options.keep_lines = 100000;
  options.echo = echo;
  auto p = rlmesh::process::Subprocess::Start(options);
  if (!p.ok()) {
    std::fprintf(stderr, "grpo_step_bench: %s\n", p.status().ToString().c_str());
    std::exit(1);
  }
  auto status = (*p)->Wait(absl::Hours(2));
  if (!status.has_value() || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    std::fprintf(stderr, "grpo_step_bench: %s failed; see %s\n", argv[0].c_str(), log.c_str());
    std::exit(1);
  }
  return (*p)->LastLines(100000);
}

double Mean(const std::vector<nlohmann::json>& steps, const std::string& key) {
  double sum = 0;
  int count = 0;
  for (const auto& s : steps) {
    if (s.contains(key) && s[key].is_number()) {
      sum += s[key].get<double>();
      ++count;
    }
  }
  return count > 0 ? sum / count : 0.0;
}

double Max(const std::vector<nlohmann::json>& steps, const std::string& key) {
  double best = 0;
  for (const auto& s : steps) {
    if (s.contains(key) && s[key].is_number()) best = std::max(best, s[key].get<double>());
  }
  return best;
}

// The "no offload" column of `rlmesh dry-run`'s "  trainer process, resident set at peak
// 123.4 MiB  100.0 MiB" line, in bytes.
// The dry-run's line starting with `label` (its first column, no offload), in bytes; 0 when
// it has none.
double ParseEstimate(const std::vector<std::string>& lines, const std::string& label) {
  const std::regex pattern("^  " + label + R"([^0-9]*([0-9.]+) (B|KiB|MiB|GiB) )");
  for (const auto& line : lines) {
    std::smatch m;
    if (std::regex_search(line, m, pattern)) {
      const double unit = m[2] == "GiB"   ? 1 << 30
                          : m[2] == "MiB" ? 1 << 20
                          : m[2] == "KiB" ? 1 << 10
                                          : 1;
      return std::stod(m[1]) * unit;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "grpo_step_bench: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--steps") {
      options.steps = std::stoi(value());
    } else if (arg == "--skip") {
      options.skip = std::stoi(value());
    } else if (arg == "--size") {
      options.size = value();
    } else if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: grpo_step_bench [--steps N] [--skip K] [--size quickstart|120m] [key=value "
          "...]\n");
      return 0;
    } else if (arg.find('=') != std::string::npos) {
      options.overrides.push_back(arg);
    } else {
      std::fprintf(stderr, "grpo_step_bench: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  if (options.size != "quickstart" && options.size != "120m") {
    std::fprintf(stderr, "grpo_step_bench: --size: expected quickstart or 120m, got %s\n",
                 options.size.c_str());
    return 2;
  }
  const std::string bin = RLMESH_BIN_DIR;
  std::string dir = (fs::temp_directory_path() / "rlmesh_grpo_step_bench_XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string model = dir + "/model";
  std::vector<std::string> make = {bin + "/rlmesh", "make-tiny-model", "--arch", "llama", "--out",
                                   model,           "--seed",          "1"};
  std::vector<std::string> config = {
      std::string(RLMESH_SOURCE_DIR) + "/deploy/configs/quickstart.yaml",
      "actor_rollout_ref.model.path=" + model,
      "rlmesh.run_dir=" + dir + "/run",
      "trainer.default_local_dir=" + dir + "/checkpoints",
      "trainer.save_freq=-1",
      "trainer.test_freq=-1",
      "trainer.val_before_train=false",
      absl::StrCat("trainer.total_training_steps=", options.steps)};
  if (options.size == "quickstart") {
    // The quickstart's model (README): d 128, 2 layers, 4 heads.
    make.insert(make.end(), {"--hidden", "128", "--layers", "2", "--heads", "4", "--kv-heads", "4",
                             "--intermediate", "352", "--max-position", "64"});
  } else {
    // ~120 M parameters (Llama-style; the quickstart's byte-level tokenizer, so responses
    // decode for the reward); a small batch keeps the run short.
    make.insert(make.end(), {"--hidden", "1024", "--layers", "9", "--heads", "16", "--kv-heads",
                             "16", "--intermediate", "2816", "--max-position", "64"});
    config.insert(config.end(), {"data.train_batch_size=4", "actor_rollout_ref.rollout.n=4",
                                 "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
                                 "rlmesh.warmup.sft_steps=2", "rlmesh.warmup.batch_size=16",
                                 "rlmesh.num_threads=2"});
  }
  config.insert(config.end(), options.overrides.begin(), options.overrides.end());
  std::printf("grpo_step_bench: %s model, %d steps, in %s\n", options.size.c_str(), options.steps,
              dir.c_str());
  RunOrDie(make, dir + "/make-tiny-model.log");

  std::vector<std::string> dry = {bin + "/rlmesh", "dry-run"};
  dry.insert(dry.end(), config.begin(), config.end());
  const std::vector<std::string> dry_run = RunOrDie(dry, dir + "/dry-run.log");
  const double estimate_tensors = ParseEstimate(dry_run, "trainer tensors at peak");
  const double estimate_process = ParseEstimate(dry_run, "trainer process");

  std::vector<std::string> run = {bin + "/rlmesh", "run"};
  run.insert(run.end(), config.begin(), config.end());
  RunOrDie(run, dir + "/run.log", /*echo=*/true);

  std::vector<nlohmann::json> all;
  {
    std::ifstream in(dir + "/run/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto record = nlohmann::json::parse(line, nullptr, false);
      if (record.is_object() && record.contains("timing_s/step")) all.push_back(record);
    }
  }
  if (static_cast<int>(all.size()) <= options.skip) {
    std::fprintf(stderr, "grpo_step_bench: only %zu steps in metrics.jsonl\n", all.size());
    return 1;
  }
  const std::vector<nlohmann::json> steps(all.begin() + options.skip, all.end());
  const double step = Mean(steps, "timing_s/step");
  std::printf("\nGRPO step, mean of steps %d..%zu (%s model):\n", options.skip + 1, all.size(),
              options.size.c_str());
  std::printf("  %-22s %10s %12s %10s\n", "phase", "wall s", "compute s", "share");
  const std::pair<const char*, const char*> phases[] = {{"gen", "gen"},
                                                        {"reward", "reward"},
                                                        {"ref", "ref"},
                                                        {"old_log_prob", "old_log_prob"},
                                                        {"update_actor", "update_actor"}};
  for (const auto& [name, key] : phases) {
    const double wall = Mean(steps, absl::StrCat("timing_s/", key));
    std::printf("  %-22s %10.4f %12.4f %9.1f%%\n", name, wall,
                Mean(steps, absl::StrCat("timing_s/compute/", key)), 100 * wall / step);
  }
  const double sync = Mean(steps, "timing_s/update_weights");
  std::printf("  %-22s %10.4f %12s %9.1f%%\n", "update_weights (sync)", sync, "-",
              100 * sync / step);
  std::printf("  %-22s %10.4f\n", "step", step);
  std::printf("  (ref and old_log_prob run side by side; their walls overlap)\n");
  const double outside = Mean(steps, "timing_s/outside_compute");
  std::printf(
      "outside model compute (serialization, gRPC, waiting; sync excluded): %.4f s = %.2f%% of "
      "the step; target < 5%%: %.2fx the target\n",
      outside, 100 * outside / step, outside / step / 0.05);
  std::printf("throughput: %.0f tokens/s (perf/throughput)\n", Mean(steps, "perf/throughput"));

  auto compare = [&](const char* what, const char* metric, double estimate) {
    const double peak = Max(all, metric) * (1 << 30);
    if (estimate > 0 && peak > 0) {
      std::printf(
          "trainer peak %s (%s): measured %.1f MiB, dry-run estimate %.1f MiB, "
          "measured/estimate %.2f (target 0.75..1.25)\n",
          what, metric, peak / (1 << 20), estimate / (1 << 20), peak / estimate);
    } else {
      std::printf("trainer peak %s (%s): measured %.1f MiB; no dry-run estimate found\n", what,
                  metric, peak / (1 << 20));
    }
  };
  compare("tensor memory", "perf/max_memory_allocated_gb", estimate_tensors);
  compare("resident set", "perf/max_memory_reserved_gb", estimate_process);
  return 0;
}
