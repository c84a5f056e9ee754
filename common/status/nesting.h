// A guard for text from files and requests before a JSON or YAML parser sees it: nesting
// deeper than a bound is refused with a message naming the source and the byte offset. The
// parsers and the code that prints their values recurse once per level, so 100k nested
// brackets would otherwise overflow the stack. Brackets inside quoted strings do not count.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace rlmesh {

// Deeper than any file rlmesh reads has reason to be (Hugging Face files nest below 10).
inline constexpr int kMaxNesting = 256;

// InvalidArgument when `text` opens more than `max_depth` [ or { at once outside strings.
// `yaml` also skips single-quoted strings and # comments.
inline absl::Status CheckNesting(absl::string_view text, absl::string_view source,
                                 int max_depth = kMaxNesting, bool yaml = false) {
  int depth = 0;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote != 0) {
      if (c == '\\' && quote == '"') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '"' || (yaml && c == '\'')) {
      quote = c;
    } else if (yaml && c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": nested more than ", max_depth, " levels deep at byte ", i));
      }
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    }
  }
  return absl::OkStatus();
}

}  // namespace rlmesh
