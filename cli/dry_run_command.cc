// `rlmesh dry-run CONFIG [key=value ...]`: validates a config without starting anything.
// Exit status 0 = valid, 1 = invalid, 2 = usage error.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/command.h"
#include "common/config/config.h"
#include "common/config/dry_run.h"

namespace rlmesh::cli {
namespace {

constexpr char kUsage[] =
    "usage: rlmesh dry-run [--brief] CONFIG [key=value ...]\n"
    "\n"
    "Loads CONFIG (YAML with verl's key names plus rlmesh.*), applies the dotted overrides\n"
    "(e.g. actor_rollout_ref.rollout.n=8 actor_rollout_ref.actor.optim.betas=[0.9,0.999]),\n"
    "checks batch sizes, parallel layouts, the model and the services, and estimates the\n"
    "memory per device. Prints the resolved config (unless --brief) and a report.\n"
    "Exit status: 0 valid, 1 invalid, 2 usage error. Keys: `rlmesh config-keys`.\n";

int DryRun(int argc, char** argv) {
  config::DryRunOptions options;
  std::string path;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--brief") {
      options.print_config = false;
    } else if (arg.rfind("--", 0) == 0) {
      std::fprintf(stderr, "rlmesh dry-run: unknown flag %s\n\n%s", arg.c_str(), kUsage);
      return 2;
    } else if (path.empty()) {
      path = arg;
    } else {
      overrides.push_back(arg);
    }
  }
  if (path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  absl::StatusOr<config::Config> config = config::LoadConfig(path, overrides);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\nresult: invalid\n", std::string(config.status().message()).c_str());
    return 1;
  }
  std::printf("rlmesh dry-run: %s\n\n", path.c_str());
  const config::DryRunResult result = config::RunDryRun(*config, options);
  std::fputs(result.report.c_str(), stdout);
  return result.valid() ? 0 : 1;
}

}  // namespace

RLMESH_REGISTER_COMMAND("dry-run", "validate a config and estimate memory, starting nothing",
                        DryRun);

}  // namespace rlmesh::cli
