// A byte-level BPE tokenizer loaded from a Hugging Face `tokenizer.json` (and, when present,
// `tokenizer_config.json` for bos/eos/pad, the chat template and decoding defaults).
//
// Encoding follows @huggingface/tokenizers (and the Rust crate) for the byte-level BPE
// family (GPT-2, Llama 3, Qwen2/2.5/3): added tokens are cut out of the raw text first,
// the rest is NFC-normalized when the file asks, split by the pre-tokenizer pattern,
// mapped to bytes and merged; `add_special_tokens` applies the post-processor. Files of
// another family (WordPiece, Unigram, Metaspace, byte fallback, ...) are refused at load
// time with an error naming the file and the field. A Tokenizer is immutable after
// Create and every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tokenizer/added_tokens.h"
#include "common/tokenizer/bpe_model.h"
#include "common/tokenizer/chat_template.h"
#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/split_pattern.h"

namespace rlmesh::tokenizer {

struct TokenizerOptions {
  // Path of tokenizer.json (required).
  std::string tokenizer_json;
  // Path of tokenizer_config.json; empty means none (no bos/eos/pad, no chat template).
  std::string tokenizer_config_json;
  // Words kept in the BPE cache.
  size_t cache_capacity = 1 << 17;
};

struct EncodeOptions {
  // As in Hugging Face: run the post-processor (e.g. TemplateProcessing adds a bos). For
  // a ByteLevel post-processor (Qwen, the Llama 3 file in tools/node) it adds nothing.
  bool add_special_tokens = true;
};

struct DecodeOptions {
  // Leave out tokens that are special (added tokens marked special, and
  // additional_special_tokens of tokenizer_config.json).
  bool skip_special_tokens = false;
  // Undo spaces before punctuation (" ." -> "."); unset = tokenizer_config.json's
  // clean_up_tokenization_spaces (true when that key is missing, as the reference does).
  std::optional<bool> clean_up_tokenization_spaces;
};

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const TokenizerOptions& options);
  // `dir`/tokenizer.json plus `dir`/tokenizer_config.json when that file exists.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir);

  // Errors only when `text` is not valid UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              const EncodeOptions& options = {}) const;
  // Errors when an id is negative or not a token of this vocabulary.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     const DecodeOptions& options = {}) const;

  // Renders `messages` with the chat template of tokenizer_config.json (or `override_name`
  // when not empty: raw|chatml|qwen3|llama3) and encodes the result without
  // add_special_tokens, as apply_chat_template(tokenize=True) does.
  absl::StatusOr<std::vector<int32_t>> EncodeChat(const std::vector<ChatMessage>& messages,
                                                  const ChatTemplateOptions& options,
                                                  std::string_view override_name = "") const;
  // The template EncodeChat uses (error when tokenizer_config.json has no chat_template,
  // or an unknown one).
  absl::StatusOr<ChatTemplate> GetChatTemplate(std::string_view override_name = "") const;

  // One more than the largest id (model vocabulary and added tokens).
  int32_t vocab_size() const { return vocab_size_; }
  // Id of an added token's content or of a vocabulary entry in its byte-level spelling.
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The byte-level spelling of a vocabulary token, or an added token's content.
  std::optional<std::string> IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const { return special_ids_.contains(id); }
  // Every special token id, ascending.
  std::vector<int32_t> SpecialIds() const;

  std::optional<int32_t> bos_token_id() const { return bos_id_; }
  std::optional<int32_t> eos_token_id() const { return eos_id_; }
  std::optional<int32_t> pad_token_id() const { return pad_id_; }
  const std::string& chat_template_text() const { return chat_template_text_; }
  const std::string& bos_token() const { return bos_token_; }

 private:
  Tokenizer() = default;
  absl::Status LoadTokenizerJson(const std::string& path, size_t cache_capacity);
  absl::Status LoadTokenizerConfig(const std::string& path);
  void EncodePlain(std::string_view text, std::vector<int32_t>& out) const;

  NormalizerKind normalizer_ = NormalizerKind::kNone;
  std::unique_ptr<SplitPattern> split_;
  std::unique_ptr<BpeModel> model_;
  std::vector<AddedToken> added_tokens_;
  std::unique_ptr<AddedTokenMatcher> raw_matcher_;         // tokens with normalized=false
  std::unique_ptr<AddedTokenMatcher> normalized_matcher_;  // tokens with normalized=true
  absl::flat_hash_map<int32_t, size_t> added_by_id_;       // id -> index in added_tokens_
  absl::flat_hash_set<int32_t> special_ids_;
  std::vector<int32_t> post_prefix_, post_suffix_;  // TemplateProcessing "single"
  int32_t vocab_size_ = 0;

  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  std::string bos_token_;
  std::string chat_template_text_;
  std::string config_path_;
  bool clean_up_tokenization_spaces_ = true;
};

}  // namespace rlmesh::tokenizer
