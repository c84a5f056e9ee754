#include "common/tokenizer/split_pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/byte_level.h"

namespace rlmesh::tokenizer {
namespace {

// The Unicode White_Space property as class members.
constexpr std::string_view kWhiteSpaceMembers =
    "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"
    "\\x{205f}\\x{3000}";

// Per-thread JIT stack and match data: PCRE2 match data must not be shared between
// threads, and the default 32 KiB JIT stack is too small for very long whitespace runs.
struct ThreadMatchState {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_match_data* data = nullptr;
  ThreadMatchState() {
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
    data = pcre2_match_data_create(1, nullptr);
  }
  ~ThreadMatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

ThreadMatchState& MatchState() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

absl::StatusOr<std::string> RewritePatternForPcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() * 2);
  // Depth of groups opened so far, and the depth at which each (?i: group opened.
  std::vector<bool> group_is_caseless;
  bool in_class = false;
  auto caseless = [&] {
    for (bool c : group_is_caseless) {
      if (c) return true;
    }
    return false;
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceMembers)
                        : absl::StrCat("[", Av(kWhiteSpaceMembers), "]");
      } else if (e == 'S') {
        if (in_class) {
          return absl::InvalidArgumentError(
              absl::StrCat("split pattern \"", Av(pattern),
                           "\": \\S inside a character class is not supported"));
        }
        out += absl::StrCat("[^", Av(kWhiteSpaceMembers), "]");
      } else {
        out.push_back(c);
        out.push_back(e);
        // Copy a braced argument (\p{L}, \x{..}) verbatim.
        if ((e == 'p' || e == 'P' || e == 'x') && i + 2 < pattern.size() && pattern[i + 2] == '{') {
          size_t close = pattern.find('}', i + 2);
          if (close == std::string_view::npos) close = pattern.size() - 1;
          out.append(pattern.substr(i + 2, close - (i + 1)));
          i = close;
          continue;
        }
      }
      ++i;
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      out.push_back(c);
      if (caseless() && std::isalpha(static_cast<unsigned char>(c))) {
        out.push_back(static_cast<char>(std::islower(static_cast<unsigned char>(c))
                                            ? std::toupper(static_cast<unsigned char>(c))
                                            : std::tolower(static_cast<unsigned char>(c))));
      }
      continue;
    }
    if (c == '[') {
      in_class = true;
      out.push_back(c);
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == '(') {
      if (pattern.substr(i, 4) == "(?i:") {
        group_is_caseless.push_back(true);
        out += "(?:";
        i += 3;
        continue;
      }
      if (pattern.substr(i, 3) == "(?i") {
        return absl::InvalidArgumentError(
            absl::StrCat("split pattern \"", Av(pattern),
                         "\": only the (?i:...) form of case-insensitivity is "
                         "supported"));
      }
      group_is_caseless.push_back(false);
      out.push_back(c);
      continue;
    }
    if (c == ')') {
      if (!group_is_caseless.empty()) group_is_caseless.pop_back();
      out.push_back(c);
      continue;
    }
    if (caseless() && std::isalpha(static_cast<unsigned char>(c))) {
      const auto u = static_cast<unsigned char>(c);
      out += {'[', static_cast<char>(std::tolower(u)), static_cast<char>(std::toupper(u)), ']'};
      continue;
    }
    out.push_back(c);
  }
  return out;
}

struct SplitPattern::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

SplitPattern::SplitPattern(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SplitPattern::~SplitPattern() = default;

absl::StatusOr<std::unique_ptr<SplitPattern>> SplitPattern::Create(std::string_view pattern) {
  auto rewritten = RewritePatternForPcre2(pattern);
  if (!rewritten.ok()) return rewritten.status();
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  auto impl = std::make_unique<Impl>();
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten->data()), rewritten->size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error_code, &error_offset,
                             nullptr);
  if (impl->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return absl::InvalidArgumentError(
        absl::StrCat("split pattern \"", Av(pattern), "\": PCRE2 cannot compile it (",
                     reinterpret_cast<const char*>(message), " at offset ", error_offset, ")"));
  }
  if (pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE) != 0) {
    // The interpreter gives the same matches, only slower.
    std::fprintf(stderr, "tokenizer: PCRE2 JIT unavailable; split pattern runs interpreted\n");
  }
  return std::unique_ptr<SplitPattern>(new SplitPattern(std::move(impl)));
}

void SplitPattern::Split(std::string_view text, std::vector<std::string_view>& out) const {
  ThreadMatchState& state = MatchState();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;    // where the next search begins
  size_t emitted = 0;  // end of the text already handed out
  while (start < text.size()) {
    const int rc = pcre2_match(impl_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                               state.data, state.context);
    if (rc < 0) break;  // no further match (the inputs are valid UTF-8)
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (begin > emitted) out.push_back(text.substr(emitted, begin - emitted));
    if (end > begin) {
      out.push_back(text.substr(begin, end - begin));
      emitted = end;
      start = end;
    } else {
      // An empty match: step over one code point, as JavaScript's matchAll does in u mode.
      emitted = begin;
      start = begin + 1;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
  if (emitted < text.size()) out.push_back(text.substr(emitted));
}

}  // namespace rlmesh::tokenizer
