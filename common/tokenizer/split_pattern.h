// The regex split of the pre-tokenizer: `Split(pattern, behavior=Isolated)` as in Hugging
// Face tokenizers, run with PCRE2 (UTF + UCP, JIT-compiled).
//
// Patterns in tokenizer.json are written for Oniguruma. Before compiling, the pattern is
// rewritten where PCRE2 would read it differently from the reference implementations:
// `\s`/`\S` become the Unicode White_Space set (PCRE2's own `\s` adds U+180E and misses
// nothing else, but being explicit keeps the set fixed across PCRE2 versions), and letters
// inside `(?i:...)` match their ASCII case pair only (the reference applies ASCII case
// folding, so U+017F LONG S does not match `s`). A compiled pattern is immutable and
// `Split` may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace rlmesh::tokenizer {

// Rewrites an Oniguruma-flavoured split pattern into the PCRE2 pattern described above.
// Fails on constructs whose meaning would change (`\S` inside a character class).
absl::StatusOr<std::string> RewritePatternForPcre2(std::string_view pattern);

class SplitPattern {
 public:
  // Compiles `pattern` (after RewritePatternForPcre2). The error names the pattern and the
  // PCRE2 message and offset.
  static absl::StatusOr<std::unique_ptr<SplitPattern>> Create(std::string_view pattern);
  ~SplitPattern();
  SplitPattern(const SplitPattern&) = delete;
  SplitPattern& operator=(const SplitPattern&) = delete;

  // Isolated split of valid UTF-8 `text`: appends to `out` the matches and the non-empty
  // gaps between them, in order, so that the pieces concatenate back to `text`.
  void Split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Impl;
  explicit SplitPattern(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlmesh::tokenizer
