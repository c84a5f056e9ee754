#include "common/tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstring>

#include "common/tokenizer/byte_level.h"

namespace rlmesh::tokenizer {
namespace {

bool IsWordCodePoint(char32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// The code point that ends text[0, end).
char32_t LastCodePoint(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  return DecodeUtf8At(text, start);
}

size_t SkipWhiteSpaceForward(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t next = pos;
    if (!IsUnicodeWhiteSpace(DecodeUtf8At(text, next))) break;
    pos = next;
  }
  return pos;
}

size_t SkipWhiteSpaceBackward(std::string_view text, size_t begin, size_t end) {
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    size_t probe = start;
    if (!IsUnicodeWhiteSpace(DecodeUtf8At(text, probe))) break;
    end = start;
  }
  return end;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) {
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    tokens_.push_back(Entry{t.content, t.id, t.lstrip, t.rstrip, t.single_word});
  }
  std::sort(tokens_.begin(), tokens_.end(), [](const Entry& a, const Entry& b) {
    const auto fa = static_cast<uint8_t>(a.content[0]), fb = static_cast<uint8_t>(b.content[0]);
    if (fa != fb) return fa < fb;
    return a.content.size() > b.content.size();
  });
  size_t k = 0;
  for (int b = 0; b <= 256; ++b) {
    while (b < 256 && k < tokens_.size() && static_cast<uint8_t>(tokens_[k].content[0]) < b) ++k;
    first_byte_begin_[b] = static_cast<int32_t>(b < 256 ? k : tokens_.size());
  }
}

int AddedTokenMatcher::MatchAt(std::string_view text, size_t pos) const {
  const auto first = static_cast<uint8_t>(text[pos]);
  const int32_t end = first_byte_begin_[first + 1];
  for (int32_t k = first_byte_begin_[first]; k < end; ++k) {
    const Entry& e = tokens_[k];
    if (e.content.size() > text.size() - pos) continue;
    if (std::memcmp(text.data() + pos, e.content.data(), e.content.size()) != 0) continue;
    if (e.single_word) {
      const size_t stop = pos + e.content.size();
      if (pos > 0 && IsWordCodePoint(LastCodePoint(text, pos))) continue;
      if (stop < text.size()) {
        size_t probe = stop;
        if (IsWordCodePoint(DecodeUtf8At(text, probe))) continue;
      }
    }
    return k;
  }
  return -1;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<TextSegment>& out) const {
  if (tokens_.empty()) {
    if (!text.empty()) out.push_back(TextSegment{text, -1});
    return;
  }
  size_t plain_begin = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto first = static_cast<uint8_t>(text[pos]);
    if (first_byte_begin_[first] == first_byte_begin_[first + 1]) {
      ++pos;
      continue;
    }
    const int k = MatchAt(text, pos);
    if (k < 0) {
      ++pos;
      continue;
    }
    const Entry& e = tokens_[k];
    size_t plain_end = pos;
    if (e.lstrip) plain_end = SkipWhiteSpaceBackward(text, plain_begin, pos);
    if (plain_end > plain_begin) {
      out.push_back(TextSegment{text.substr(plain_begin, plain_end - plain_begin), -1});
    }
    out.push_back(TextSegment{text.substr(pos, e.content.size()), e.id});
    pos += e.content.size();
    if (e.rstrip) pos = SkipWhiteSpaceForward(text, pos);
    plain_begin = pos;
  }
  if (plain_begin < text.size()) {
    out.push_back(TextSegment{text.substr(plain_begin), -1});
  }
}

}  // namespace rlmesh::tokenizer
