// Command line shared by every rlmesh service binary:
//   rlmesh-<svc> --config FILE [--host H] [--port N] [--metrics_port N] [key=value ...]
// Flags take `--flag value` or `--flag=value`. Arguments of the form key=value are config
// overrides, kept in order for common/config's LoadConfig. Port 0 (the default) picks a free
// port, which the server prints. Parsing only: nothing here reads the config file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rlmesh::rpc {

struct ServiceArgs {
  // --config: path of the YAML config; empty when not given.
  std::string config_path;
  // Dotted key=value overrides, in command-line order.
  std::vector<std::string> overrides;
  // --host: address the gRPC and metrics servers bind; unset = rlmesh.host.
  std::optional<std::string> host;
  // --port: gRPC port, 0 picks a free one; unset = rlmesh.<service>.port.
  std::optional<int> port;
  // --metrics_port: Prometheus /metrics port, 0 picks a free one; unset =
  // rlmesh.<service>.metrics_port.
  std::optional<int> metrics_port;
  // --help (or -h) was given; the caller prints ServiceUsage() and exits 0.
  bool help = false;
};

// Parses argv[1..argc). INVALID_ARGUMENT naming the flag or argument for an unknown flag, a
// flag without its value, a port outside 0..65535, or a positional argument that is not key=value.
absl::StatusOr<ServiceArgs> ParseServiceArgs(int argc, const char* const argv[]);

// Usage text for `program` (e.g. "rlmesh-rollout"), for --help and argument errors.
std::string ServiceUsage(const std::string& program);

}  // namespace rlmesh::rpc
