// rlmesh: one binary for the commands a user runs by hand (dry-run, run, make-tiny-model,
// tokenize, generate, logprobs, ...). The services have binaries of their own.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/command.h"
#include "common/process/malloc_arenas.h"
#include "common/status/grpc_status.h"

namespace rlmesh::cli {

std::map<std::string, Command>& Commands() {
  static auto* commands = new std::map<std::string, Command>();
  return *commands;
}

namespace {

void PrintUsage(FILE* out) {
  std::fprintf(out, "usage: rlmesh COMMAND [args...]\n\ncommands:\n");
  for (const auto& [name, command] : Commands()) {
    std::fprintf(out, "  %-18s %s\n", name.c_str(), command.summary.c_str());
  }
  std::fprintf(out, "\n`rlmesh COMMAND --help` describes one command.\n");
}

}  // namespace
}  // namespace rlmesh::cli

int main(int argc, char** argv) try {
  rlmesh::process::UseOneMallocArena();  // before any thread starts
  using rlmesh::cli::Commands;
  if (argc < 2 || std::strcmp(argv[1], "help") == 0 || std::strcmp(argv[1], "--help") == 0 ||
      std::strcmp(argv[1], "-h") == 0) {
    rlmesh::cli::PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  auto it = Commands().find(argv[1]);
  if (it == Commands().end()) {
    std::fprintf(stderr, "rlmesh: unknown command \"%s\"\n\n", argv[1]);
    rlmesh::cli::PrintUsage(stderr);
    return 2;
  }
  return it->second.run(argc - 1, argv + 1);
} catch (...) {
  // The one boundary of the process: whatever escaped is named, not std::terminate's abort.
  return rlmesh::ExitFromCurrentException("rlmesh");
}
