// Synthetic tasks with verifiable answers, written as datasets in verl's row schema, for the
// quickstart and for tests (`rlmesh make-dataset`):
//   reverse_digits  prompt "1234=", ground truth "4321"; data_source rlmesh/reverse_digits
//   arithmetic      prompt "12+345=", ground truth "357", answered as "#### 357" (gsm8k
//                   style); data_source rlmesh/arithmetic
// Generation is deterministic in the seed, and no prompt appears twice across the train and
// validation sets (validation is held out).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/data/dataset.h"

namespace rlmesh::data {

struct SyntheticTaskOptions {
  std::string task = "reverse_digits";  // reverse_digits | arithmetic
  int64_t train_size = 5000;
  int64_t val_size = 200;
  uint64_t seed = 1;
  int min_digits = 3;  // digits of the string (reverse_digits) or of each operand (arithmetic)
  int max_digits = 6;
};

struct SyntheticDataset {
  std::vector<DataRow> train;
  std::vector<DataRow> val;
};

// INVALID_ARGUMENT names the option when the task is unknown, a size is negative, the digit
// range is empty or outside 1..18, or there are fewer distinct prompts than rows asked for.
absl::StatusOr<SyntheticDataset> MakeSyntheticDataset(const SyntheticTaskOptions& options);

// The task names MakeSyntheticDataset accepts.
std::vector<std::string> SyntheticTaskNames();

}  // namespace rlmesh::data
