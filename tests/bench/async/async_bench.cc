// async_bench: synchronous GRPO against generation running ahead (rlmesh.max_staleness = 1
// and 2), through the real `rlmesh run` (five processes, gRPC on loopback), on the quickstart
// task and model. For each k it prints the seconds per step (the time between two updates,
// after the first --skip steps), steps per second and its ratio to the synchronous run
// measured in the same invocation, and the ceiling of that ratio: the synchronous step with
// its generation hidden entirely behind the update, sync step / (sync step - generation).
// It also prints the synchronous run's split (generation + scoring against the update side),
// the validation reward at equal steps (and the largest gap to the synchronous curve), and
// the wall time of the GRPO steps until validation first reached --target. With --repeats R
// the runs go round R times (k = 0, 1, 2, 0, 1, 2, ...) so that a noisy neighbour slows every
// k alike; the table gives the mean over the rounds and the range of the rounds' s/step.
//
//   build/bin/async_bench [--steps N] [--skip K] [--target R] [--ks 0,1,2] [--repeats R]
//                         [--long-generation] [--separate-cores] [--reference-with-rollout]
//                         [--hidden N] [--layers N] [--intermediate N] [key=value ...]
//
// --separate-cores runs the rollout replica on CPU 0 and every other service on CPU 1
// (rlmesh.<service>.cpus), one LibTorch thread each: the generation and the update side get a
// core each, as the rollout gets devices of its own in a deployment, so that running them at
// once can overlap them instead of sharing the same two cores.
//
// --reference-with-rollout (with --separate-cores) moves the KL reference to the rollout's
// core: the two inference services share one core and the trainer has the other to itself,
// so the reference pass of a step generated ahead overlaps the update too. The split then
// counts the reference on the generation side.
//
// --long-generation lengthens the generation (14-18 digit prompts, two sequences decoded at a
// time: a latency-bound decode, as a large model's is on a GPU) to about a fifth of the
// synchronous step, for the throughput ratio; the task then learns too slowly for --target
// in a short run.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"

namespace {

namespace fs = std::filesystem;

struct Options {
  int steps = 200;
  int skip = 3;
  double target = 0.7;
  std::vector<int> ks = {0, 1, 2};
  int repeats = 1;
  bool long_generation = false;
  bool separate_cores = false;
  bool reference_with_rollout = false;
  // The model's sizes: the quickstart's unless --hidden, --layers or --intermediate say else.
  int hidden = 128;
  int layers = 2;
  int intermediate = 352;
  std::vector<std::string> overrides;
};

void RunOrDie(const std::vector<std::string>& argv, const std::string& log) {
  rlmesh::process::SubprocessOptions options;
  options.argv = argv;
  options.log_path = log;
  auto p = rlmesh::process::Subprocess::Start(options);
  if (!p.ok()) {
    std::fprintf(stderr, "async_bench: %s\n", p.status().ToString().c_str());
    std::exit(1);
  }
  auto status = (*p)->Wait(absl::Hours(2));
  if (!status.has_value() || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    std::fprintf(stderr, "async_bench: %s failed; see %s\n", argv[0].c_str(), log.c_str());
    std::exit(1);
  }
}

struct RunResult {
  int k = 0;
  double step_s = 0;     // mean time between two updates, after the skipped steps
  double gen_s = 0;      // mean generation + scoring (+ reference, on the rollout's core) time
  double train_s = 0;    // mean time of the rest of the step (reference, old, update, sync)
  double wait_s = 0;     // mean time the update waited for its samples (k > 0)
  double staleness = 0;  // mean staleness of the trained samples
  // The books, over every step of the run: steps logged, the fewest and most samples a step
  // trained, and the samples dropped as staler than the bound.
  int steps_logged = 0;
  double samples_min = 0;
  double samples_max = 0;
  double dropped_stale = 0;
  std::map<int64_t, double> validation;  // step -> val/reward/mean
  double seconds_to_target = -1;         // GRPO steps' time until validation >= target
};

double Num(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

RunResult Read(const std::string& path, int k, int skip, double target,
               bool reference_with_rollout) {
  RunResult r;
  r.k = k;
  std::ifstream in(path);
  int counted = 0;
  double elapsed = 0;  // sum of step times so far
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    const int64_t step = static_cast<int64_t>(Num(j, "training/global_step"));
    if (j.contains("val/reward/mean")) {
      const double v = Num(j, "val/reward/mean");
      r.validation[step] = v;
      if (v >= target && r.seconds_to_target < 0 && step > 0) r.seconds_to_target = elapsed;
      continue;
    }
    if (!j.contains("timing_s/step")) continue;
    elapsed += Num(j, "timing_s/step");
    const double samples = Num(j, "rollout/samples");
    r.samples_min = r.steps_logged == 0 ? samples : std::min(r.samples_min, samples);
    r.samples_max = std::max(r.samples_max, samples);
    r.dropped_stale += Num(j, "rlmesh/samples_dropped_stale");
    ++r.steps_logged;
    if (step <= skip) continue;
    ++counted;
    r.step_s += Num(j, "timing_s/step");
    // The reference and old log-probs run at once; on the rollout's core the reference is
    // part of the side that runs ahead.
    const double ref = Num(j, "timing_s/ref");
    const double old = Num(j, "timing_s/old_log_prob");
    r.gen_s +=
        Num(j, "timing_s/gen") + Num(j, "timing_s/reward") + (reference_with_rollout ? ref : 0.0);
    r.train_s += (reference_with_rollout ? old : std::max(ref, old)) +
                 Num(j, "timing_s/update_actor") + Num(j, "timing_s/update_weights");
    r.wait_s += Num(j, "timing_s/wait_for_samples");
    r.staleness += Num(j, "rlmesh/staleness/mean");
  }
  if (counted > 0) {
    r.step_s /= counted;
    r.gen_s /= counted;
    r.train_s /= counted;
    r.wait_s /= counted;
    r.staleness /= counted;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "async_bench: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--steps") {
      options.steps = std::stoi(value());
    } else if (arg == "--skip") {
      options.skip = std::stoi(value());
    } else if (arg == "--target") {
      options.target = std::stod(value());
    } else if (arg == "--ks") {
      options.ks.clear();
      for (absl::string_view part : absl::StrSplit(value(), ',')) {
        int k = 0;
        if (!absl::SimpleAtoi(part, &k) || k < 0) {
          std::fprintf(stderr, "async_bench: --ks: expected integers >= 0\n");
          return 2;
        }
        options.ks.push_back(k);
      }
    } else if (arg == "--repeats") {
      options.repeats = std::max(1, std::stoi(value()));
    } else if (arg == "--long-generation") {
      options.long_generation = true;
    } else if (arg == "--separate-cores") {
      options.separate_cores = true;
    } else if (arg == "--reference-with-rollout") {
      options.reference_with_rollout = true;
    } else if (arg == "--hidden") {
      options.hidden = std::stoi(value());
    } else if (arg == "--layers") {
      options.layers = std::stoi(value());
    } else if (arg == "--intermediate") {
      options.intermediate = std::stoi(value());
    } else if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: async_bench [--steps N] [--skip K] [--target R] [--ks 0,1,2] [--repeats R] "
          "[--long-generation] [--separate-cores] [--reference-with-rollout] [--hidden N] "
          "[--layers N] [--intermediate N] "
          "[key=value ...]\n");
      return 0;
    } else if (arg.find('=') != std::string::npos) {
      options.overrides.push_back(arg);
    } else {
      std::fprintf(stderr, "async_bench: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  if (std::find(options.ks.begin(), options.ks.end(), 0) == options.ks.end()) {
    options.ks.insert(options.ks.begin(), 0);  // the peer every ratio is measured against
  }
  const std::string bin = RLMESH_BIN_DIR;
  std::string dir = (fs::temp_directory_path() / "rlmesh_async_bench_XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  // The quickstart's model (scripts/quickstart.sh), or the sizes the options name.
  const std::string model = dir + "/model";
  RunOrDie({bin + "/rlmesh",  "make-tiny-model",
            "--arch",         "llama",
            "--out",          model,
            "--hidden",       std::to_string(options.hidden),
            "--layers",       std::to_string(options.layers),
            "--heads",        "4",
            "--kv-heads",     "4",
            "--intermediate", std::to_string(options.intermediate),
            "--max-position", "64",
            "--seed",         "1"},
           dir + "/model.log");
  std::vector<std::string> common = {"actor_rollout_ref.model.path=" + model,
                                     absl::StrCat("trainer.total_training_steps=", options.steps),
                                     "trainer.save_freq=-1"};
  if (options.long_generation) {
    for (const char* o : {"rlmesh.quickstart.min_digits=14", "rlmesh.quickstart.max_digits=18",
                          "data.max_prompt_length=24", "data.max_response_length=24",
                          "actor_rollout_ref.rollout.max_num_seqs=2", "trainer.test_freq=-1"}) {
      common.push_back(o);
    }
  }
  if (options.reference_with_rollout && !options.separate_cores) {
    std::fprintf(stderr, "async_bench: --reference-with-rollout needs --separate-cores\n");
    return 2;
  }
  if (options.separate_cores) {
    for (const char* o : {"rlmesh.rollout.cpus=0", "rlmesh.trainer.cpus=1", "rlmesh.reward.cpus=1",
                          "rlmesh.coordinator.cpus=1"}) {
      common.push_back(o);
    }
    common.push_back(options.reference_with_rollout ? "rlmesh.reference.cpus=0"
                                                    : "rlmesh.reference.cpus=1");
  }
  common.insert(common.end(), options.overrides.begin(), options.overrides.end());

  // rounds[r][i]: round r of k = options.ks[i].
  std::vector<std::vector<RunResult>> rounds(options.repeats);
  for (int round = 0; round < options.repeats; ++round) {
    for (int k : options.ks) {
      const std::string run = absl::StrCat(dir, "/r", round, "_k", k);
      std::vector<std::string> argv = {
          bin + "/rlmesh", "run",
          std::string(RLMESH_SOURCE_DIR) + "/deploy/configs/quickstart.yaml"};
      argv.insert(argv.end(), common.begin(), common.end());
      argv.push_back("rlmesh.run_dir=" + run);
      argv.push_back("trainer.default_local_dir=" + run + "/checkpoints");
      argv.push_back(absl::StrCat("rlmesh.max_staleness=", k));
      std::fprintf(stderr, "async_bench: round %d, rlmesh.max_staleness=%d, %d steps ...\n",
                   round + 1, k, options.steps);
      RunOrDie(argv, run + ".log");
      rounds[round].push_back(Read(run + "/metrics.jsonl", k, options.skip, options.target,
                                   options.reference_with_rollout));
    }
  }
  // The mean over the rounds (validation: the first round's curve; runs are reproducible).
  std::vector<RunResult> results = rounds[0];
  std::vector<std::pair<double, double>> range(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    RunResult& mean = results[i];
    range[i] = {mean.step_s, mean.step_s};
    for (int round = 1; round < options.repeats; ++round) {
      const RunResult& r = rounds[round][i];
      mean.step_s += r.step_s;
      mean.gen_s += r.gen_s;
      mean.train_s += r.train_s;
      mean.wait_s += r.wait_s;
      mean.staleness += r.staleness;
      if (mean.seconds_to_target >= 0 && r.seconds_to_target >= 0) {
        mean.seconds_to_target += r.seconds_to_target;
      }
      range[i].first = std::min(range[i].first, r.step_s);
      range[i].second = std::max(range[i].second, r.step_s);
    }
    const double n = options.repeats;
    mean.step_s /= n;
    mean.gen_s /= n;
    mean.train_s /= n;
    mean.wait_s /= n;
    mean.staleness /= n;
    if (mean.seconds_to_target >= 0) mean.seconds_to_target /= n;
  }

  const RunResult& sync = results.front();
  std::printf(
      "async_bench: quickstart task%s%s%s, model hidden %d, %d layers, intermediate %d, %d "
      "steps (first %d left out of the means), %d round(s)\n",
      options.long_generation ? " --long-generation" : "",
      options.separate_cores ? " --separate-cores" : "",
      options.reference_with_rollout ? " --reference-with-rollout" : "", options.hidden,
      options.layers, options.intermediate, options.steps, options.skip, options.repeats);
  for (const std::string& o : options.overrides) std::printf("  %s\n", o.c_str());
  std::printf(
      "synchronous split: generation + scoring%s %.3f s, update side %.3f s per step (%.0f%% "
      "generation)\n",
      options.reference_with_rollout ? " + reference" : "", sync.gen_s, sync.train_s,
      100 * sync.gen_s / (sync.gen_s + sync.train_s));
  // Perfect overlap with each side as fast as in the synchronous run: the step is the longer
  // side alone.
  const double ceiling = sync.step_s / std::max(1e-9, std::max(sync.gen_s, sync.train_s));
  std::printf("ceiling of the ratio: sync step / max(generation, update side) = %.2fx\n", ceiling);
  std::printf("%-4s %10s %15s %9s %9s %10s %10s %10s %16s\n", "k", "s/step", "range", "steps/s",
              "vs sync", "of ceil.", "waited s", "staleness", "s to val>=");
  for (size_t i = 0; i < results.size(); ++i) {
    const RunResult& r = results[i];
    const double ratio = sync.step_s / r.step_s;
    std::printf("%-4d %10.3f %7.3f-%-7.3f %9.3f %8.2fx %9.2f %10.3f %10.2f %13s\n", r.k, r.step_s,
                range[i].first, range[i].second, 1 / r.step_s, ratio, ratio / ceiling, r.wait_s,
                r.staleness,
                r.seconds_to_target >= 0
                    ? absl::StrFormat("%.1f (%.2f)", r.seconds_to_target, options.target).c_str()
                    : "not reached");
  }
  std::printf("books (every step of every round):");
  for (size_t i = 0; i < results.size(); ++i) {
    for (int round = 0; round < options.repeats; ++round) {
      const RunResult& r = rounds[round][i];
      std::printf(" k=%d: %d steps x %.0f-%.0f samples, %.0f dropped stale;", r.k, r.steps_logged,
                  r.samples_min, r.samples_max, r.dropped_stale);
    }
  }
  std::printf("\n");
  if (!sync.validation.empty()) {
    std::printf("validation reward at equal steps:\n%-6s", "step");
    for (const RunResult& r : results) std::printf("   k=%d ", r.k);
    std::printf("\n");
    std::map<int, double> largest_gap;
    for (const auto& [step, value] : sync.validation) {
      std::printf("%-6lld", static_cast<long long>(step));
      for (const RunResult& r : results) {
        auto it = r.validation.find(step);
        if (it == r.validation.end()) {
          std::printf("   -    ");
          continue;
        }
        std::printf(" %6.3f ", it->second);
        largest_gap[r.k] = std::max(largest_gap[r.k], std::abs(it->second - value));
      }
      std::printf("\n");
    }
    for (const auto& [k, gap] : largest_gap) {
      if (k > 0) std::printf("largest |k=%d - sync| over the curve: %.3f\n", k, gap);
    }
  }
  std::printf("runs: %s\n", dir.c_str());
  return 0;
}
