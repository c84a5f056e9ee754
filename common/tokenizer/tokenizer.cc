#include "common/tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/byte_level.h"

namespace rlmesh::tokenizer {
namespace {

// transformers' clean_up_tokenization, in the same order.
std::string CleanUpTokenizationSpaces(std::string_view text) {
  return absl::StrReplaceAll(Av(text), {{" .", "."},
                                        {" ?", "?"},
                                        {" !", "!"},
                                        {" ,", ","},
                                        {" ' ", "'"},
                                        {" n't", "n't"},
                                        {" 'm", "'m"},
                                        {" 's", "'s"},
                                        {" 've", "'ve"},
                                        {" 're", "'re"}});
}

}  // namespace

void Tokenizer::EncodePlain(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string_view> pieces;
  split_->Split(text, pieces);
  for (std::string_view piece : pieces) model_->Encode(piece, out);
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       const EncodeOptions& options) const {
  if (!IsValidUtf8(text)) {
    return absl::InvalidArgumentError("tokenizer input: expected valid UTF-8 text");
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + post_prefix_.size() + post_suffix_.size() + 1);
  if (options.add_special_tokens) ids.insert(ids.end(), post_prefix_.begin(), post_prefix_.end());
  std::vector<TextSegment> sections;
  raw_matcher_->Split(text, sections);
  std::vector<TextSegment> subsections;
  for (const TextSegment& section : sections) {
    if (section.token_id >= 0) {
      ids.push_back(section.token_id);
      continue;
    }
    if (normalizer_ == NormalizerKind::kNone) {
      EncodePlain(section.text, ids);
      continue;
    }
    ASSIGN_OR_RETURN(std::string normalized, Normalize(normalizer_, section.text));
    subsections.clear();
    normalized_matcher_->Split(normalized, subsections);
    for (const TextSegment& sub : subsections) {
      if (sub.token_id >= 0) {
        ids.push_back(sub.token_id);
      } else {
        EncodePlain(sub.text, ids);
      }
    }
  }
  if (options.add_special_tokens) ids.insert(ids.end(), post_suffix_.begin(), post_suffix_.end());
  return ids;
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids,
                                              const DecodeOptions& options) const {
  std::string out, bytes;
  // Runs of vocabulary tokens are decoded from bytes together; added tokens are written
  // as their content and cut a run (as the reference's ByteLevel decoder does).
  auto flush = [&] {
    AppendUtf8Lossy(bytes, out);
    bytes.clear();
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (options.skip_special_tokens && special_ids_.contains(id)) continue;
    if (auto it = added_by_id_.find(id); it != added_by_id_.end()) {
      flush();
      out += added_tokens_[it->second].content;
      continue;
    }
    const std::string* token = model_->TokenBytes(id);
    if (token == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "decode: ids[", i, "] = ", id, " is not a token id (vocabulary size ", vocab_size_, ")"));
    }
    bytes += *token;
  }
  flush();
  if (options.clean_up_tokenization_spaces.value_or(clean_up_tokenization_spaces_)) {
    return CleanUpTokenizationSpaces(out);
  }
  return out;
}

absl::StatusOr<ChatTemplate> Tokenizer::GetChatTemplate(std::string_view override_name) const {
  if (!override_name.empty()) return ChatTemplate::FromName(override_name, bos_token_);
  if (chat_template_text_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        config_path_.empty() ? std::string("tokenizer_config.json (absent)") : config_path_,
        ": chat_template: expected a template, found none; use the raw mode or name a "
        "template (raw|chatml|qwen3|llama3)"));
  }
  return ChatTemplate::Detect(chat_template_text_, absl::StrCat(config_path_, ": chat_template"),
                              bos_token_.empty() ? "<|begin_of_text|>" : bos_token_);
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::EncodeChat(const std::vector<ChatMessage>& messages,
                                                           const ChatTemplateOptions& options,
                                                           std::string_view override_name) const {
  ASSIGN_OR_RETURN(ChatTemplate chat, GetChatTemplate(override_name));
  ASSIGN_OR_RETURN(std::string text, chat.Render(messages, options));
  EncodeOptions encode;
  encode.add_special_tokens = false;
  return Encode(text, encode);
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  for (const AddedToken& t : added_tokens_) {
    if (t.content == token) return t.id;
  }
  auto bytes = ByteLevelToBytes(token);
  if (!bytes.ok()) return std::nullopt;
  return model_->TokenId(*bytes);
}

std::vector<int32_t> Tokenizer::SpecialIds() const {
  std::vector<int32_t> ids(special_ids_.begin(), special_ids_.end());
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (auto it = added_by_id_.find(id); it != added_by_id_.end()) {
    return added_tokens_[it->second].content;
  }
  const std::string* bytes = model_->TokenBytes(id);
  if (bytes == nullptr) return std::nullopt;
  return BytesToByteLevel(*bytes);
}

}  // namespace rlmesh::tokenizer
