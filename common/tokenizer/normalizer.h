// Text normalizers of tokenizer.json. Only the ones byte-level BPE checkpoints use are
// supported: none and NFC (Qwen2/Qwen3); anything else is refused at load time.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace rlmesh::tokenizer {

enum class NormalizerKind { kNone, kNfc };

// Unicode NFC (canonical decomposition then composition, utf8proc). Pure ASCII is returned
// unchanged without calling utf8proc. Fails only when `text` is not valid UTF-8.
absl::StatusOr<std::string> NfcNormalize(std::string_view text);

// Applies `kind` to `text`.
absl::StatusOr<std::string> Normalize(NormalizerKind kind, std::string_view text);

}  // namespace rlmesh::tokenizer
