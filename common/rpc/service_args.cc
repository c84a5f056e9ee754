#include "common/rpc/service_args.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace rlmesh::rpc {
namespace {

absl::Status ParsePort(const std::string& flag, const std::string& value, int* port) {
  if (!absl::SimpleAtoi(value, port) || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected a port number 0..65535, got \"", value, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServiceArgs> ParseServiceArgs(int argc, const char* const argv[]) {
  ServiceArgs args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      args.help = true;
      continue;
    }
    if (!arg.starts_with("--")) {
      const size_t eq = arg.find('=');
      if (eq == std::string::npos || eq == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("argument \"", arg,
                         "\": expected a flag (--config, --host, --port, "
                         "--metrics_port) or a config override key=value"));
      }
      args.overrides.push_back(arg);
      continue;
    }
    // --flag=value or --flag value.
    std::string flag = arg;
    std::string value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    if (flag != "--config" && flag != "--host" && flag != "--port" && flag != "--metrics_port") {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": unknown flag; expected --config, --host, --port, --metrics_port or --help"));
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat(flag, ": missing value"));
      }
      value = argv[++i];
    }
    if (flag == "--config") {
      if (value.empty()) return absl::InvalidArgumentError("--config: expected a file path");
      args.config_path = value;
    } else if (flag == "--host") {
      if (value.empty()) return absl::InvalidArgumentError("--host: expected an address");
      args.host = value;
    } else if (flag == "--port") {
      int port = 0;
      if (absl::Status s = ParsePort(flag, value, &port); !s.ok()) return s;
      args.port = port;
    } else {
      int port = 0;
      if (absl::Status s = ParsePort(flag, value, &port); !s.ok()) return s;
      args.metrics_port = port;
    }
  }
  return args;
}

std::string ServiceUsage(const std::string& program) {
  return absl::StrCat(
      "usage: ", program,
      " --config FILE [--host ADDR] [--port N] [--metrics_port N] [key=value ...]\n"
      "  --config FILE      YAML config (verl key names plus rlmesh.*)\n"
      "  --host ADDR        address to bind (default rlmesh.host; 0.0.0.0 for all)\n"
      "  --port N           gRPC port (default rlmesh.<service>.port); 0 picks a free port\n"
      "                     and prints it\n"
      "  --metrics_port N   Prometheus /metrics port (default rlmesh.<service>.metrics_port);\n"
      "                     0 picks a free port\n"
      "  key=value          config override, e.g. actor_rollout_ref.rollout.n=8\n"
      "  --help             this text\n");
}

}  // namespace rlmesh::rpc
