#include "common/data/synthetic_tasks.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/data/random.h"
#include "nlohmann/json.hpp"

namespace rlmesh::data {
namespace {

struct Example {
  std::string prompt;
  std::string answer;
};

std::string RandomDigits(Random& random, int n) {
  std::string digits;
  for (int i = 0; i < n; ++i) digits += static_cast<char>('0' + random.Below(10));
  return digits;
}

// A number of `n` digits without a leading zero (a single digit may be 0).
int64_t RandomNumber(Random& random, int n) {
  int64_t lo = 1;
  for (int i = 1; i < n; ++i) lo *= 10;
  const int64_t hi = lo * 10 - 1;
  return n == 1 ? random.Between(0, 9) : random.Between(lo, hi);
}

Example ReverseDigits(Random& random, int digits) {
  Example example;
  const std::string s = RandomDigits(random, digits);
  example.prompt = s + "=";
  example.answer = std::string(s.rbegin(), s.rend());
  return example;
}

Example Arithmetic(Random& random, int a_digits, int b_digits) {
  const int64_t a = RandomNumber(random, a_digits);
  const int64_t b = RandomNumber(random, b_digits);
  return {absl::StrCat(a, "+", b, "="), absl::StrCat(a + b)};
}

// Distinct prompts the task can produce: an upper bound used to refuse impossible requests.
double PromptSpace(const SyntheticTaskOptions& options) {
  const bool arithmetic = options.task == "arithmetic";
  double per_operand = 0;
  for (int d = options.min_digits; d <= options.max_digits; ++d) {
    double count = 1;
    for (int i = 0; i < d; ++i) count *= 10;
    // Operands have no leading zero: 9 * 10^(d-1) of them (10 single digits).
    per_operand += arithmetic && d > 1 ? count * 9 / 10 : count;
  }
  return arithmetic ? per_operand * per_operand : per_operand;
}

DataRow ToRow(const Example& example, const std::string& data_source, const std::string& ability,
              const std::string& split, int64_t index) {
  DataRow row;
  row.prompt.push_back({"user", example.prompt});
  row.data_source = data_source;
  row.ability = ability;
  row.reward_style = "rule";
  row.ground_truth = example.answer;
  row.extra_info_json = nlohmann::ordered_json{{"split", split}, {"index", index}}.dump();
  row.extra_info_strings["split"] = split;
  row.source = absl::StrCat(split, ":", index + 1);
  return row;
}

}  // namespace

std::vector<std::string> SyntheticTaskNames() { return {"reverse_digits", "arithmetic"}; }

absl::StatusOr<SyntheticDataset> MakeSyntheticDataset(const SyntheticTaskOptions& options) {
  const std::vector<std::string> names = SyntheticTaskNames();
  if (std::find(names.begin(), names.end(), options.task) == names.end()) {
    return absl::InvalidArgumentError(absl::StrCat("--task: expected one of ",
                                                   absl::StrJoin(names, ", "), ", got \"",
                                                   options.task, "\""));
  }
  if (options.train_size < 0 || options.val_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--train/--val: expected sizes >= 0, got ",
                                                   options.train_size, " and ",
                                                   options.val_size));
  }
  if (options.min_digits < 1 || options.max_digits > 18 ||
      options.min_digits > options.max_digits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--min-digits/--max-digits: expected 1 <= min <= max <= 18, got ", options.min_digits,
        " and ", options.max_digits));
  }
  const double wanted = static_cast<double>(options.train_size + options.val_size);
  // Rejection sampling of distinct prompts slows down near the full space; stay under half.
  if (wanted > PromptSpace(options) / 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--train + --val = ", options.train_size + options.val_size, " distinct prompts, but ",
        options.task, " with ", options.min_digits, "-", options.max_digits,
        " digits has only ", PromptSpace(options),
        " (at most half can be drawn): widen the digit range or ask for fewer"));
  }

  const bool reverse = options.task == "reverse_digits";
  const std::string data_source = reverse ? "rlmesh/reverse_digits" : "rlmesh/arithmetic";
  const std::string ability = reverse ? "reverse" : "math";
  Random random(options.seed);
  std::set<std::string> seen;
  auto draw = [&]() {
    while (true) {
      const int digits = static_cast<int>(random.Between(options.min_digits, options.max_digits));
      Example example =
          reverse ? ReverseDigits(random, digits)
                  : Arithmetic(random, digits,
                               static_cast<int>(random.Between(options.min_digits,
                                                               options.max_digits)));
      if (seen.insert(example.prompt).second) return example;
    }
  };
  SyntheticDataset dataset;
  // Validation first, so its prompts stay the same whatever the training size.
  for (int64_t i = 0; i < options.val_size; ++i) {
    dataset.val.push_back(ToRow(draw(), data_source, ability, "val", i));
  }
  for (int64_t i = 0; i < options.train_size; ++i) {
    dataset.train.push_back(ToRow(draw(), data_source, ability, "train", i));
  }
  return dataset;
}

}  // namespace rlmesh::data
