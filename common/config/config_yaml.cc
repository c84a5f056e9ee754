// Printing: the resolved config as YAML, and the key table as Markdown.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/config/config.h"
#include "common/config/schema.h"
#include "common/config/value_parse.h"

namespace rlmesh::config {
namespace {

bool IsTextType(const std::string& type) {
  return type == "string" || type == "enum" || type == "string or null" || type == "list[string]";
}

// A map key's value (JsonObjectToYaml): its strings, quoted scalars, double-quoted again.
void EmitTyped(YAML::Emitter& out, const YAML::Node& value) {
  if (value.IsMap()) {
    out << YAML::Flow << YAML::BeginMap;
    for (const auto& entry : value) {
      out << YAML::Key << YAML::DoubleQuoted << entry.first.Scalar() << YAML::Value;
      EmitTyped(out, entry.second);
    }
    out << YAML::EndMap;
  } else if (value.IsSequence()) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const YAML::Node& item : value) EmitTyped(out, item);
    out << YAML::EndSeq;
  } else if (value.IsNull()) {
    out << YAML::Null;
  } else {
    if (value.Tag() == "!") out << YAML::DoubleQuoted;
    out << value.Scalar();
  }
}

// Strings are always double-quoted so that "123", "true" or "" read back as strings.
void EmitValue(YAML::Emitter& out, const KeySpec& spec, const YAML::Node& value) {
  if (value.IsMap()) {
    EmitTyped(out, value);
  } else if (value.IsNull()) {
    out << YAML::Null;
  } else if (value.IsSequence()) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const YAML::Node& item : value) {
      if (IsTextType(spec.type)) out << YAML::DoubleQuoted;
      out << item.Scalar();
    }
    out << YAML::EndSeq;
  } else {
    if (IsTextType(spec.type)) out << YAML::DoubleQuoted;
    out << value.Scalar();
  }
}

}  // namespace

std::string ConfigToYaml(const Config& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  // The table lists each section's keys together, so one pass with a stack of open
  // sections emits every section once.
  std::vector<std::string> open;
  for (const KeySpec& spec : Schema()) {
    std::vector<std::string> parts = absl::StrSplit(spec.key, '.');
    const std::string leaf = parts.back();
    parts.pop_back();
    size_t common = 0;
    while (common < open.size() && common < parts.size() && open[common] == parts[common]) {
      ++common;
    }
    for (; open.size() > common; open.pop_back()) out << YAML::EndMap;
    for (; open.size() < parts.size(); open.push_back(parts[open.size()])) {
      out << YAML::Key << parts[open.size()] << YAML::Value << YAML::BeginMap;
    }
    out << YAML::Key << leaf << YAML::Value;
    EmitValue(out, spec, spec.get(config));
  }
  for (; !open.empty(); open.pop_back()) out << YAML::EndMap;
  out << YAML::EndMap;
  return absl::StrCat(out.c_str(), "\n");
}

std::string KeyTableMarkdown() {
  std::string md;
  std::string section;
  for (const KeySpec& spec : Schema()) {
    const std::vector<std::string> parts = absl::StrSplit(spec.key, '.');
    // Group rlmesh.* by its second component, verl's sections by their first.
    const std::string group =
        parts[0] == "rlmesh" && parts.size() > 2 ? absl::StrCat(parts[0], ".", parts[1]) : parts[0];
    if (group != section) {
      section = group;
      absl::StrAppend(&md, md.empty() ? "" : "\n", "### ", section,
                      "\n\n| key | type | default | allowed | meaning | supported today |\n"
                      "|---|---|---|---|---|---|\n");
    }
    std::string default_text =
        spec.default_value.IsScalar()
            ? spec.default_value.Scalar()
            : (spec.default_value.IsNull() ? "null" : DescribeValue(spec.default_value));
    if (default_text.empty()) default_text = "\"\"";
    const std::string supported = spec.supported.empty() ? "every value" : spec.supported;
    absl::StrAppend(&md, "| `", spec.key, "` | ", spec.type, " | `",
                    absl::StrReplaceAll(default_text, {{"|", "\\|"}}), "` | ",
                    absl::StrReplaceAll(spec.expected, {{"|", "\\|"}}), " | ", spec.help, " | ",
                    absl::StrReplaceAll(supported, {{"|", "\\|"}}), " |\n");
  }
  return md;
}

}  // namespace rlmesh::config
