// Subcommands of the `rlmesh` binary. Each subcommand lives in its own file in cli/ and
// registers itself with RLMESH_REGISTER_COMMAND; main.cc dispatches on argv[1].
#pragma once

#include <functional>
#include <map>
#include <string>

namespace rlmesh::cli {

// Runs a subcommand. argv[0] is the subcommand's name; returns the process exit code.
using CommandFn = std::function<int(int argc, char** argv)>;

struct Command {
  std::string summary;  // one line for `rlmesh help`
  CommandFn run;
};

// The registry, ordered by name. Filled during static initialisation.
std::map<std::string, Command>& Commands();

struct CommandRegistrar {
  CommandRegistrar(const std::string& name, const std::string& summary, CommandFn fn) {
    Commands()[name] = Command{summary, std::move(fn)};
  }
};

}  // namespace rlmesh::cli

#define RLMESH_REGISTER_COMMAND(name, summary, fn) \
  static ::rlmesh::cli::CommandRegistrar RLMESH_CLI_CONCAT(rlmesh_cmd_, __LINE__)(name, summary, fn)
#define RLMESH_CLI_CONCAT_INNER(a, b) a##b
#define RLMESH_CLI_CONCAT(a, b) RLMESH_CLI_CONCAT_INNER(a, b)
