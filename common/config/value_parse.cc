#include "common/config/value_parse.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace rlmesh::config {
namespace {

absl::Status Mismatch(const std::string& expected, const YAML::Node& value) {
  return absl::InvalidArgumentError(
      absl::StrCat("expected ", expected, ", got ", DescribeValue(value)));
}

// Bounds read as in prose: "> 1", "in (0, 1]".
std::string FormatBound(double value, bool integer) {
  return integer ? absl::StrCat(static_cast<int64_t>(value)) : absl::StrCat(value);
}

// The scalar text of a plain or quoted YAML scalar; nullopt for null, maps and sequences.
std::optional<std::string> ScalarText(const YAML::Node& value) {
  if (!value.IsDefined() || !value.IsScalar()) return std::nullopt;
  return value.Scalar();
}

bool LooksLikeInteger(const std::string& text) {
  size_t i = (!text.empty() && (text[0] == '-' || text[0] == '+')) ? 1 : 0;
  if (i == text.size()) return false;
  for (; i < text.size(); ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

}  // namespace

NumberRange AnyNumber() { return NumberRange(); }
NumberRange AtLeast(double min) {
  NumberRange r;
  r.min = min;
  return r;
}
NumberRange Above(double min) {
  NumberRange r = AtLeast(min);
  r.min_exclusive = true;
  return r;
}
NumberRange Between(double min, double max) {
  NumberRange r = AtLeast(min);
  r.max = max;
  return r;
}
NumberRange AboveAtMost(double min, double max) {
  NumberRange r = Between(min, max);
  r.min_exclusive = true;
  return r;
}
NumberRange AtLeastBelow(double min, double max) {
  NumberRange r = Between(min, max);
  r.max_exclusive = true;
  return r;
}
NumberRange OrSentinel(NumberRange range, int64_t sentinel, std::string meaning) {
  range.sentinel = sentinel;
  range.sentinel_meaning = std::move(meaning);
  return range;
}

bool InRange(double value, const NumberRange& range) {
  if (range.sentinel.has_value() && value == static_cast<double>(*range.sentinel)) return true;
  if (range.min.has_value() && (range.min_exclusive ? value <= *range.min : value < *range.min)) {
    return false;
  }
  if (range.max.has_value() && (range.max_exclusive ? value >= *range.max : value > *range.max)) {
    return false;
  }
  return true;
}

std::string DescribeRange(const NumberRange& range, bool integer) {
  std::string what = integer ? "an integer" : "a number";
  if (range.min.has_value() && range.max.has_value()) {
    absl::StrAppend(&what, " in ", range.min_exclusive ? "(" : "[",
                    FormatBound(*range.min, integer), ", ", FormatBound(*range.max, integer),
                    range.max_exclusive ? ")" : "]");
  } else if (range.min.has_value()) {
    absl::StrAppend(&what, range.min_exclusive ? " > " : " >= ", FormatBound(*range.min, integer));
  } else if (range.max.has_value()) {
    absl::StrAppend(&what, range.max_exclusive ? " < " : " <= ", FormatBound(*range.max, integer));
  }
  if (range.sentinel.has_value()) {
    what = absl::StrCat(*range.sentinel, " (", range.sentinel_meaning, ") or ", what);
  }
  return what;
}

std::string DescribeValue(const YAML::Node& value) {
  if (!value.IsDefined() || value.IsNull()) return "null";
  if (value.IsScalar()) return absl::StrCat("\"", value.Scalar(), "\"");
  YAML::Emitter out;
  out << YAML::Flow << value;
  return out.c_str();
}

std::string FormatDouble(double value) {
  // Shortest text that reads back to the same double, in %g style (fixed unless the
  // exponent is below -4 or large): "30", "0.0003", "1e-06".
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::general);
  std::string text(buffer, result.ptr);
  // Keep a float recognisable as one when printed: "1" -> "1.0" (but not "1e-06").
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

absl::StatusOr<int64_t> ParseInt(const YAML::Node& value, const NumberRange& range,
                                 const std::string& expected) {
  std::optional<std::string> text = ScalarText(value);
  int64_t parsed = 0;
  if (!text.has_value() || !LooksLikeInteger(*text) || !absl::SimpleAtoi(*text, &parsed) ||
      !InRange(static_cast<double>(parsed), range)) {
    return Mismatch(expected, value);
  }
  return parsed;
}

absl::StatusOr<double> ParseFloat(const YAML::Node& value, const NumberRange& range,
                                  const std::string& expected) {
  std::optional<std::string> text = ScalarText(value);
  double parsed = 0;
  if (!text.has_value() || text->empty() ||
      absl::ascii_isspace(static_cast<unsigned char>(text->front())) ||
      !absl::SimpleAtod(*text, &parsed) || !std::isfinite(parsed) || !InRange(parsed, range)) {
    return Mismatch(expected, value);
  }
  return parsed;
}

absl::StatusOr<bool> ParseBool(const YAML::Node& value, const std::string& expected) {
  std::optional<std::string> text = ScalarText(value);
  if (text.has_value()) {
    const std::string lower = absl::AsciiStrToLower(*text);
    if (lower == "true") return true;
    if (lower == "false") return false;
  }
  return Mismatch(expected, value);
}

absl::StatusOr<std::string> ParseString(const YAML::Node& value, const std::string& expected) {
  std::optional<std::string> text = ScalarText(value);
  if (!text.has_value()) return Mismatch(expected, value);
  return *text;
}

absl::StatusOr<std::vector<YAML::Node>> ParseList(const YAML::Node& value, bool scalar_as_list,
                                                  const std::string& expected) {
  std::vector<YAML::Node> items;
  if (value.IsDefined() && value.IsSequence()) {
    for (const YAML::Node& item : value) items.push_back(item);
    return items;
  }
  if (scalar_as_list && value.IsDefined() && value.IsScalar()) {
    items.push_back(value);
    return items;
  }
  return Mismatch(expected, value);
}

namespace {

bool LooksLikeFloat(const std::string& text) {
  // [-+]? ( digits [. digits?] | . digits ) ([eE] [-+]? digits)?
  size_t i = (!text.empty() && (text[0] == '-' || text[0] == '+')) ? 1 : 0;
  size_t digits = 0;
  while (i < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) ++i, ++digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) {
      ++i, ++digits;
    }
  }
  if (digits == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    size_t exponent = 0;
    while (i < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) {
      ++i, ++exponent;
    }
    if (exponent == 0) return false;
  }
  return i == text.size();
}

// `path` is where in the mapping `value` sits ("reward_kwargs.a.b"), for the messages.
absl::StatusOr<nlohmann::json> ToJson(const YAML::Node& value, const std::string& path) {
  if (!value.IsDefined() || value.IsNull()) return nullptr;
  if (value.IsMap()) {
    nlohmann::json object = nlohmann::json::object();
    for (const auto& entry : value) {
      if (!entry.first.IsScalar()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": expected names as keys, got ", DescribeValue(entry.first)));
      }
      const std::string name = entry.first.Scalar();
      if (object.contains(name)) {
        return absl::InvalidArgumentError(absl::StrCat(path, ".", name, " is given twice"));
      }
      ASSIGN_OR_RETURN(object[name], ToJson(entry.second, absl::StrCat(path, ".", name)));
    }
    return object;
  }
  if (value.IsSequence()) {
    nlohmann::json array = nlohmann::json::array();
    size_t index = 0;
    for (const YAML::Node& item : value) {
      ASSIGN_OR_RETURN(nlohmann::json element, ToJson(item, absl::StrCat(path, "[", index++, "]")));
      array.push_back(std::move(element));
    }
    return array;
  }
  const std::string& text = value.Scalar();
  if (value.Tag() == "!") return text;  // quoted: a string whatever it reads like
  if (text == "~" || text == "null" || text == "Null" || text == "NULL") return nullptr;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  if (LooksLikeInteger(text)) {
    int64_t parsed = 0;
    if (!absl::SimpleAtoi(text, &parsed)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": expected an integer of 64 bits, got ",
                                                     text, " (quote it for a string)"));
    }
    return parsed;
  }
  if (LooksLikeFloat(text)) {
    double parsed = 0;
    if (!absl::SimpleAtod(text, &parsed) || !std::isfinite(parsed)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": expected a finite number, got ", text));
    }
    return parsed;
  }
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == ".inf" || lower == "+.inf" || lower == "-.inf" || lower == ".nan") {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected a finite number, got ", text,
                                                   " (JSON, which carries the "
                                                   "arguments to Python, has no infinity or NaN)"));
  }
  return text;
}

YAML::Node ToYaml(const nlohmann::json& value) {
  if (value.is_object()) {
    YAML::Node map(YAML::NodeType::Map);
    for (const auto& [name, item] : value.items()) map[name] = ToYaml(item);
    return map;
  }
  if (value.is_array()) {
    YAML::Node sequence(YAML::NodeType::Sequence);
    for (const auto& item : value) sequence.push_back(ToYaml(item));
    return sequence;
  }
  if (value.is_null()) return YAML::Node(YAML::NodeType::Null);
  if (value.is_string()) {
    YAML::Node text(value.get<std::string>());
    text.SetTag("!");
    return text;
  }
  if (value.is_boolean()) return YAML::Node(value.get<bool>() ? "true" : "false");
  if (value.is_number_float()) return YAML::Node(FormatDouble(value.get<double>()));
  return YAML::Node(value.dump());  // an integer
}

}  // namespace

absl::StatusOr<std::string> ParseJsonObject(const YAML::Node& value, const std::string& expected) {
  if (!value.IsDefined() || value.IsNull()) return std::string("{}");
  if (!value.IsMap()) return Mismatch(expected, value);
  absl::StatusOr<nlohmann::json> json = ToJson(value, "");
  if (!json.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", expected, ", got ",
                                                   DescribeValue(value), ": at ",
                                                   json.status().message().substr(1)));
  }
  return json->dump();
}

YAML::Node JsonObjectToYaml(const std::string& json) { return ToYaml(nlohmann::json::parse(json)); }

absl::StatusOr<std::vector<int>> ParseCpuList(const std::string& text) {
  constexpr int kMostCpus = 1 << 16;  // beyond any machine; bounds a range's expansion
  auto bad = [&text]() {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a CPU list such as \"0-3,8\", got \"", text, "\""));
  };
  std::vector<bool> chosen;
  if (absl::StripAsciiWhitespace(text).empty()) return std::vector<int>{};
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    const size_t dash = part.find('-');
    int first = 0, last = 0;
    if (dash == absl::string_view::npos) {
      if (!absl::SimpleAtoi(part, &first)) return bad();
      last = first;
    } else if (!absl::SimpleAtoi(part.substr(0, dash), &first) ||
               !absl::SimpleAtoi(part.substr(dash + 1), &last)) {
      return bad();
    }
    if (first < 0 || last < first || last >= kMostCpus) return bad();
    if (static_cast<size_t>(last) >= chosen.size()) chosen.resize(static_cast<size_t>(last) + 1);
    for (int cpu = first; cpu <= last; ++cpu) chosen[static_cast<size_t>(cpu)] = true;
  }
  std::vector<int> cpus;
  for (size_t cpu = 0; cpu < chosen.size(); ++cpu) {
    if (chosen[cpu]) cpus.push_back(static_cast<int>(cpu));
  }
  return cpus;
}

}  // namespace rlmesh::config
