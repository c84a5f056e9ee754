// Fuzz target: the YAML run config and its key=value overrides through LoadConfigFromString,
// the loader of `rlmesh run` and `rlmesh dry-run`. The input is the YAML text, optionally
// followed by a line "%%" and one override per line. An accepted config must keep the promise
// of ConfigToYaml: the text it prints loads back to the same config.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rlmesh::fuzz::Fail;
  namespace config = rlmesh::config;
  const std::string_view input = rlmesh::fuzz::AsText(data, size);
  constexpr std::string_view kCut = "\n%%\n";
  const size_t cut = input.find(kCut);
  const std::string yaml(input.substr(0, cut));
  std::vector<std::string> overrides;
  if (cut != std::string_view::npos) {
    std::string_view rest = input.substr(cut + kCut.size());
    while (!rest.empty()) {
      const size_t end = rest.find('\n');
      if (end != 0) overrides.emplace_back(rest.substr(0, end));
      rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    }
  }
  auto loaded = config::LoadConfigFromString(yaml, overrides, "fuzz.yaml");
  if (!loaded.ok()) return 0;
  ++rlmesh::fuzz::AcceptedInputs();

  const std::string printed = config::ConfigToYaml(*loaded);
  auto again = config::LoadConfigFromString(printed, {}, "printed.yaml");
  if (!again.ok()) Fail("the ConfigToYaml text of an accepted config does not load");
  if (config::ConfigToYaml(*again) != printed) {
    Fail("the ConfigToYaml text loads back to a different config");
  }
  return 0;
}
