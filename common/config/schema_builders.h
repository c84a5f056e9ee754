// Builders for the rows of the key table (schema.cc). Each takes the dotted key and an
// accessor to the bound Config field, produced together by RLMESH_CONFIG_KEY(path) so the
// key's name is the field's path and cannot drift from it; the static_asserts tie the row's
// type to the field's type. Internal to common/config.
#pragma once

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/schema.h"
#include "common/config/value_parse.h"
#include "common/status/status_macros.h"

// Expands to `"a.b.c", [](Config& c) -> auto& { return c.a.b.c; }`.
#define RLMESH_CONFIG_KEY(path) \
#path, [](::rlmesh::config::Config & c) -> auto& { return c.path; }

namespace rlmesh::config::schema_internal {

template <typename F>
using FieldOf = std::remove_reference_t<std::invoke_result_t<F, Config&>>;

// Reading through the accessor never writes; the accessor takes Config& only so that one
// lambda serves both directions.
template <typename F>
const FieldOf<F>& Read(const F& field, const Config& config) {
  return field(const_cast<Config&>(config));
}

inline KeySpec Row(const char* key, std::string type, YAML::Node default_value,
                   std::string expected, const char* help) {
  KeySpec spec;
  spec.key = key;
  spec.type = std::move(type);
  spec.default_value = std::move(default_value);
  spec.expected = std::move(expected);
  spec.help = help;
  return spec;
}

inline std::string Quoted(const std::vector<std::string>& choices) {
  return absl::StrJoin(choices, ", ", [](std::string* out, const std::string& c) {
    absl::StrAppend(out, "\"", c, "\"");
  });
}

template <typename F>
KeySpec Int(const char* key, F field, int64_t default_value, NumberRange range, const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, int64_t>, "Int() binds an int64_t field");
  KeySpec s = Row(key, "int", YAML::Node(absl::StrCat(default_value)),
                  DescribeRange(range, /*integer=*/true), help);
  s.set = [field, range, expected = s.expected](const YAML::Node& v, Config& c) -> absl::Status {
    ASSIGN_OR_RETURN(field(c), ParseInt(v, range, expected));
    return absl::OkStatus();
  };
  s.get = [field](const Config& c) { return YAML::Node(absl::StrCat(Read(field, c))); };
  return s;
}

// An integer that may be null (verl's `null` = "derive it" or "no limit").
template <typename F>
KeySpec OptInt(const char* key, F field, NumberRange range, const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, std::optional<int64_t>>,
                "OptInt() binds an std::optional<int64_t> field");
  KeySpec s = Row(key, "int or null", YAML::Node(YAML::NodeType::Null),
                  DescribeRange(range, /*integer=*/true) + " or null", help);
  s.set = [field, range, expected = s.expected](const YAML::Node& v, Config& c) -> absl::Status {
    if (v.IsNull()) {
      field(c).reset();
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(field(c), ParseInt(v, range, expected));
    return absl::OkStatus();
  };
  s.get = [field](const Config& c) {
    const auto& value = Read(field, c);
    return value.has_value() ? YAML::Node(absl::StrCat(*value)) : YAML::Node(YAML::NodeType::Null);
  };
  return s;
}

template <typename F>
KeySpec Float(const char* key, F field, double default_value, NumberRange range, const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, double>, "Float() binds a double field");
  KeySpec s = Row(key, "float", YAML::Node(FormatDouble(default_value)),
                  DescribeRange(range, /*integer=*/false), help);
  s.set = [field, range, expected = s.expected](const YAML::Node& v, Config& c) -> absl::Status {
    ASSIGN_OR_RETURN(field(c), ParseFloat(v, range, expected));
    return absl::OkStatus();
  };
  s.get = [field](const Config& c) { return YAML::Node(FormatDouble(Read(field, c))); };
  return s;
}

template <typename F>
KeySpec Bool(const char* key, F field, bool default_value, const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, bool>, "Bool() binds a bool field");
  KeySpec s = Row(key, "bool", YAML::Node(default_value ? "true" : "false"), "true or false", help);
  s.set = [field, expected = s.expected](const YAML::Node& v, Config& c) -> absl::Status {
    ASSIGN_OR_RETURN(field(c), ParseBool(v, expected));
    return absl::OkStatus();
  };
  s.get = [field](const Config& c) { return YAML::Node(Read(field, c) ? "true" : "false"); };
  return s;
}

// A CPU list ("0-3,8", value_parse.h ParseCpuList) kept as its text; empty by default.
template <typename F>
KeySpec CpuList(const char* key, F field, const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, std::string>, "CpuList() binds a std::string field");
  KeySpec s =
      Row(key, "string", YAML::Node(std::string()), "a CPU list such as \"0-3,8\", or empty", help);
  s.set = [field, expected = s.expected](const YAML::Node& v, Config& c) -> absl::Status {
    ASSIGN_OR_RETURN(std::string text, ParseString(v, expected));
    RETURN_IF_ERROR(ParseCpuList(text).status());
    field(c) = std::move(text);
    return absl::OkStatus();
  };
  s.get = [field](const Config& c) { return YAML::Node(Read(field, c)); };
  return s;
}

template <typename F>
KeySpec Str(const char* key, F field, const char* default_value, const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, std::string>, "Str() binds a std::string field");
  KeySpec s = Row(key, "string", YAML::Node(std::string(default_value)), "a string", help);
  s.set = [field, expected = s.expected](const YAML::Node& v, Config& c) -> absl::Status {
    ASSIGN_OR_RETURN(field(c), ParseString(v, expected));
    return absl::OkStatus();
  };
  s.get = [field](const Config& c) { return YAML::Node(Read(field, c)); };
  s.string_field = [field](Config& c) -> std::string* { return &field(c); };
  return s;
}

template <typename F>
KeySpec OptStr(const char* key, F field, const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, std::optional<std::string>>,
                "OptStr() binds an std::optional<std::string> field");
  KeySpec s =
      Row(key, "string or null", YAML::Node(YAML::NodeType::Null), "a string or null", help);
  s.set = [field, expected = s.expected](const YAML::Node& v, Config& c) -> absl::Status {
    if (v.IsNull()) {
      field(c).reset();
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(field(c), ParseString(v, expected));
    return absl::OkStatus();
  };
  s.get = [field](const Config& c) {
    const auto& value = Read(field, c);
    return value.has_value() ? YAML::Node(*value) : YAML::Node(YAML::NodeType::Null);
  };
  s.string_field = [field](Config& c) -> std::string* {
    auto& value = field(c);
    return value.has_value() ? &*value : nullptr;
  };
  return s;
}

template <typename F>
KeySpec Enum(const char* key, F field, const char* default_value, std::vector<std::string> choices,
             const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, std::string>, "Enum() binds a std::string field");
  KeySpec s = Row(key, "enum", YAML::Node(std::string(default_value)),
                  absl::StrCat("one of ", Quoted(choices)), help);
  s.set = [field, choices, expected = s.expected](const YAML::Node& v, Config& c) -> absl::Status {
    ASSIGN_OR_RETURN(std::string value, ParseString(v, expected));
    for (const std::string& choice : choices) {
      if (value == choice) {
        field(c) = value;
        return absl::OkStatus();
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", expected, ", got ", DescribeValue(v)));
  };
  s.get = [field](const Config& c) { return YAML::Node(Read(field, c)); };
  s.string_field = [field](Config& c) -> std::string* { return &field(c); };
  return s;
}

// A string from `choices`, or null (verl's `null` = "use another key's value").
template <typename F>
KeySpec OptEnum(const char* key, F field, std::vector<std::string> choices, const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, std::optional<std::string>>,
                "OptEnum() binds an std::optional<std::string> field");
  KeySpec s = Row(key, "enum or null", YAML::Node(YAML::NodeType::Null),
                  absl::StrCat("one of ", Quoted(choices), " or null"), help);
  s.set = [field, choices, expected = s.expected](const YAML::Node& v, Config& c) -> absl::Status {
    if (v.IsNull()) {
      field(c).reset();
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(std::string value, ParseString(v, expected));
    if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected ", expected, ", got ", DescribeValue(v)));
    }
    field(c) = value;
    return absl::OkStatus();
  };
  s.get = [field](const Config& c) {
    const auto& value = Read(field, c);
    return value.has_value() ? YAML::Node(*value) : YAML::Node(YAML::NodeType::Null);
  };
  s.string_field = [field](Config& c) -> std::string* {
    auto& value = field(c);
    return value.has_value() ? &*value : nullptr;
  };
  return s;
}

// A list of strings; a single string is a list of one. `choices` empty = any string.
template <typename F>
KeySpec StrList(const char* key, F field, std::vector<std::string> default_value,
                std::vector<std::string> choices, const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, std::vector<std::string>>,
                "StrList() binds a std::vector<std::string> field");
  YAML::Node default_node(YAML::NodeType::Sequence);
  for (const std::string& item : default_value) default_node.push_back(item);
  KeySpec s = Row(key, "list[string]", default_node,
                  choices.empty() ? "a string or a list of strings"
                                  : absl::StrCat("a list of ", Quoted(choices)),
                  help);
  s.set = [field, choices, expected = s.expected](const YAML::Node& v, Config& c) -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<YAML::Node> items,
                     ParseList(v, /*scalar_as_list=*/true, expected));
    std::vector<std::string> values;
    for (const YAML::Node& item : items) {
      auto text = ParseString(item, expected);
      bool allowed = text.ok() && choices.empty();
      for (const std::string& choice : choices) allowed = allowed || (text.ok() && *text == choice);
      if (!allowed) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected ", expected, ", got ", DescribeValue(v)));
      }
      values.push_back(*text);
    }
    field(c) = std::move(values);
    return absl::OkStatus();
  };
  s.get = [field](const Config& c) {
    YAML::Node node(YAML::NodeType::Sequence);
    for (const std::string& item : Read(field, c)) node.push_back(item);
    return node;
  };
  return s;
}

// A list of exactly `size` numbers, each in `range`.
template <typename F>
KeySpec FloatList(const char* key, F field, std::vector<double> default_value, size_t size,
                  NumberRange range, const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, std::vector<double>>,
                "FloatList() binds a std::vector<double> field");
  YAML::Node default_node(YAML::NodeType::Sequence);
  for (double item : default_value) default_node.push_back(FormatDouble(item));
  std::string each = DescribeRange(range, /*integer=*/false);  // "a number in [0, 1)"
  KeySpec s = Row(key, "list[float]", default_node,
                  absl::StrCat("a list of ", size, " numbers, each", each.substr(8)), help);
  s.set = [field, size, range, expected = s.expected](const YAML::Node& v,
                                                      Config& c) -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<YAML::Node> items,
                     ParseList(v, /*scalar_as_list=*/false, expected));
    std::vector<double> values;
    for (const YAML::Node& item : items) {
      auto number = ParseFloat(item, range, expected);
      if (!number.ok()) break;
      values.push_back(*number);
    }
    if (values.size() != size || items.size() != size) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected ", expected, ", got ", DescribeValue(v)));
    }
    field(c) = std::move(values);
    return absl::OkStatus();
  };
  s.get = [field](const Config& c) {
    YAML::Node node(YAML::NodeType::Sequence);
    for (double item : Read(field, c)) node.push_back(FormatDouble(item));
    return node;
  };
  return s;
}

// A float that may be null (verl's `null` = "use another key's value").
template <typename F>
KeySpec OptFloat(const char* key, F field, NumberRange range, const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, std::optional<double>>,
                "OptFloat() binds an std::optional<double> field");
  KeySpec s = Row(key, "float or null", YAML::Node(YAML::NodeType::Null),
                  DescribeRange(range, /*integer=*/false) + " or null", help);
  s.set = [field, range, expected = s.expected](const YAML::Node& v, Config& c) -> absl::Status {
    if (v.IsNull()) {
      field(c).reset();
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(field(c), ParseFloat(v, range, expected));
    return absl::OkStatus();
  };
  s.get = [field](const Config& c) {
    const auto& value = Read(field, c);
    return value.has_value() ? YAML::Node(FormatDouble(*value)) : YAML::Node(YAML::NodeType::Null);
  };
  return s;
}

// A bool that may be null (verl's `null` = "use another key's value").
template <typename F>
KeySpec OptBool(const char* key, F field, const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, std::optional<bool>>,
                "OptBool() binds an std::optional<bool> field");
  KeySpec s =
      Row(key, "bool or null", YAML::Node(YAML::NodeType::Null), "true, false or null", help);
  s.set = [field, expected = s.expected](const YAML::Node& v, Config& c) -> absl::Status {
    if (v.IsNull()) {
      field(c).reset();
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(field(c), ParseBool(v, expected));
    return absl::OkStatus();
  };
  s.get = [field](const Config& c) {
    const auto& value = Read(field, c);
    return value.has_value() ? YAML::Node(*value ? "true" : "false")
                             : YAML::Node(YAML::NodeType::Null);
  };
  return s;
}

// A mapping of names to values of any YAML type, kept as the text of a JSON object
// (ParseJsonObject): arguments passed on to user code. Its entries can also be set one by
// one, as Hydra does: `+key.name=value` adds or replaces `name` (config_loader.cc).
template <typename F>
KeySpec JsonMap(const char* key, F field, const char* help) {
  static_assert(std::is_same_v<FieldOf<F>, std::string>, "JsonMap() binds a std::string field");
  KeySpec s = Row(key, "map", YAML::Node(YAML::NodeType::Map),
                  "a mapping of names to values (YAML: numbers, strings, booleans, null, lists, "
                  "mappings)",
                  help);
  s.set = [field, expected = s.expected](const YAML::Node& v, Config& c) -> absl::Status {
    ASSIGN_OR_RETURN(field(c), ParseJsonObject(v, expected));
    return absl::OkStatus();
  };
  s.get = [field](const Config& c) { return JsonObjectToYaml(Read(field, c)); };
  return s;
}

// `spec` with every value refused but `allowed` (YAML, as the key is written; compared after
// parsing, so "1.0" and "1" are the same float). `reason` says why and what to use instead.
inline KeySpec Only(KeySpec spec, const std::vector<std::string>& allowed, std::string reason) {
  std::vector<std::string> canonical;
  std::vector<std::string> shown;  // for the docs: the empty string as ""
  for (const std::string& text : allowed) {
    canonical.push_back(ReadBackText(spec, YAML::Load(text)));
    shown.push_back(canonical.back().empty() ? "\"\"" : canonical.back());
  }
  spec.supported = absl::StrCat(absl::StrJoin(shown, ", "), " only: ", reason);
  spec.refusal = [get = spec.get, canonical, reason](const Config& c) -> std::string {
    const std::string value = ValueText(get(c));
    for (const std::string& ok : canonical) {
      if (value == ok) return "";
    }
    return reason;
  };
  return spec;
}

// `spec` refused where `refuse(config)` gives a reason; `supported` describes what is not
// refused, for the docs.
inline KeySpec RefuseIf(KeySpec spec, std::string supported,
                        std::function<std::string(const Config&)> refuse) {
  spec.supported = std::move(supported);
  spec.refusal = std::move(refuse);
  return spec;
}

}  // namespace rlmesh::config::schema_internal
