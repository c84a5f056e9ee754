// Strict parsing of YAML values into the types of configuration keys, and the wording of
// what each key accepts. Every error is InvalidArgument with the message
// `expected <what>, got <value>`; the caller prefixes the key and where the value came from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "yaml-cpp/yaml.h"

namespace rlmesh::config {

// Allowed numeric values: [min, max] with either end open or absent, plus optionally one
// extra sentinel value (e.g. -1 meaning "disabled").
struct NumberRange {
  std::optional<double> min;
  std::optional<double> max;
  bool min_exclusive = false;
  bool max_exclusive = false;
  std::optional<int64_t> sentinel;
  std::string sentinel_meaning;  // "no limit" for top_k = -1
};

NumberRange AnyNumber();
NumberRange AtLeast(double min);
NumberRange Above(double min);
NumberRange Between(double min, double max);       // [min, max]
NumberRange AboveAtMost(double min, double max);   // (min, max]
NumberRange AtLeastBelow(double min, double max);  // [min, max)
NumberRange OrSentinel(NumberRange range, int64_t sentinel, std::string meaning);

bool InRange(double value, const NumberRange& range);

// "an integer >= 1", "a number in (0, 1]", "-1 (no limit) or an integer >= 1".
std::string DescribeRange(const NumberRange& range, bool integer);
// "[0.9, 0.999]", "\"token-mean\"", "null": how a value is shown in messages.
std::string DescribeValue(const YAML::Node& value);
// Shortest decimal text that reads back to the same double ("0.001", "3e-04" -> "0.0003").
std::string FormatDouble(double value);

absl::StatusOr<int64_t> ParseInt(const YAML::Node& value, const NumberRange& range,
                                 const std::string& expected);
absl::StatusOr<double> ParseFloat(const YAML::Node& value, const NumberRange& range,
                                  const std::string& expected);
absl::StatusOr<bool> ParseBool(const YAML::Node& value, const std::string& expected);
absl::StatusOr<std::string> ParseString(const YAML::Node& value, const std::string& expected);
// A sequence of scalars; a single scalar is accepted as a list of one when
// `scalar_as_list` (as Hydra users write `data.train_files=a.parquet`).
absl::StatusOr<std::vector<YAML::Node>> ParseList(const YAML::Node& value, bool scalar_as_list,
                                                  const std::string& expected);

// A mapping of arguments (custom_reward_function.reward_kwargs) as the text of a JSON object,
// each plain scalar typed as YAML 1.2's core schema and OmegaConf read it: null (~, null, or
// nothing), true/false, an integer, a finite number, else a string; a quoted scalar is always
// a string. Nested mappings and sequences are kept. Null reads as {} (Hydra's "no kwargs").
absl::StatusOr<std::string> ParseJsonObject(const YAML::Node& value, const std::string& expected);
// The JSON object text back as a YAML mapping whose strings are quoted scalars (tag "!"), so
// that ParseJsonObject reads it back unchanged.
YAML::Node JsonObjectToYaml(const std::string& json);

// A CPU list as Linux writes one (`taskset -c`, cpuset.cpus): numbers and ranges separated by
// commas, "0-3,8". The CPUs in ascending order, each once; empty text is an empty list.
absl::StatusOr<std::vector<int>> ParseCpuList(const std::string& text);

}  // namespace rlmesh::config
