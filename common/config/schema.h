// The one table of configuration keys: for every key its dotted name, type, default,
// allowed values and help, and the Config field it is bound to. Read-only after first use;
// safe to call from any thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/config/config.h"
#include "yaml-cpp/yaml.h"

namespace rlmesh::config {

struct KeySpec {
  std::string key;           // "actor_rollout_ref.rollout.n"
  std::string type;          // "int", "float", "bool", "string", "enum", "list[float]", ...
  YAML::Node default_value;  // before ${...} resolution; null for optional keys
  std::string expected;      // "an integer >= 1": what a valid value looks like
  std::string help;          // one line
  // Parses `value` into the bound field. On failure returns InvalidArgument whose message is
  // `expected <expected>, got <value>` (the caller adds the key and the location).
  std::function<absl::Status(const YAML::Node& value, Config& config)> set;
  // The field's value as a YAML node (scalars as text, lists as sequences, null for unset).
  std::function<YAML::Node(const Config& config)> get;
  // For string keys: the field itself, for ${...} resolution; null for other types.
  std::function<std::string*(Config& config)> string_field;
  // Why this build cannot run the key's value in `config`, or "" when it can. The dry-run, and
  // so every binary at start-up, reports "<key> = <value>: <reason>" as an error. Null for
  // keys whose every valid value is supported.
  std::function<std::string(const Config& config)> refusal;
  // What is supported today, for the docs' status column ("1 only: tensor parallelism is not
  // built yet"); empty = every valid value.
  std::string supported;
};

// Every key, grouped by section, in the order the docs and ConfigToYaml print them.
const std::vector<KeySpec>& Schema();

// The entry for `key`, or null if there is none.
const KeySpec* FindKey(const std::string& key);

// True when `prefix` is a section (a proper dotted prefix of some key), e.g. "data".
bool IsSection(const std::string& prefix);

// Every key as a Markdown table (key, type, default, allowed values, meaning), one section
// per top-level group, for docs/config.md and `rlmesh config-keys`.
std::string KeyTableMarkdown();

// The key's value as the dry-run and its messages print it: a scalar as its text, a list as
// "[a, b]", null as "null".
std::string ValueText(const YAML::Node& value);
// `value` (YAML) as `spec` reads it back, in ValueText's form, so that values written
// differently compare equal ("1.0" and "1" for a float; a null default is an unset field);
// ValueText(value) when the key does not take it.
std::string ReadBackText(const KeySpec& spec, const YAML::Node& value);

// A verl key (or a section of them) that rlmesh does not have at all, with the reason; null
// for any other key. Such keys are errors naming the reason, never a "did you mean".
const char* NotBuiltVerlKey(const std::string& key);
// True when `key` is such a key and `value` is verl's default of it, which asks for nothing
// rlmesh lacks ("trainer.val_only: false"): the loader accepts and drops it.
bool IsInertNotBuiltValue(const std::string& key, const YAML::Node& value);

// The known key closest to `key` by edit distance over the full dotted key and over its last
// component, or nullopt when nothing is close enough to be a plausible typo.
std::optional<std::string> SuggestKey(const std::string& key);

}  // namespace rlmesh::config
