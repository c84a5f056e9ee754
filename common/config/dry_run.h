// `rlmesh dry-run`: validates a loaded config without starting anything and writes a report
// (resolved config, model, layout, batches, per-device memory estimate against capacity,
// warnings and errors).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config/config.h"
#include "common/config/memory_estimate.h"

namespace rlmesh::config {

struct DryRunOptions {
  bool print_config = true;                    // include the resolved config as YAML
  std::string meminfo_path = "/proc/meminfo";  // for the cpu capacity
  std::string gpu_query = kGpuMemoryQuery;     // for the cuda capacity (memory_estimate.h)
  // The services are about to start: what they need of the model folder (weights, tokenizer)
  // is an error, not a warning (CheckModelFolder).
  bool for_run = false;
  // Check what the whole run needs: the folder of actor_rollout_ref.model.path and the data
  // (false for the reward service, which loads neither and scores for any caller).
  bool whole_run = true;
  // `rlmesh run`: every service on this machine, started by it. What a warning says the run
  // needs (Finding::blocks_run: the model folder, the data files) is an error, and so is a
  // value of a key that `rlmesh run` sets itself for each service (LauncherSetKeys).
  bool local_run = false;
};

struct DryRunResult {
  std::string report;  // human-readable, ends with "result: valid" or "result: invalid"
  int errors = 0;
  int warnings = 0;
  // Warnings that are errors for `rlmesh run` (the model folder or a data file is missing):
  // the config is a valid plan but `rlmesh run` would refuse it.
  int run_blockers = 0;
  std::vector<std::string> error_lines;    // "error: ..." as in the report
  std::vector<std::string> warning_lines;  // "warning: ..."
  bool valid() const { return errors == 0; }
};

// Memory above this fraction of the device's capacity is a warning; above 1 an error.
inline constexpr double kMemoryWarningFraction = 0.85;

DryRunResult RunDryRun(const Config& config, const DryRunOptions& options);

// The dry-run's checks as every binary runs them before it starts anything: OK, or
// FailedPrecondition whose message is the "error: ..." lines `rlmesh dry-run` prints, one per
// line, followed by "(rlmesh dry-run CONFIG shows the whole report)". Warnings go to
// `warnings` (may be null), one line each. `whole_run` false skips the model folder and the
// data (DryRunOptions::whole_run).
absl::Status CheckBeforeStart(const Config& config, bool whole_run,
                              std::vector<std::string>* warnings, bool local_run = false);

// The keys `rlmesh run` sets itself for every service it starts (ports, peer addresses,
// replica and rank ids): a value the user gives them would be overridden.
const std::vector<std::string>& LauncherSetKeys();

// LoadConfig, then CheckBeforeStart; the warnings are printed to stderr as
// "<program>: warning: ...". What every service binary does first.
absl::StatusOr<Config> LoadConfigForStart(const std::string& program, const std::string& path,
                                          const std::vector<std::string>& overrides,
                                          bool whole_run);

}  // namespace rlmesh::config
