// Added tokens (special and not) and the matcher that finds them in text before
// pre-tokenization, as Hugging Face tokenizers does: leftmost match, the longest token at
// that position; `lstrip`/`rstrip` swallow the white space on that side; `single_word`
// only matches when no letter or digit touches the token. Immutable after construction;
// `Split` may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rlmesh::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  // True when the token is matched in the normalized text (after NFC) rather than in the
  // raw input.
  bool normalized = false;
};

// A piece of the input: an added token (`token_id` >= 0) or plain text (`token_id` == -1).
struct TextSegment {
  std::string_view text;
  int32_t token_id = -1;
};

class AddedTokenMatcher {
 public:
  // Matches the given tokens (empty contents are ignored).
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  bool empty() const { return tokens_.empty(); }

  // Splits `text` into plain pieces and token matches, in order. Plain pieces that white
  // space stripping leaves empty are dropped.
  void Split(std::string_view text, std::vector<TextSegment>& out) const;

 private:
  struct Entry {
    std::string content;
    int32_t id;
    bool lstrip, rstrip, single_word;
  };
  // Index into tokens_ of the longest entry starting at text[pos] that is allowed there,
  // or -1.
  int MatchAt(std::string_view text, size_t pos) const;

  std::vector<Entry> tokens_;  // sorted by first byte, then by length, longest first
  std::array<int32_t, 257> first_byte_begin_{};  // tokens_ range per first byte
};

}  // namespace rlmesh::tokenizer
