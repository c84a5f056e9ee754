// Where a run's records go besides Prometheus: <run_dir>/metrics.jsonl (one JSON object per
// step and per validation, verl's metric names, non-finite values as null), TensorBoard event
// files with the same scalars at the same steps (trainer.logger: tensorboard), the console's
// progress line per step, and trainer.log_val_generations' samples (console and
// <run_dir>/val_generations.jsonl). Files are appended to as records come; a resumed run first
// drops the records after its checkpoint from metrics.jsonl (TensorBoard gets a new event file,
// in which the repeated steps appear again, as with verl). One thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/coordinator/grpo_step.h"
#include "services/coordinator/tensorboard_writer.h"

namespace rlmesh::coordinator {

struct RunLogOptions {
  std::string run_dir;          // rlmesh.run_dir; created if missing
  bool jsonl = true;            // trainer.logger has "jsonl" (metrics.jsonl, val_generations)
  bool console = true;          // trainer.logger has "console"
  int64_t val_generations = 0;  // trainer.log_val_generations: samples per validation
  int64_t total_steps = 0;      // for the progress line's step count and ETA
  int64_t max_staleness = 0;    // shown beside the asynchronous steps' staleness
  std::string tensorboard_dir;  // event files there (trainer.logger: tensorboard); empty: none
};

class RunLog {
 public:
  // INTERNAL naming the folder when the run folder or the event file cannot be created.
  static absl::StatusOr<std::unique_ptr<RunLog>> Create(const RunLogOptions& options);

  const std::string& metrics_path() const { return metrics_path_; }

  // Keeps the records of steps <= last_kept_step (-1: none) and drops the rest, and any line
  // that is not a step record; written to a temporary file and renamed over the log.
  void Truncate(int64_t last_kept_step);
  // One record {"step": global_step, name: value...} in metrics.jsonl, and the same scalars at
  // that step in TensorBoard; INTERNAL when a file cannot be written.
  absl::Status Append(int64_t global_step, const std::map<std::string, double>& metrics);
  // The step's progress line: reward, KL, lengths, the phases' times and the ETA from
  // `elapsed_s` over `steps_done` steps of this process.
  void PrintProgress(int64_t global_step, const std::map<std::string, double>& metrics,
                     double elapsed_s, int64_t steps_done) const;
  // verl's choice of trainer.log_val_generations samples of a validation.
  absl::Status LogValGenerations(int64_t global_step, const std::vector<ValidationSample>& samples);

 private:
  explicit RunLog(const RunLogOptions& options);

  const RunLogOptions options_;
  const std::string metrics_path_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

// "1h02m", "3m05s", "42s"; "?" for a negative or absurd duration.
std::string FormatDuration(double seconds);

}  // namespace rlmesh::coordinator
