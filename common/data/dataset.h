// Reads prompt datasets in verl's row schema (examples/data_preprocess/*.py) from JSON Lines:
// one object per line with
//   <prompt_key>   list of chat messages {"role": ..., "content": ...}   (data.prompt_key)
//   <reward_fn_key> string naming the scorer, e.g. "openai/gsm8k"       (data.reward_fn_key)
//   reward_model   {"style": "rule", "ground_truth": "..."}             (a number is accepted)
//   ability        string, optional
//   extra_info     object, optional, passed through untouched
// Errors name the file, the 1-based line and the field. Parquet is not readable here (Debian 12
// ships no Arrow/Parquet C++ library); docs/data.md gives a one-line conversion.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rlmesh::data {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" or "tool"
  std::string content;
};

struct DataRow {
  std::vector<ChatMessage> prompt;
  std::string data_source;
  std::string ability;
  std::string reward_style;  // reward_model.style ("rule" when absent)
  std::string ground_truth;  // reward_model.ground_truth, as text
  std::string extra_info_json;  // extra_info as compact JSON ("{}" when absent)
  std::map<std::string, std::string> extra_info_strings;  // its string-valued entries
  std::string source;  // "file:line" the row came from
};

struct DatasetOptions {
  std::string prompt_key = "prompt";          // data.prompt_key
  std::string reward_fn_key = "data_source";  // data.reward_fn_key
};

// Parses one JSON Lines text; `name` is used in error messages. Blank lines are skipped.
absl::StatusOr<std::vector<DataRow>> ParseJsonlDataset(const std::string& text,
                                                       const std::string& name,
                                                       const DatasetOptions& options);

// Reads and concatenates the files in order (data.train_files / data.val_files). An empty
// list, a missing file, a .parquet file or an empty dataset is an error naming the file.
absl::StatusOr<std::vector<DataRow>> ReadDataset(const std::vector<std::string>& paths,
                                                 const DatasetOptions& options);

// Writes rows as JSON Lines in the same schema (keys in verl's order), replacing `path`
// atomically (written to a temporary file, then renamed).
absl::Status WriteJsonlDataset(const std::vector<DataRow>& rows, const std::string& path);

}  // namespace rlmesh::data
