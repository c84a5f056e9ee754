#include "common/tokenizer/byte_level.h"

#include <array>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rlmesh::tokenizer {
namespace {

// GPT-2's bytes_to_unicode(): bytes in '!'..'~', 0xA1..0xAC and 0xAE..0xFF keep their own
// code point; the remaining 68 bytes get 256, 257, ... in increasing byte order.
struct ByteTables {
  std::array<char32_t, 256> to_unicode{};
  std::array<int16_t, 324> from_unicode{};  // code point (< 324) -> byte, -1 if none
  ByteTables() {
    from_unicode.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool keeps = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_unicode[b] = keeps ? static_cast<char32_t>(b) : next++;
      from_unicode[to_unicode[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& Tables() {
  static const ByteTables* const tables = new ByteTables();
  return *tables;
}

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 when ill-formed; `bad`
// receives the length of the maximal ill-formed prefix (>= 1) in that case.
size_t Utf8SequenceLength(std::string_view s, size_t i, size_t& bad) {
  const auto c = static_cast<uint8_t>(s[i]);
  bad = 1;
  if (c < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) return 0;
    const auto t = static_cast<uint8_t>(s[i + k]);
    if (t < lo || t > hi) return 0;
    lo = 0x80;
    hi = 0xBF;
    bad = k + 1;
  }
  return len;
}

}  // namespace

char32_t ByteToUnicode(uint8_t b) { return Tables().to_unicode[b]; }

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(c)), out);
  return out;
}

char32_t DecodeUtf8At(std::string_view text, size_t& pos) {
  const auto c = static_cast<uint8_t>(text[pos]);
  if (c < 0x80) {
    ++pos;
    return c;
  }
  size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  char32_t cp = c & (0x7F >> len);
  for (size_t k = 1; k < len && pos + k < text.size(); ++k) {
    cp = (cp << 6) | (static_cast<uint8_t>(text[pos + k]) & 0x3F);
  }
  pos += len;
  return cp;
}

absl::StatusOr<std::string> ByteLevelToBytes(std::string_view text) {
  if (!IsValidUtf8(text)) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte-level token \"", Av(text), "\": expected valid UTF-8"));
  }
  const ByteTables& t = Tables();
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t at = pos;
    const char32_t cp = DecodeUtf8At(text, pos);
    if (cp >= t.from_unicode.size() || t.from_unicode[cp] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("byte-level token \"", Av(text), "\": character U+",
                       absl::StrFormat("%04X", static_cast<uint32_t>(cp)), " at byte ", at,
                       " is not in the byte-level alphabet"));
    }
    out.push_back(static_cast<char>(t.from_unicode[cp]));
  }
  return out;
}

bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t bad;
    const size_t len = Utf8SequenceLength(text, i, bad);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

void AppendUtf8Lossy(std::string_view bytes, std::string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    size_t bad;
    const size_t len = Utf8SequenceLength(bytes, i, bad);
    if (len == 0) {
      out.append("\xEF\xBF\xBD");
      i += bad;
    } else {
      out.append(bytes.substr(i, len));
      i += len;
    }
  }
}

bool IsUnicodeWhiteSpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace rlmesh::tokenizer
