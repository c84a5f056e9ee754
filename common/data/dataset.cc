#include "common/data/dataset.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status/nesting.h"
#include "nlohmann/json.hpp"

namespace rlmesh::data {
namespace {

using Json = nlohmann::json;

const char* TypeName(const Json& value) { return value.type_name(); }

absl::Status FieldError(const std::string& where, const std::string& field,
                        const std::string& expected, const Json& found) {
  std::string shown = found.is_null() ? "nothing" : absl::StrCat(TypeName(found), " ", found.dump());
  if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": field \"", field, "\": expected ", expected, ", got ", shown));
}

absl::StatusOr<DataRow> ParseRow(const Json& row, const std::string& where,
                                 const DatasetOptions& options) {
  if (!row.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected a JSON object per line, got ", TypeName(row)));
  }
  DataRow out;
  out.source = where;

  const std::string& prompt_key = options.prompt_key;
  const Json prompt = row.contains(prompt_key) ? row.at(prompt_key) : Json();
  if (!prompt.is_array() || prompt.empty()) {
    return FieldError(where, prompt_key,
                      "a non-empty list of chat messages {\"role\", \"content\"} (data.prompt_key)",
                      prompt);
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    const Json& message = prompt[i];
    const std::string field = absl::StrCat(prompt_key, "[", i, "]");
    if (!message.is_object()) {
      return FieldError(where, field, "an object {\"role\", \"content\"}", message);
    }
    const Json role = message.contains("role") ? message.at("role") : Json();
    const Json content = message.contains("content") ? message.at("content") : Json();
    if (!role.is_string() || role.get<std::string>().empty()) {
      return FieldError(where, field + ".role", "a non-empty string", role);
    }
    if (!content.is_string()) return FieldError(where, field + ".content", "a string", content);
    out.prompt.push_back({role.get<std::string>(), content.get<std::string>()});
  }

  const Json source = row.contains(options.reward_fn_key) ? row.at(options.reward_fn_key) : Json();
  if (!source.is_string() || source.get<std::string>().empty()) {
    return FieldError(where, options.reward_fn_key,
                      "a non-empty string naming the scorer (data.reward_fn_key)", source);
  }
  out.data_source = source.get<std::string>();

  const Json reward = row.contains("reward_model") ? row.at("reward_model") : Json();
  if (!reward.is_object()) {
    return FieldError(where, "reward_model", "an object {\"style\", \"ground_truth\"}", reward);
  }
  const Json truth = reward.contains("ground_truth") ? reward.at("ground_truth") : Json();
  if (truth.is_string()) {
    out.ground_truth = truth.get<std::string>();
  } else if (truth.is_number()) {
    out.ground_truth = truth.dump();  // 42 -> "42", 2.5 -> "2.5"
  } else {
    return FieldError(where, "reward_model.ground_truth", "a string or a number", truth);
  }
  const Json style = reward.contains("style") ? reward.at("style") : Json("rule");
  if (!style.is_string()) return FieldError(where, "reward_model.style", "a string", style);
  out.reward_style = style.get<std::string>();

  if (row.contains("ability")) {
    const Json& ability = row.at("ability");
    if (!ability.is_string()) return FieldError(where, "ability", "a string", ability);
    out.ability = ability.get<std::string>();
  }

  const Json extra = row.contains("extra_info") ? row.at("extra_info") : Json::object();
  if (!extra.is_object() && !extra.is_null()) {
    return FieldError(where, "extra_info", "an object", extra);
  }
  out.extra_info_json = extra.is_null() ? "{}" : extra.dump();
  if (extra.is_object()) {
    for (const auto& [key, value] : extra.items()) {
      if (value.is_string()) out.extra_info_strings[key] = value.get<std::string>();
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<DataRow>> ParseJsonlDataset(const std::string& text,
                                                       const std::string& name,
                                                       const DatasetOptions& options) {
  std::vector<DataRow> rows;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const std::string where = absl::StrCat(name, ":", line_number);
    Json row;
    if (absl::Status deep = CheckNesting(line, where); !deep.ok()) return deep;
    try {
      row = Json::parse(line.begin(), line.end());
    } catch (const Json::exception& e) {  // parse_error, and out_of_range for 1e400
      return absl::InvalidArgumentError(absl::StrCat(where, ": not valid JSON: ", e.what()));
    }
    absl::StatusOr<DataRow> parsed = ParseRow(row, where, options);
    if (!parsed.ok()) return parsed.status();
    rows.push_back(*std::move(parsed));
  }
  return rows;
}

absl::StatusOr<std::vector<DataRow>> ReadDataset(const std::vector<std::string>& paths,
                                                 const DatasetOptions& options) {
  if (paths.empty()) {
    return absl::InvalidArgumentError("no dataset files given: expected at least one .jsonl path");
  }
  std::vector<DataRow> rows;
  for (const std::string& path : paths) {
    if (absl::EndsWith(path, ".parquet")) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": Parquet is not supported (Debian 12 has no Arrow/Parquet C++ library); "
                "convert it once with: python3 -c \"import pandas as pd; pd.read_parquet('",
          path, "').to_json('", path.substr(0, path.size() - 8),
          ".jsonl', orient='records', lines=True)\""));
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      return absl::NotFoundError(absl::StrCat(path, ": cannot open the dataset file"));
    }
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<std::vector<DataRow>> parsed = ParseJsonlDataset(text.str(), path, options);
    if (!parsed.ok()) return parsed.status();
    if (parsed->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": no rows (the file is empty)"));
    }
    for (DataRow& row : *parsed) rows.push_back(std::move(row));
  }
  return rows;
}

absl::Status WriteJsonlDataset(const std::vector<DataRow>& rows, const std::string& path) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat(temporary, ": cannot write"));
    for (const DataRow& row : rows) {
      nlohmann::ordered_json line;
      line["data_source"] = row.data_source;
      nlohmann::ordered_json prompt = nlohmann::ordered_json::array();
      for (const ChatMessage& m : row.prompt) {
        prompt.push_back({{"role", m.role}, {"content", m.content}});
      }
      line["prompt"] = std::move(prompt);
      line["ability"] = row.ability;
      line["reward_model"] = {{"style", row.reward_style}, {"ground_truth", row.ground_truth}};
      try {
        line["extra_info"] = nlohmann::ordered_json::parse(
            row.extra_info_json.empty() ? "{}" : row.extra_info_json);
      } catch (const nlohmann::ordered_json::parse_error& e) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": row from ", row.source, ": extra_info_json is not valid JSON: ", e.what()));
      }
      out << line.dump() << '\n';
    }
    out.flush();
    if (!out) return absl::DataLossError(absl::StrCat(temporary, ": write failed"));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot rename ", temporary, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace rlmesh::data
