#include "common/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rlmesh::tokenizer {
namespace {

// Below U+0300 (the first combining mark) no character composes with its predecessor, so
// text made only of such characters is already in NFC.
bool TriviallyNfc(std::string_view text) {
  for (char c : text) {
    const auto b = static_cast<uint8_t>(c);
    if (b >= 0xCC) return false;  // a lead byte of U+0300 or above
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> NfcNormalize(std::string_view text) {
  if (TriviallyNfc(text)) return std::string(text);
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &result,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NFC normalizer: input is not valid UTF-8 (", utf8proc_errmsg(n), ")"));
  }
  std::string out(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
  std::free(result);
  return out;
}

absl::StatusOr<std::string> Normalize(NormalizerKind kind, std::string_view text) {
  if (kind == NormalizerKind::kNfc) return NfcNormalize(text);
  return std::string(text);
}

}  // namespace rlmesh::tokenizer
