#include "services/coordinator/run_log.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status/nesting.h"
#include "common/status/status_macros.h"
#include "services/coordinator/val_generations.h"

namespace rlmesh::coordinator {

namespace {

double Get(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0.0 : it->second;
}

}  // namespace

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

RunLog::RunLog(const RunLogOptions& options)
    : options_(options),
      metrics_path_((std::filesystem::path(options.run_dir) / "metrics.jsonl").string()) {}

absl::StatusOr<std::unique_ptr<RunLog>> RunLog::Create(const RunLogOptions& options) {
  std::error_code error;
  std::filesystem::create_directories(options.run_dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("rlmesh.run_dir: cannot create ", options.run_dir, ": ", error.message()));
  }
  auto log = std::unique_ptr<RunLog>(new RunLog(options));
  if (!options.tensorboard_dir.empty()) {
    auto writer = TensorBoardWriter::Create(options.tensorboard_dir);
    if (!writer.ok()) {
      return absl::Status(writer.status().code(),
                          absl::StrCat("rlmesh.tensorboard_dir: ", writer.status().message()));
    }
    log->tensorboard_ = *std::move(writer);
  }
  return log;
}

absl::Status RunLog::LogValGenerations(int64_t global_step,
                                       const std::vector<ValidationSample>& samples) {
  if (options_.val_generations <= 0 || samples.empty()) return absl::OkStatus();
  std::vector<std::string> inputs;
  inputs.reserve(samples.size());
  for (const auto& s : samples) inputs.push_back(s.input);
  nlohmann::json record = {{"step", global_step}, {"samples", nlohmann::json::array()}};
  for (size_t index : PickValGenerations(inputs, static_cast<size_t>(options_.val_generations))) {
    const ValidationSample& s = samples[index];
    record["samples"].push_back({{"input", s.input}, {"output", s.output}, {"score", s.score}});
    if (options_.console) {
      std::printf("val generation @ step %lld | score %.3f | input %s | output %s\n",
                  static_cast<long long>(global_step), s.score,
                  nlohmann::json(s.input).dump().c_str(), nlohmann::json(s.output).dump().c_str());
    }
  }
  std::fflush(stdout);
  if (!options_.jsonl) return absl::OkStatus();
  const std::string path =
      (std::filesystem::path(options_.run_dir) / "val_generations.jsonl").string();
  std::ofstream out(path, std::ios::app);
  out << record.dump() << "\n";
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("cannot append to ", path));
  return absl::OkStatus();
}

void RunLog::Truncate(int64_t last_kept_step) {
  // A resumed run repeats the steps after its checkpoint: drop their old records so every step
  // appears once.
  std::ifstream in(metrics_path_);
  if (!in) return;
  std::stringstream kept;
  std::string line;
  while (std::getline(in, line)) {
    // A line that is not a step record (cut short, nested too deep, a non-number step) is
    // dropped with the steps after the checkpoint.
    if (!CheckNesting(line, metrics_path_).ok()) continue;
    auto record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
        record["step"].get<int64_t>() <= last_kept_step) {
      kept << line << "\n";
    }
  }
  in.close();
  const std::string tmp = metrics_path_ + ".tmp";
  std::ofstream(tmp) << kept.str();
  std::filesystem::rename(tmp, metrics_path_);
}

absl::Status RunLog::Append(int64_t global_step, const std::map<std::string, double>& metrics) {
  if (tensorboard_ != nullptr) RETURN_IF_ERROR(tensorboard_->WriteScalars(global_step, metrics));
  if (!options_.jsonl) return absl::OkStatus();
  nlohmann::json record = nlohmann::json::object();
  record["step"] = global_step;
  for (const auto& [name, value] : metrics) {
    record[name] = std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
  }
  std::ofstream out(metrics_path_, std::ios::app);
  out << record.dump() << "\n";
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("cannot append to ", metrics_path_));
  return absl::OkStatus();
}

void RunLog::PrintProgress(int64_t global_step, const std::map<std::string, double>& m,
                           double elapsed_s, int64_t steps_done) const {
  const double eta =
      steps_done > 0 ? elapsed_s / steps_done * (options_.total_steps - global_step) : 0;
  std::printf(
      "step %lld/%lld | reward %.3f | kl %.4f | resp_len %.1f | step %.2fs (gen %.2f reward %.2f "
      "ref %.2f old %.2f update %.2f sync %.2f) | ETA %s\n",
      static_cast<long long>(global_step), static_cast<long long>(options_.total_steps),
      Get(m, "critic/score/mean"), Get(m, "actor/kl_loss"), Get(m, "response_length/mean"),
      Get(m, "timing_s/step"), Get(m, "timing_s/gen"), Get(m, "timing_s/reward"),
      Get(m, "timing_s/ref"), Get(m, "timing_s/old_log_prob"), Get(m, "timing_s/update_actor"),
      Get(m, "timing_s/update_weights"), FormatDuration(eta).c_str());
  if (m.count("rlmesh/staleness/max") > 0) {
    // Asynchronous: how old the samples were, and how long the update waited for them.
    std::printf("  staleness %.0f-%.0f (bound %lld) | waited %.2fs for samples\n",
                Get(m, "rlmesh/staleness/min"), Get(m, "rlmesh/staleness/max"),
                static_cast<long long>(options_.max_staleness),
                Get(m, "timing_s/wait_for_samples"));
  }
  std::fflush(stdout);
}

}  // namespace rlmesh::coordinator
