// `rlmesh config-keys`: every configuration key with its type, default, allowed values and
// meaning, as the Markdown tables of docs/config.md.
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "common/config/schema.h"

namespace rlmesh::cli {
namespace {

int ConfigKeys(int argc, char** argv) {
  if (argc > 1) {
    const bool help = std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h";
    std::fputs("usage: rlmesh config-keys\n\nPrints every config key as Markdown tables.\n",
               help ? stdout : stderr);
    return help ? 0 : 2;
  }
  std::fputs(config::KeyTableMarkdown().c_str(), stdout);
  return 0;
}

}  // namespace

RLMESH_REGISTER_COMMAND("config-keys", "list every config key (Markdown)", ConfigKeys);

}  // namespace rlmesh::cli
