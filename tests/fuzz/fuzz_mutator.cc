// The mutations of fuzz_mutator.h. Weights favour the structural mutations (numbers, tokens,
// chunks) over byte noise, because the parsers refuse most random bytes at the first one.
#include "tests/fuzz/fuzz_mutator.h"

#include <algorithm>
#include <iterator>
#include <string_view>

namespace rlmesh::fuzz {
namespace {

using namespace std::string_view_literals;

// Numbers at the edges of int32, uint32, int64, uint64 and double, and texts that only look
// like numbers.
constexpr std::string_view kExtremes[] = {
    "0",
    "-0",
    "1",
    "-1",
    "2",
    "255",
    "65535",
    "65536",
    "2000000000",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "4294967295",
    "4294967296",
    "9007199254740993",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999999999999",
    "4611686018427387904",
    "1e308",
    "1.7976931348623157e308",
    "-1e308",
    "1e309",
    "1e400",
    "-1e400",
    "1e-400",
    "4.9e-324",
    "0.5",
    "-0.0",
    "1e-06",
    "NaN",
    "Infinity",
    "-inf",
    ".inf",
    ".nan",
    "0x7fffffff",
    "0o777",
    "1_000",
    "00001",
    "1e",
    "-",
    "+1",
};

// Syntax of JSON, YAML, PCRE2 and the files' own keys, and byte sequences that are not valid
// UTF-8 (overlong, surrogate, truncated).
constexpr std::string_view kTokens[] = {
    "\"",
    "\\",
    "\\\"",
    "\\u0000",
    "\\ud800",
    "\\udc00\\ud800",
    "\\ud83d\\ude00",
    "\\uffff",
    "\0"sv,
    "\x7f",
    "\xc3\xa9",
    "\xff",
    "\xc0\x80",
    "\xed\xa0\x80",
    "\xf0\x9f\x98",
    "\xf0\x9f\x98\x80",
    "\xe2\x80\xa8",
    "\xef\xbb\xbf",
    "null",
    "true",
    "false",
    "[]",
    "{}",
    "\"\"",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    " ",
    "\n",
    "\r\n",
    "\t",
    "&a ",
    "*a",
    "&a [*a]",
    "&a {k: *a}",
    "<<: *a",
    "? ",
    "- ",
    "!!binary ",
    "!!str ",
    "!!map ",
    "!<tag:x> ",
    "|\n  ",
    ">-\n  ",
    "~",
    "---\n",
    "...\n",
    "%YAML 1.2\n",
    "# ",
    "'",
    "''",
    "${",
    "${data.train_files}",
    "${trainer.project_name}",
    "(",
    ")",
    "(?i:",
    "(?i)",
    "(?=",
    "(?<=",
    "(?R)",
    "\\C",
    "\\p{L}",
    "\\p{",
    "\\x{110000}",
    "\\X",
    "\\K",
    "\\1",
    "*",
    "+",
    "?",
    "{1000000}",
    "|",
    "[^",
    ".*",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "\xc4\xa0",  // the byte-level spelling of a space
    "\"type\": ",
    "\"id\": ",
    "\"content\": ",
    "\"special\": true",
    "\"dtype\": \"F32\"",
    "\"dtype\": \"BF16\"",
    "\"shape\": [",
    "\"data_offsets\": [",
    "\"__metadata__\": {}",
    "\"role\": ",
    "\"prompt\": ",
    "\"extra_info\": ",
    "\"num_hidden_layers\": ",
    "\"architectures\": [\"Qwen3ForCausalLM\"]",
};

// Openers (and their closers) that nest one level each: JSON arrays and objects, YAML flow
// and block collections.
struct Nest {
  std::string_view open, close;
};
constexpr Nest kNests[] = {
    {"[", "]"}, {"{\"a\":", "}"}, {"[{\"a\":", "}]"}, {"{", "}"}, {"- ", ""}, {"{a: ", "}"},
};
// Around the 256-level bound of common/status/nesting.h, yaml-cpp's 2000, and far past both.
constexpr size_t kDepths[] = {255, 256, 257, 300, 1999, 2001, 10000, 100000};

size_t Pos(const std::string& s, Rng& rng) { return rng.Below(s.size() + 1); }

void InsertText(std::string& s, std::string_view text, Rng& rng) {
  s.insert(Pos(s, rng), text.data(), text.size());
}

void FlipBit(std::string& s, Rng& rng) {
  if (s.empty()) return;
  s[rng.Below(s.size())] ^= static_cast<char>(1u << rng.Below(8));
}

void SetByte(std::string& s, Rng& rng) {
  if (s.empty()) return;
  constexpr std::string_view kBytes = "\0\x01\x7f\x80\xff\"\\{}[],:-0 \n#&*!|'"sv;
  s[rng.Below(s.size())] =
      rng.OneIn(2) ? kBytes[rng.Below(kBytes.size())] : static_cast<char>(rng.Below(256));
}

void InsertRandomBytes(std::string& s, Rng& rng) {
  std::string bytes(1 + rng.Below(8), '\0');
  for (char& c : bytes) c = static_cast<char>(rng.Below(256));
  InsertText(s, bytes, rng);
}

void DeleteRange(std::string& s, Rng& rng) {
  if (s.empty()) return;
  const size_t begin = rng.Below(s.size());
  const size_t limit = rng.OneIn(8) ? s.size() - begin : std::min<size_t>(s.size() - begin, 16);
  s.erase(begin, 1 + rng.Below(limit));
}

void DuplicateChunk(std::string& s, Rng& rng) {
  if (s.empty()) return;
  const size_t begin = rng.Below(s.size());
  const std::string chunk = s.substr(begin, 1 + rng.Below(std::min<size_t>(s.size() - begin, 256)));
  std::string copies;
  for (uint64_t n = 1 + (rng.OneIn(4) ? rng.Below(64) : 0); n > 0; --n) copies += chunk;
  InsertText(s, copies, rng);
}

// A chunk of another input replaces a range of this one (or is inserted, when `len` is 0).
void Splice(std::string& s, const std::vector<std::string>& corpus, Rng& rng) {
  if (corpus.empty()) return;
  const std::string& other = corpus[rng.Below(corpus.size())];
  if (other.empty()) return;
  const size_t from = rng.Below(other.size());
  const size_t take = 1 + rng.Below(std::min<size_t>(other.size() - from, 512));
  const size_t at = Pos(s, rng);
  const size_t len = rng.OneIn(2) ? 0 : rng.Below(std::min<size_t>(s.size() - at, 512) + 1);
  s.replace(at, len, other, from, take);
}

// The head of this input, the tail of another.
void CrossOver(std::string& s, const std::vector<std::string>& corpus, Rng& rng) {
  if (corpus.empty()) return;
  const std::string& other = corpus[rng.Below(corpus.size())];
  s.resize(Pos(s, rng));
  s.append(other, rng.Below(other.size() + 1));
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsWordByte(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '.';
}

// Replaces one number of the text (a JSON or YAML number, a digit run of a name) by an
// extreme; inserts one where the text has none.
void ReplaceNumber(std::string& s, Rng& rng) {
  const std::string_view extreme = kExtremes[rng.Below(std::size(kExtremes))];
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i) {
    if (IsDigit(s[i]) && (i == 0 || !IsWordByte(s[i - 1]))) {
      starts.push_back(i > 0 && s[i - 1] == '-' ? i - 1 : i);
    }
  }
  if (starts.empty()) {
    InsertText(s, extreme, rng);
    return;
  }
  const size_t begin = starts[rng.Below(starts.size())];
  size_t end = begin + (s[begin] == '-' ? 1 : 0);
  while (end < s.size() && IsDigit(s[end])) ++end;
  if (end < s.size() && s[end] == '.') {
    for (++end; end < s.size() && IsDigit(s[end]);) ++end;
  }
  if (end < s.size() && (s[end] == 'e' || s[end] == 'E')) {
    ++end;
    if (end < s.size() && (s[end] == '-' || s[end] == '+')) ++end;
    while (end < s.size() && IsDigit(s[end])) ++end;
  }
  s.replace(begin, end - begin, extreme.data(), extreme.size());
}

void InsertToken(std::string& s, Rng& rng) {
  InsertText(s, kTokens[rng.Below(std::size(kTokens))], rng);
}

// A run of openers (closed or not) somewhere in the text, as deep as `max_len` allows.
void DeepRun(std::string& s, size_t max_len, Rng& rng) {
  const Nest& nest = kNests[rng.Below(std::size(kNests))];
  const bool closed = rng.OneIn(2);
  const size_t per_level = nest.open.size() + (closed ? nest.close.size() : 0);
  const size_t room = max_len > s.size() + 1 ? (max_len - s.size() - 1) / per_level : 0;
  const size_t depth = std::min(kDepths[rng.Below(std::size(kDepths))], room);
  std::string run;
  run.reserve(depth * per_level + 1);
  for (size_t i = 0; i < depth; ++i) run.append(nest.open);
  if (closed) {
    run.push_back('1');
    for (size_t i = 0; i < depth; ++i) run.append(nest.close);
  }
  InsertText(s, run, rng);
}

void Truncate(std::string& s, Rng& rng) { s.resize(rng.Below(s.size() + 1)); }

}  // namespace

Rng::Rng(uint64_t seed) {
  for (uint64_t& word : s_) {  // splitmix64
    seed += 0x9e3779b97f4a7c15ull;
    uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    word = z ^ (z >> 31);
  }
}

uint64_t Rng::Next() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t Rng::Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }

std::string Mutate(const std::string& input, const std::vector<std::string>& corpus, size_t max_len,
                   Rng& rng) {
  std::string s = input;
  const uint64_t count = 1 + (rng.OneIn(2) ? 0 : rng.Below(6));
  for (uint64_t i = 0; i < count; ++i) {
    // Out of 32: the structural mutations get 4 each, byte noise 2, truncation 1.
    const uint64_t pick = rng.Below(32);
    if (pick < 4) {
      ReplaceNumber(s, rng);
    } else if (pick < 8) {
      InsertToken(s, rng);
    } else if (pick < 12) {
      DuplicateChunk(s, rng);
    } else if (pick < 16) {
      Splice(s, corpus, rng);
    } else if (pick < 20) {
      DeleteRange(s, rng);
    } else if (pick < 22) {
      CrossOver(s, corpus, rng);
    } else if (pick < 24) {
      DeepRun(s, max_len, rng);
    } else if (pick < 27) {
      FlipBit(s, rng);
    } else if (pick < 29) {
      SetByte(s, rng);
    } else if (pick < 31) {
      InsertRandomBytes(s, rng);
    } else {
      Truncate(s, rng);
    }
    if (s.size() > max_len) s.resize(max_len);
  }
  return s;
}

}  // namespace rlmesh::fuzz
