// PromtoolCheckMetrics: runs `promtool check metrics` (Debian's `prometheus` package) on a
// Prometheus text exposition, for tests that check a /metrics page is valid and lint-clean.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace rlmesh::metrics {

// Path of Debian's promtool.
inline constexpr char kDefaultPromtool[] = "/usr/bin/promtool";

// Returns promtool's output when it accepts `exposition`. NOT_FOUND when `promtool` is not an
// executable file (callers skip their test), FAILED_PRECONDITION with promtool's complaints
// when it rejects the text, INTERNAL when it cannot be run.
absl::StatusOr<std::string> PromtoolCheckMetrics(const std::string& exposition,
                                                 const std::string& promtool = kDefaultPromtool);

}  // namespace rlmesh::metrics
