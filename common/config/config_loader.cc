// LoadConfig: YAML file -> (key, value, where) assignments -> overrides -> ${...} resolution.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/config/config.h"
#include "common/config/schema.h"
#include "common/config/value_parse.h"
#include "common/status/nesting.h"
#include "common/status/status_macros.h"

namespace rlmesh::config {
namespace {

// One value for one key, and where it came from ("quickstart.yaml:12", "command line").
struct Assignment {
  std::string key;
  YAML::Node value;
  std::string where;
  // For an entry of a map key (JsonMap) set by itself, "custom_reward_function.reward_kwargs.
  // scale: 2": the entry's path below `key` ({"scale"}); `value` replaces that entry only.
  std::vector<std::string> entry = {};
};

std::string UnknownKeyMessage(const std::string& key) {
  if (const char* reason = NotBuiltVerlKey(key); reason != nullptr) {
    return absl::StrCat("config key ", key,
                        " is one of verl's that rlmesh does not have: ", reason);
  }
  std::string message = absl::StrCat("unknown config key \"", key, "\"");
  if (std::optional<std::string> suggestion = SuggestKey(key); suggestion.has_value()) {
    absl::StrAppend(&message, "; did you mean ", *suggestion, "?");
  }
  return message;
}

// The map key (schema type "map") that `key` names an entry of, and the entry's path below it:
// {"custom_reward_function.reward_kwargs", {"scale"}} for "custom_reward_function.reward_kwargs.
// scale"; nullopt when no map key is a prefix of `key`.
std::optional<std::pair<std::string, std::vector<std::string>>> MapEntry(const std::string& key) {
  for (size_t dot = key.rfind('.'); dot != std::string::npos && dot > 0;
       dot = key.rfind('.', dot - 1)) {
    const KeySpec* spec = FindKey(key.substr(0, dot));
    if (spec == nullptr) continue;
    if (spec->type != "map") return std::nullopt;
    std::vector<std::string> path = absl::StrSplit(key.substr(dot + 1), '.');
    if (std::find(path.begin(), path.end(), "") != path.end()) return std::nullopt;
    return std::make_pair(spec->key, std::move(path));
  }
  return std::nullopt;
}

// `map` (a mapping, or null for none) with `value` at `path`, the mappings on the way made as
// needed; `name` is the dotted name of `map`, for the message when an entry on the way is not
// a mapping.
absl::StatusOr<YAML::Node> WithEntry(const YAML::Node& map, const std::vector<std::string>& path,
                                     size_t depth, const YAML::Node& value,
                                     const std::string& name) {
  YAML::Node out(YAML::NodeType::Map);
  YAML::Node below(YAML::NodeType::Null);
  if (map.IsDefined() && map.IsMap()) {
    for (const auto& entry : map) {
      if (entry.first.Scalar() == path[depth]) {
        below.reset(entry.second);
      } else {
        out[entry.first.Scalar()] = entry.second;
      }
    }
  }
  const std::string here = absl::StrCat(name, ".", path[depth]);
  if (depth + 1 == path.size()) {
    out[path[depth]] = value;
    return out;
  }
  if (!below.IsNull() && !below.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        here, " is ", DescribeValue(below), ", not a mapping to set ", path[depth + 1], " in"));
  }
  ASSIGN_OR_RETURN(out[path[depth]], WithEntry(below, path, depth + 1, value, here));
  return out;
}

std::string SectionMessage(const std::string& key, const YAML::Node& value) {
  return absl::StrCat("config key ", key, " is a section: expected a mapping of its keys, got ",
                      DescribeValue(value));
}

// True when `value` at `key` is verl's default of a key rlmesh lacks, or a mapping of nothing
// else ("critic: {enable: false}"): it asks for nothing, and is dropped.
bool AllInertNotBuilt(const std::string& key, const YAML::Node& value) {
  if (IsInertNotBuiltValue(key, value)) return true;
  if (!value.IsMap() || value.size() == 0 || NotBuiltVerlKey(key) == nullptr) return false;
  for (const auto& entry : value) {
    if (!entry.first.IsScalar() ||
        !AllInertNotBuilt(absl::StrCat(key, ".", entry.first.Scalar()), entry.second)) {
      return false;
    }
  }
  return true;
}

// Walks the YAML mapping; a key may itself be dotted ("actor_rollout_ref.rollout.n: 8").
void Flatten(const YAML::Node& map, const std::string& prefix, const std::string& source,
             std::vector<Assignment>* out, std::vector<std::string>* errors) {
  for (const auto& entry : map) {
    const YAML::Node& key_node = entry.first;
    const YAML::Node& value = entry.second;
    const std::string where = absl::StrCat(source, ":", key_node.Mark().line + 1);
    if (!key_node.IsScalar()) {
      errors->push_back(
          absl::StrCat(where, ": expected a key name, got ", DescribeValue(key_node)));
      continue;
    }
    const std::string key =
        prefix.empty() ? key_node.Scalar() : absl::StrCat(prefix, ".", key_node.Scalar());
    if (FindKey(key) != nullptr) {
      out->push_back({key, value, where});
    } else if (auto entry = MapEntry(key); entry.has_value()) {
      out->push_back({entry->first, value, where, entry->second});
    } else if (IsSection(key)) {
      if (value.IsMap()) {
        Flatten(value, key, source, out, errors);
      } else if (!value.IsNull()) {  // an empty section ("megatron:") sets nothing
        errors->push_back(absl::StrCat(where, ": ", SectionMessage(key, value)));
      }
    } else if (!AllInertNotBuilt(key, value)) {
      errors->push_back(absl::StrCat(where, ": ", UnknownKeyMessage(key)));
    }
  }
}

void ParseYaml(const std::string& text, const std::string& source, std::vector<Assignment>* out,
               std::vector<std::string>* errors) {
  YAML::Node root;
  if (absl::Status deep = CheckNesting(text, source, kMaxNesting, /*yaml=*/true); !deep.ok()) {
    errors->push_back(std::string(deep.message()));
    return;
  }
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    errors->push_back(absl::StrCat(source, ":", e.mark.line + 1, ":", e.mark.column + 1,
                                   ": invalid YAML: ", e.msg));
    return;
  }
  if (root.IsNull()) return;  // an empty file: every key at its default
  if (!root.IsMap()) {
    errors->push_back(absl::StrCat(source, ":", root.Mark().line + 1,
                                   ": expected a mapping of config keys at the top level, got ",
                                   DescribeValue(root)));
    return;
  }
  std::vector<Assignment> assignments;
  Flatten(root, "", source, &assignments, errors);
  absl::flat_hash_map<std::string, std::string> first_seen;
  for (Assignment& a : assignments) {
    const std::string name =
        a.entry.empty() ? a.key : absl::StrCat(a.key, ".", absl::StrJoin(a.entry, "."));
    auto [it, inserted] = first_seen.emplace(name, a.where);
    if (!inserted) {
      errors->push_back(absl::StrCat(a.where, ": config key ", name, " is set twice (first at ",
                                     it->second, ")"));
      continue;
    }
    out->push_back(std::move(a));
  }
}

void ParseOverride(const std::string& text, std::vector<Assignment>* out,
                   std::vector<std::string>* errors) {
  const std::string where = absl::StrCat("command line \"", text, "\"");
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    errors->push_back(absl::StrCat(where, ": expected key=value"));
    return;
  }
  // Hydra's "+key=value" (add a key) and "++key=value" (add or override) mean the same here:
  // every key already exists.
  std::string key(absl::StripLeadingAsciiWhitespace(text.substr(0, eq)));
  while (!key.empty() && key.front() == '+') key.erase(0, 1);
  key = std::string(absl::StripTrailingAsciiWhitespace(key));
  std::vector<std::string> entry = {};
  if (auto map_entry = MapEntry(key); FindKey(key) == nullptr && map_entry.has_value()) {
    key = map_entry->first;
    entry = std::move(map_entry->second);
  } else if (FindKey(key) == nullptr) {
    if (NotBuiltVerlKey(key) != nullptr) {  // verl's default of such a key is dropped
      try {
        if (IsInertNotBuiltValue(key, YAML::Load(text.substr(eq + 1)))) return;
      } catch (const YAML::Exception&) {
      }
    }
    errors->push_back(absl::StrCat(where, ": ",
                                   IsSection(key)
                                       ? SectionMessage(key, YAML::Node(text.substr(eq + 1)))
                                       : UnknownKeyMessage(key)));
    return;
  }
  const std::string value_text = text.substr(eq + 1);
  YAML::Node value;
  if (value_text.empty()) {
    value = YAML::Node(std::string());  // Hydra: "key=" is the empty string
  } else if (absl::Status deep = CheckNesting(value_text, where, kMaxNesting, /*yaml=*/true);
             !deep.ok()) {
    errors->push_back(std::string(deep.message()));
    return;
  } else {
    try {
      value = YAML::Load(value_text);
    } catch (const YAML::Exception& e) {
      errors->push_back(
          absl::StrCat(where, ": config key ", key, ": value is not valid YAML (", e.msg, ")"));
      return;
    }
  }
  out->push_back({key, value, where, std::move(entry)});
}

// A resolved string key may be this long at most: references 16 wide and 9 deep would
// otherwise expand a 4 KB file to terabytes (paths and names need far less).
constexpr size_t kMaxResolvedBytes = 1 << 16;

// Replaces every ${dotted.key} in the string keys by that key's (resolved) value.
class Resolver {
 public:
  Resolver(Config* config, std::vector<std::string>* errors) : config_(config), errors_(errors) {}

  void ResolveAll() {
    for (const KeySpec& spec : Schema()) {
      if (spec.string_field) Resolve(spec);
    }
  }

 private:
  // Returns false when the key could not be resolved (the error is recorded).
  bool Resolve(const KeySpec& spec) {
    if (done_.contains(spec.key)) return true;
    std::string* field = spec.string_field(*config_);
    if (field == nullptr || field->find("${") == std::string::npos) {
      done_.insert(spec.key);
      return true;
    }
    if (std::find(stack_.begin(), stack_.end(), spec.key) != stack_.end()) {
      errors_->push_back(absl::StrCat("config key ", spec.key, ": circular reference ",
                                      absl::StrJoin(stack_, " -> "), " -> ", spec.key));
      return false;
    }
    stack_.push_back(spec.key);
    std::string out;
    const std::string& text = *field;
    bool ok = true;
    size_t pos = 0;
    while (ok) {
      const size_t open = text.find("${", pos);
      if (open == std::string::npos) break;
      const size_t close = text.find('}', open);
      if (close == std::string::npos) {
        errors_->push_back(
            absl::StrCat("config key ", spec.key, ": unterminated \"${\" in \"", text, "\""));
        ok = false;
        break;
      }
      absl::StrAppend(&out, text.substr(pos, open - pos));
      std::optional<std::string> value = Lookup(spec.key, text.substr(open + 2, close - open - 2));
      if (!value.has_value()) {
        ok = false;
        break;
      }
      absl::StrAppend(&out, *value);
      if (out.size() > kMaxResolvedBytes) {
        errors_->push_back(absl::StrCat("config key ", spec.key, ": expected at most ",
                                        kMaxResolvedBytes, " bytes after ${...} references, got ",
                                        "more (references of references multiply the length)"));
        ok = false;
        break;
      }
      pos = close + 1;
    }
    stack_.pop_back();
    if (!ok) return false;
    absl::StrAppend(&out, text.substr(pos));
    *field = std::move(out);
    done_.insert(spec.key);
    return true;
  }

  std::optional<std::string> Lookup(const std::string& from, const std::string& ref) {
    const KeySpec* target = FindKey(ref);
    if (target == nullptr) {
      errors_->push_back(absl::StrCat("config key ", from, ": ${", ref,
                                      "} names no key: ", UnknownKeyMessage(ref)));
      return std::nullopt;
    }
    if (target->string_field && !Resolve(*target)) return std::nullopt;
    YAML::Node value = target->get(*config_);
    if (!value.IsScalar()) {
      errors_->push_back(absl::StrCat("config key ", from, ": ${", ref,
                                      "} must be a single value, got ", DescribeValue(value)));
      return std::nullopt;
    }
    return value.Scalar();
  }

  Config* config_;
  std::vector<std::string>* errors_;
  std::vector<std::string> stack_;
  absl::flat_hash_set<std::string> done_;
};

absl::StatusOr<Config> Build(const std::vector<Assignment>& assignments,
                             std::vector<std::string> errors) {
  Config config;
  for (const KeySpec& spec : Schema()) {
    absl::Status status = spec.set(spec.default_value, config);
    if (!status.ok()) {  // a defect of the table; the schema test catches it
      errors.push_back(absl::StrCat("default of config key ", spec.key, ": ", status.message()));
    }
  }
  for (const Assignment& a : assignments) {
    const KeySpec& spec = *FindKey(a.key);
    absl::StatusOr<YAML::Node> value = a.value;
    if (!a.entry.empty()) value = WithEntry(spec.get(config), a.entry, 0, a.value, a.key);
    absl::Status status = value.ok() ? spec.set(*value, config) : value.status();
    if (!status.ok()) {
      errors.push_back(absl::StrCat(a.where, ": config key ", a.key, ": ", status.message()));
    }
  }
  if (errors.empty()) Resolver(&config, &errors).ResolveAll();
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  return config;
}

}  // namespace

Config DefaultConfig() {
  static const auto* defaults = [] {
    absl::StatusOr<Config> config = Build({}, {});
    if (!config.ok()) {
      std::fprintf(stderr, "rlmesh config: invalid key table: %s\n",
                   std::string(config.status().message()).c_str());
      std::abort();
    }
    return new Config(*std::move(config));
  }();
  return *defaults;
}

absl::StatusOr<Config> LoadConfigFromString(const std::string& yaml_text,
                                            const std::vector<std::string>& overrides,
                                            const std::string& source_name) {
  std::vector<Assignment> assignments;
  std::vector<std::string> errors;
  ParseYaml(yaml_text, source_name, &assignments, &errors);
  for (const std::string& text : overrides) ParseOverride(text, &assignments, &errors);
  return Build(assignments, std::move(errors));
}

absl::StatusOr<Config> LoadConfig(const std::string& yaml_path,
                                  const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(yaml_path, ec)) {
    // An ifstream opens a folder without complaint and reads nothing from it, which would
    // silently run every key at its default.
    return absl::InvalidArgumentError(
        absl::StrCat("config file ", yaml_path, ": is a folder, expected a YAML file"));
  }
  std::ifstream in(yaml_path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("config file ", yaml_path, ": cannot open (", std::strerror(errno), ")"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return LoadConfigFromString(text.str(), overrides, yaml_path);
}

}  // namespace rlmesh::config
