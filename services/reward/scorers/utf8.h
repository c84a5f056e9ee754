// Code-point helpers for UTF-8 text. The verl scorers are Python, which indexes and measures
// strings by code point; these let the C++ scorers do the same on UTF-8 bytes. Invalid UTF-8
// is treated byte by byte rather than rejected, as scorers must never fail on model output.
#pragma once

#include <cstddef>
#include "absl/strings/string_view.h"

namespace rlmesh::reward {

// Bytes of the code point that starts at text[0] (0 for empty text).
inline size_t FirstCodePointBytes(absl::string_view text) {
  if (text.empty()) return 0;
  const auto lead = static_cast<unsigned char>(text[0]);
  size_t n = 1;
  if (lead >= 0xF0) {
    n = 4;
  } else if (lead >= 0xE0) {
    n = 3;
  } else if (lead >= 0xC0) {
    n = 2;
  }
  return n < text.size() ? n : text.size();
}

// Number of code points (bytes that are not UTF-8 continuation bytes 10xxxxxx).
inline size_t CodePointCount(absl::string_view text) {
  size_t count = 0;
  for (char c : text) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++count;
  }
  return count;
}

// The last `n` code points of `text` (all of it when shorter): Python's text[-n:].
inline absl::string_view LastCodePoints(absl::string_view text, size_t n) {
  size_t start = text.size();
  size_t count = 0;
  while (start > 0 && count < n) {
    --start;
    if ((static_cast<unsigned char>(text[start]) & 0xC0) != 0x80) ++count;
  }
  return text.substr(start);
}

}  // namespace rlmesh::reward
