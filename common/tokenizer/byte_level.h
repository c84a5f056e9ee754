// The GPT-2 byte-level alphabet and the UTF-8 helpers the tokenizer needs.
//
// Byte-level BPE vocabularies (GPT-2, Llama 3, Qwen2/3) store tokens as strings over a
// 256-character alphabet: every byte maps to one printable code point (printable ASCII and
// most of Latin-1 map to themselves, the other 68 bytes to U+0100..U+0143). These helpers
// convert between raw bytes and that alphabet. All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rlmesh::tokenizer {

// Abseil here is built with its own string_view type; this bridges std::string_view.
inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// The code point that byte `b` is written as in a byte-level vocabulary.
char32_t ByteToUnicode(uint8_t b);

// Raw bytes -> their byte-level spelling (UTF-8 encoded).
std::string BytesToByteLevel(std::string_view bytes);

// Byte-level spelling -> raw bytes. Fails when `text` is not valid UTF-8 or holds a code
// point outside the 256-character alphabet (the message quotes the offending position).
absl::StatusOr<std::string> ByteLevelToBytes(std::string_view text);

// Appends the UTF-8 encoding of `cp` to `out`.
void AppendUtf8(char32_t cp, std::string& out);

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or values > U+10FFFF).
bool IsValidUtf8(std::string_view text);

// Appends `bytes` to `out`, replacing each maximal ill-formed subsequence by U+FFFD, as
// WHATWG TextDecoder and Rust's String::from_utf8_lossy do.
void AppendUtf8Lossy(std::string_view bytes, std::string& out);

// Decodes the code point at `pos` of valid UTF-8 `text`, advancing `pos`.
char32_t DecodeUtf8At(std::string_view text, size_t& pos);

// Unicode White_Space property (the set `\s` means in the tokenizer patterns).
bool IsUnicodeWhiteSpace(char32_t cp);

}  // namespace rlmesh::tokenizer
