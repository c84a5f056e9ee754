#include "common/tokenizer/tiny.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/split_pattern.h"

namespace rlmesh::tokenizer {
namespace {

using nlohmann::json;

constexpr char kQwen2Pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr char kChatMlTemplate[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct Learned {
  std::vector<std::string> tokens;  // id -> bytes
  std::vector<std::pair<int32_t, int32_t>> merges;
};

// Classic BPE training: repeatedly merge the most frequent adjacent pair (ties: the pair
// with the smallest ids) in the word counts of the pre-tokenized text.
absl::StatusOr<Learned> Learn(const TinyTokenizerOptions& options) {
  Learned learned;
  for (int b = 0; b < 256; ++b) learned.tokens.emplace_back(1, static_cast<char>(b));
  if (options.num_merges <= 0 || options.merge_text.empty()) return learned;
  if (!IsValidUtf8(options.merge_text)) {
    return absl::InvalidArgumentError("tiny tokenizer merge_text: expected valid UTF-8");
  }
  ASSIGN_OR_RETURN(std::string text, NfcNormalize(options.merge_text));
  ASSIGN_OR_RETURN(auto split, SplitPattern::Create(kQwen2Pattern));
  std::vector<std::string_view> pieces;
  split->Split(text, pieces);
  std::map<std::string_view, int64_t> counts;
  for (std::string_view p : pieces) ++counts[p];
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [piece, count] : counts) {
    std::vector<int32_t> ids;
    for (char c : piece) ids.push_back(static_cast<uint8_t>(c));
    words.emplace_back(std::move(ids), count);
  }
  absl::flat_hash_map<std::string, int32_t> ids_of;
  for (int32_t b = 0; b < 256; ++b) ids_of[learned.tokens[b]] = b;
  for (int m = 0; m < options.num_merges; ++m) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
    for (const auto& [ids, count] : words) {
      for (size_t i = 0; i + 1 < ids.size(); ++i) pairs[{ids[i], ids[i + 1]}] += count;
    }
    std::pair<int32_t, int32_t> best{-1, -1};
    int64_t best_count = 1;
    for (const auto& [pair, count] : pairs) {
      if (count > best_count) {
        best = pair;
        best_count = count;
      }
    }
    if (best.first < 0) break;
    const std::string merged = learned.tokens[best.first] + learned.tokens[best.second];
    auto [it, inserted] = ids_of.try_emplace(merged, static_cast<int32_t>(learned.tokens.size()));
    if (inserted) learned.tokens.push_back(merged);
    learned.merges.push_back(best);
    for (auto& [ids, count] : words) {
      std::vector<int32_t> next;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == best.first && ids[i + 1] == best.second) {
          next.push_back(it->second);
          ++i;
        } else {
          next.push_back(ids[i]);
        }
      }
      ids.swap(next);
    }
  }
  return learned;
}

TinyTokenizerInfo InfoOf(const Learned& learned) {
  TinyTokenizerInfo info;
  const auto base = static_cast<int32_t>(learned.tokens.size());
  info.num_merges = static_cast<int32_t>(learned.merges.size());
  info.endoftext_id = base;
  info.im_start_id = base + 1;
  info.im_end_id = base + 2;
  info.vocab_size = base + 3;
  return info;
}

absl::Status WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path.string(), ": cannot write the file"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TinyTokenizerInfo> TinyTokenizerLayout(const TinyTokenizerOptions& options) {
  ASSIGN_OR_RETURN(Learned learned, Learn(options));
  return InfoOf(learned);
}

absl::Status WriteTinyTokenizer(const std::string& dir, const TinyTokenizerOptions& options,
                                TinyTokenizerInfo* info_out) {
  ASSIGN_OR_RETURN(Learned learned, Learn(options));
  const TinyTokenizerInfo info = InfoOf(learned);

  json vocab = json::object();
  for (size_t id = 0; id < learned.tokens.size(); ++id) {
    vocab[BytesToByteLevel(learned.tokens[id])] = id;
  }
  json merges = json::array();
  for (const auto& [a, b] : learned.merges) {
    merges.push_back(
        json::array({BytesToByteLevel(learned.tokens[a]), BytesToByteLevel(learned.tokens[b])}));
  }
  json added = json::array();
  json added_decoder = json::object();
  const std::pair<const char*, int32_t> specials[] = {{"<|endoftext|>", info.endoftext_id},
                                                      {"<|im_start|>", info.im_start_id},
                                                      {"<|im_end|>", info.im_end_id}};
  for (const auto& [content, id] : specials) {
    json token = {{"id", id},        {"content", content}, {"single_word", false},
                  {"lstrip", false}, {"rstrip", false},    {"normalized", false},
                  {"special", true}};
    added.push_back(token);
    token.erase("id");
    added_decoder[std::to_string(id)] = token;
  }
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", false}};
  json tokenizer = {{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", added},
                    {"normalizer", {{"type", "NFC"}}},
                    {"pre_tokenizer",
                     {{"type", "Sequence"},
                      {"pretokenizers", json::array({{{"type", "Split"},
                                                      {"pattern", {{"Regex", kQwen2Pattern}}},
                                                      {"behavior", "Isolated"},
                                                      {"invert", false}},
                                                     byte_level})}}},
                    {"post_processor", byte_level},
                    {"decoder", byte_level},
                    {"model",
                     {{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", nullptr},
                      {"continuing_subword_prefix", ""},
                      {"end_of_word_suffix", ""},
                      {"fuse_unk", false},
                      {"byte_fallback", false},
                      {"ignore_merges", false},
                      {"vocab", vocab},
                      {"merges", merges}}}};
  json config = {{"add_bos_token", false},
                 {"add_prefix_space", false},
                 {"added_tokens_decoder", added_decoder},
                 {"additional_special_tokens", json::array({"<|im_start|>", "<|im_end|>"})},
                 {"bos_token", nullptr},
                 {"chat_template", kChatMlTemplate},
                 {"clean_up_tokenization_spaces", false},
                 {"eos_token", "<|im_end|>"},
                 {"errors", "replace"},
                 {"model_max_length", 32768},
                 {"pad_token", "<|endoftext|>"},
                 {"split_special_tokens", false},
                 {"tokenizer_class", "Qwen2Tokenizer"},
                 {"unk_token", nullptr}};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InternalError(
        absl::StrCat(dir, ": cannot create the directory (", ec.message(), ")"));
  const std::filesystem::path root(dir);
  RETURN_IF_ERROR(WriteFile(root / "tokenizer.json", tokenizer.dump(2)));
  RETURN_IF_ERROR(WriteFile(root / "tokenizer_config.json", config.dump(2)));
  if (info_out != nullptr) *info_out = info;
  return absl::OkStatus();
}

}  // namespace rlmesh::tokenizer
