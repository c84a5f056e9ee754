// Fuzz target: dataset rows in verl's schema, as JSON Lines, through ParseJsonlDataset (the
// reader of data.train_files and data.val_files). Accepted rows are written back with
// WriteJsonlDataset and read again, which must give the same rows: the round trip the
// trainer's checkpointed datasets rely on.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

bool SameRow(const rlmesh::data::DataRow& a, const rlmesh::data::DataRow& b) {
  if (a.prompt.size() != b.prompt.size()) return false;
  for (size_t i = 0; i < a.prompt.size(); ++i) {
    if (a.prompt[i].role != b.prompt[i].role || a.prompt[i].content != b.prompt[i].content) {
      return false;
    }
  }
  return a.data_source == b.data_source && a.ability == b.ability &&
         a.reward_style == b.reward_style && a.ground_truth == b.ground_truth &&
         a.extra_info_json == b.extra_info_json && a.extra_info_strings == b.extra_info_strings;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rlmesh::fuzz::Fail;
  namespace ds = rlmesh::data;
  auto rows =
      ds::ParseJsonlDataset(std::string(rlmesh::fuzz::AsText(data, size)), "train.jsonl", {});
  if (!rows.ok()) return 0;
  ++rlmesh::fuzz::AcceptedInputs();
  if (rows->empty()) return 0;

  static const std::string path = (rlmesh::fuzz::ScratchDir() / "rows.jsonl").string();
  if (!ds::WriteJsonlDataset(*rows, path).ok()) Fail("WriteJsonlDataset refused parsed rows");
  auto again = ds::ReadDataset({path}, {});
  if (!again.ok()) Fail("rows written by WriteJsonlDataset do not read back");
  if (again->size() != rows->size()) Fail("rows read back are not as many as were written");
  for (size_t i = 0; i < rows->size(); ++i) {
    if (!SameRow((*rows)[i], (*again)[i])) Fail("a row read back differs from the one written");
  }
  return 0;
}
