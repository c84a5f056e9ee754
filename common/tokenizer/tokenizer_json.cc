// Loading of tokenizer.json and tokenizer_config.json into a Tokenizer.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/nesting.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/tokenizer.h"

namespace rlmesh::tokenizer {
namespace {

using nlohmann::json;

// The pattern ByteLevel(use_regex=true) splits with (GPT-2's).
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// Token ids index tables: an id beyond twice the token count (plus room for sparse special
// tokens) is not a real vocabulary's, and would size a table of gigabytes.
int64_t TokenIdBound(size_t tokens) { return 2 * static_cast<int64_t>(tokens) + 65536; }

absl::StatusOr<json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open the file"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (absl::Status deep = CheckNesting(buffer.str(), path); !deep.ok()) return deep;
  try {
    return json::parse(buffer.str());
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON (", e.what(), ")"));
  }
}

std::string TypeOf(const json& j) {
  if (j.is_object() && j.contains("type") && j["type"].is_string()) {
    return j["type"].get<std::string>();
  }
  return j.is_null() ? "null" : j.dump().substr(0, 60);
}

absl::Status Unsupported(const std::string& path, std::string_view field, std::string_view what,
                         std::string_view found) {
  return absl::UnimplementedError(
      absl::StrCat(path, ": ", Av(field), ": expected ", Av(what), ", found ", Av(found)));
}

bool IsFalseOrMissing(const json& obj, const char* key) {
  return !obj.contains(key) || obj[key].is_null() ||
         (obj[key].is_boolean() && !obj[key].get<bool>());
}

// A special token in tokenizer_config.json: a string, {"content": ...}, or null.
std::optional<std::string> TokenText(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  TokenizerOptions options;
  options.tokenizer_json = (std::filesystem::path(dir) / "tokenizer.json").string();
  const auto config = std::filesystem::path(dir) / "tokenizer_config.json";
  if (std::filesystem::exists(config)) options.tokenizer_config_json = config.string();
  return Create(options);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(const TokenizerOptions& options) {
  auto tokenizer = std::unique_ptr<Tokenizer>(new Tokenizer());
  // nlohmann throws when a field has an unexpected type; name the file in that case.
  try {
    RETURN_IF_ERROR(tokenizer->LoadTokenizerJson(options.tokenizer_json, options.cache_capacity));
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.tokenizer_json, ": unexpected field type (", e.what(), ")"));
  }
  if (!options.tokenizer_config_json.empty()) {
    try {
      RETURN_IF_ERROR(tokenizer->LoadTokenizerConfig(options.tokenizer_config_json));
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.tokenizer_config_json, ": unexpected field type (", e.what(), ")"));
    }
  }
  return tokenizer;
}

absl::Status Tokenizer::LoadTokenizerJson(const std::string& path, size_t cache_capacity) {
  ASSIGN_OR_RETURN(json root, ReadJson(path));
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": model: expected an object"));
  }
  const json& model = root["model"];
  const std::string model_type = model.value("type", std::string("BPE"));
  if (model_type != "BPE") return Unsupported(path, "model.type", "BPE", model_type);
  if (model.contains("dropout") && model["dropout"].is_number() &&
      model["dropout"].get<double>() > 0) {
    return Unsupported(path, "model.dropout", "null or 0", model["dropout"].dump());
  }
  if (!IsFalseOrMissing(model, "byte_fallback")) {
    return Unsupported(path, "model.byte_fallback", "false (byte-level BPE)", "true");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      return Unsupported(path, absl::StrCat("model.", key), "null or empty", model[key].dump());
    }
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": model.vocab: expected an object"));
  }
  absl::flat_hash_map<std::string, int32_t> vocab;
  vocab.reserve(model["vocab"].size());
  for (const auto& [spelled, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": model.vocab[\"", spelled, "\"]: expected an integer id"));
    }
    // An id sizes the id -> token table: it must be one a vocabulary of this size can have.
    const int64_t bound = TokenIdBound(model["vocab"].size());
    if (id.get<int64_t>() < 0 || id.get<int64_t>() >= bound) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": model.vocab[\"", spelled.substr(0, 40), "\"]: id ", id.get<int64_t>(),
          " is outside [0, ", bound, ") for ", model["vocab"].size(), " tokens"));
    }
    auto bytes = ByteLevelToBytes(spelled);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": model.vocab: ", bytes.status().message()));
    }
    vocab.emplace(*std::move(bytes), id.get<int32_t>());
  }
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": model.merges: expected an array"));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(model["merges"].size());
  size_t index = 0;
  for (const json& m : model["merges"]) {
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": model.merges[", index, "]: expected \"left right\", found \"", s, "\""));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // [a, b]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": model.merges[", index,
                       "]: expected \"a b\" or [\"a\", \"b\"], found ", m.dump().substr(0, 60)));
    }
    auto l = ByteLevelToBytes(left), r = ByteLevelToBytes(right);
    if (!l.ok() || !r.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": model.merges[", index, "]: ", (l.ok() ? r : l).status().message()));
    }
    merges.emplace_back(*std::move(l), *std::move(r));
    ++index;
  }
  BpeModelOptions bpe_options;
  bpe_options.ignore_merges = model.value("ignore_merges", false);
  bpe_options.cache_capacity = cache_capacity;
  auto bpe = BpeModel::Create(std::move(vocab), merges, bpe_options);
  if (!bpe.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", bpe.status().message()));
  model_ = *std::move(bpe);

  // Normalizer: none or NFC (possibly as a one-element Sequence).
  const json normalizer = root.value("normalizer", json());
  json single = normalizer;
  if (TypeOf(normalizer) == "Sequence" && normalizer.contains("normalizers") &&
      normalizer["normalizers"].size() == 1) {
    single = normalizer["normalizers"][0];
  }
  if (single.is_null()) {
    normalizer_ = NormalizerKind::kNone;
  } else if (TypeOf(single) == "NFC") {
    normalizer_ = NormalizerKind::kNfc;
  } else {
    return Unsupported(path, "normalizer.type", "null or NFC", TypeOf(normalizer));
  }

  // Pre-tokenizer: Sequence[Split(Regex, Isolated), ByteLevel(use_regex=false)], or a
  // lone ByteLevel(use_regex=true) (GPT-2's pattern).
  const json pre = root.value("pre_tokenizer", json());
  std::string pattern;
  auto check_byte_level = [&](const json& bl, bool want_regex) -> absl::Status {
    if (!IsFalseOrMissing(bl, "add_prefix_space")) {
      return Unsupported(path, "pre_tokenizer ByteLevel.add_prefix_space", "false", "true");
    }
    const bool use_regex = bl.value("use_regex", true);
    if (use_regex != want_regex) {
      return Unsupported(path, "pre_tokenizer ByteLevel.use_regex",
                         want_regex ? "true" : "false after a Split", use_regex ? "true" : "false");
    }
    return absl::OkStatus();
  };
  if (TypeOf(pre) == "ByteLevel") {
    RETURN_IF_ERROR(check_byte_level(pre, true));
    pattern = kGpt2Pattern;
  } else if (TypeOf(pre) == "Sequence" && pre.contains("pretokenizers") &&
             pre["pretokenizers"].size() == 2 && TypeOf(pre["pretokenizers"][0]) == "Split" &&
             TypeOf(pre["pretokenizers"][1]) == "ByteLevel") {
    const json& split = pre["pretokenizers"][0];
    if (!split.contains("pattern") || !split["pattern"].is_object() ||
        !split["pattern"].contains("Regex") || !split["pattern"]["Regex"].is_string()) {
      return Unsupported(path, "pre_tokenizer.pretokenizers[0].pattern", "{\"Regex\": ...}",
                         split.value("pattern", json()).dump().substr(0, 60));
    }
    if (split.value("behavior", std::string()) != "Isolated") {
      return Unsupported(path, "pre_tokenizer.pretokenizers[0].behavior", "Isolated",
                         split.value("behavior", json()).dump());
    }
    if (!IsFalseOrMissing(split, "invert")) {
      return Unsupported(path, "pre_tokenizer.pretokenizers[0].invert", "false", "true");
    }
    RETURN_IF_ERROR(check_byte_level(pre["pretokenizers"][1], false));
    pattern = split["pattern"]["Regex"].get<std::string>();
  } else {
    return Unsupported(path, "pre_tokenizer",
                       "Sequence[Split(Regex, Isolated), ByteLevel] or ByteLevel", TypeOf(pre));
  }
  auto split = SplitPattern::Create(pattern);
  if (!split.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": pre_tokenizer: ", split.status().message()));
  }
  split_ = *std::move(split);

  const json decoder = root.value("decoder", json());
  if (!decoder.is_null() && TypeOf(decoder) != "ByteLevel") {
    return Unsupported(path, "decoder.type", "ByteLevel", TypeOf(decoder));
  }

  // Added tokens.
  int32_t max_id = model_->id_limit() - 1;
  std::vector<AddedToken> raw, normalized;
  for (const json& t : root.value("added_tokens", json::array())) {
    AddedToken token;
    if (!t.is_object() || !t.contains("id") || !t.contains("content") ||
        !t["content"].is_string() || !t["id"].is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": added_tokens: expected objects with an integer id and a string content, found ",
          t.dump().substr(0, 60)));
    }
    const int64_t bound =
        TokenIdBound(static_cast<size_t>(model_->id_limit()) + root["added_tokens"].size());
    if (t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() >= bound) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": added_tokens: id ", t["id"].get<int64_t>(), " is outside [0, ", bound, ")"));
    }
    token.id = t["id"].get<int32_t>();
    token.content = t["content"].get<std::string>();
    token.special = t.value("special", false);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    token.single_word = t.value("single_word", false);
    token.normalized = t.value("normalized", !token.special);
    if (token.normalized && normalizer_ == NormalizerKind::kNfc) {
      auto nfc = NfcNormalize(token.content);
      if (nfc.ok()) token.content = *nfc;
    }
    max_id = std::max(max_id, token.id);
    if (token.special) special_ids_.insert(token.id);
    added_by_id_[token.id] = added_tokens_.size();
    (token.normalized && normalizer_ != NormalizerKind::kNone ? normalized : raw).push_back(token);
    added_tokens_.push_back(std::move(token));
  }
  raw_matcher_ = std::make_unique<AddedTokenMatcher>(raw);
  normalized_matcher_ = std::make_unique<AddedTokenMatcher>(normalized);
  vocab_size_ = max_id + 1;

  // Post-processor: null, ByteLevel (adds nothing), TemplateProcessing's "single", or a
  // Sequence of those.
  const json post = root.value("post_processor", json());
  std::vector<json> processors;
  if (TypeOf(post) == "Sequence" && post.contains("processors")) {
    for (const json& p : post["processors"]) processors.push_back(p);
  } else if (!post.is_null()) {
    processors.push_back(post);
  }
  for (const json& p : processors) {
    if (TypeOf(p) == "ByteLevel") continue;
    if (TypeOf(p) != "TemplateProcessing") {
      return Unsupported(path, "post_processor.type", "ByteLevel or TemplateProcessing", TypeOf(p));
    }
    bool seen_sequence = false;
    for (const json& piece : p.value("single", json::array())) {
      if (piece.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      const std::string name = piece.contains("SpecialToken")
                                   ? piece["SpecialToken"].value("id", std::string())
                                   : std::string();
      const json special = p.value("special_tokens", json::object()).value(name, json());
      if (name.empty() || !special.is_object() || !special.contains("ids")) {
        return absl::InvalidArgumentError(
            absl::StrCat(path,
                         ": post_processor.single: expected SpecialToken entries listed in "
                         "special_tokens, found ",
                         piece.dump().substr(0, 60)));
      }
      for (const json& id : special["ids"]) {
        (seen_sequence ? post_suffix_ : post_prefix_).push_back(id.get<int32_t>());
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadTokenizerConfig(const std::string& path) {
  ASSIGN_OR_RETURN(json config, ReadJson(path));
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected a JSON object"));
  }
  config_path_ = path;
  auto resolve = [&](const char* key, std::optional<int32_t>& id) -> absl::Status {
    std::optional<std::string> text = TokenText(config, key);
    if (!text.has_value()) return absl::OkStatus();
    id = TokenToId(*text);
    if (!id.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", key, ": token \"", *text, "\" is not in the vocabulary"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(resolve("bos_token", bos_id_));
  RETURN_IF_ERROR(resolve("eos_token", eos_id_));
  RETURN_IF_ERROR(resolve("pad_token", pad_id_));
  bos_token_ = TokenText(config, "bos_token").value_or("");
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    for (const json& t : config["additional_special_tokens"]) {
      std::optional<std::string> text;
      if (t.is_string()) text = t.get<std::string>();
      if (t.is_object() && t.contains("content")) text = t["content"].get<std::string>();
      if (!text) continue;
      if (std::optional<int32_t> id = TokenToId(*text)) special_ids_.insert(*id);
    }
  }
  if (config.contains("chat_template")) {
    const json& t = config["chat_template"];
    if (t.is_string()) {
      chat_template_text_ = t.get<std::string>();
    } else if (t.is_array()) {  // [{"name": "default", "template": ...}, ...]
      for (const json& entry : t) {
        if (entry.value("name", std::string()) == "default" && entry.contains("template")) {
          chat_template_text_ = entry["template"].get<std::string>();
        }
      }
    }
  }
  if (config.contains("clean_up_tokenization_spaces") &&
      config["clean_up_tokenization_spaces"].is_boolean()) {
    clean_up_tokenization_spaces_ = config["clean_up_tokenization_spaces"].get<bool>();
  }
  return absl::OkStatus();
}

}  // namespace rlmesh::tokenizer
