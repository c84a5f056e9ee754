// Fuzz target: a Hugging Face config.json through ModelConfig::FromJson, the parser behind
// the dry-run, `rlmesh run` and every model loader. An accepted config is then used as they
// use it (its parameter count and tensor shapes), and must keep the promise of ToJson: the text
// it writes reads back to the same config.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/model/model_config.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rlmesh::fuzz::Fail;
  auto config = rlmesh::model::ModelConfig::FromJson(std::string(rlmesh::fuzz::AsText(data, size)),
                                                     "config.json");
  if (!config.ok()) return 0;
  ++rlmesh::fuzz::AcceptedInputs();

  (void)config->NumParameters();  // walks TensorShapes(), as the dry-run's estimate does
  const std::string written = config->ToJson();
  auto again = rlmesh::model::ModelConfig::FromJson(written, "config.json written back");
  if (!again.ok()) Fail("the ToJson text of an accepted config.json does not parse");
  if (again->ToJson() != written) Fail("the ToJson text reads back to a different config");
  return 0;
}
