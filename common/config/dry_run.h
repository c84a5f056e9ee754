// `rlmesh dry-run`: validates a loaded config without starting anything and writes a report
// (resolved config, model, layout, batches, per-device memory estimate against capacity,
// warnings and errors).
#pragma once

#include <string>

#include "common/config/config.h"

namespace rlmesh::config {

struct DryRunOptions {
  bool print_config = true;                    // include the resolved config as YAML
  std::string meminfo_path = "/proc/meminfo";  // for the cpu capacity
};

struct DryRunResult {
  std::string report;  // human-readable, ends with "result: valid" or "result: invalid"
  int errors = 0;
  int warnings = 0;
  bool valid() const { return errors == 0; }
};

// Memory above this fraction of the device's capacity is a warning; above 1 an error.
inline constexpr double kMemoryWarningFraction = 0.85;

DryRunResult RunDryRun(const Config& config, const DryRunOptions& options);

}  // namespace rlmesh::config
