#include "services/reward/scorers/math_scorer.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "services/reward/scorers/utf8.h"

namespace rlmesh::reward {
namespace {

// Python's str.replace: every non-overlapping occurrence, left to right, one pattern at a
// time (absl::StrReplaceAll with several pairs would replace them simultaneously).
void Replace(std::string& s, absl::string_view from, absl::string_view to) {
  s = absl::StrReplaceAll(s, {{from, to}});
}

// Python's str.split(sep): keeps empty pieces.
std::vector<std::string> Split(absl::string_view s, absl::string_view sep) {
  return absl::StrSplit(s, sep);
}

std::optional<std::string> RemoveRightUnits(const std::string& s) {
  // "\text{ " only ever introduces units in the MATH answers.
  if (!absl::StrContains(s, "\\text{ ")) return s;
  std::vector<std::string> parts = Split(s, "\\text{ ");
  if (parts.size() != 2) return std::nullopt;
  return parts[0];
}

std::optional<std::string> FixSqrt(const std::string& s) {
  if (!absl::StrContains(s, "\\sqrt")) return s;
  std::vector<std::string> parts = Split(s, "\\sqrt");
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (part.empty()) return std::nullopt;
    if (part[0] == '{') {
      absl::StrAppend(&out, "\\sqrt", part);
    } else {
      const size_t n = FirstCodePointBytes(part);
      absl::StrAppend(&out, "\\sqrt{", part.substr(0, n), "}", part.substr(n));
    }
  }
  return out;
}

std::optional<std::string> FixFracs(const std::string& s) {
  std::vector<std::string> parts = Split(s, "\\frac");
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    out += "\\frac";
    if (part.empty()) return std::nullopt;
    if (part[0] == '{') {
      out += part;
      continue;
    }
    if (CodePointCount(part) < 2) return s;  // "\frac1": left as it was
    const size_t a_len = FirstCodePointBytes(part);
    const std::string a = part.substr(0, a_len);
    const size_t b_len = FirstCodePointBytes(absl::string_view(part).substr(a_len));
    const std::string b = part.substr(a_len, b_len);
    const std::string rest = part.substr(a_len + b_len);
    if (b != "{") {
      absl::StrAppend(&out, "{", a, "}{", b, "}", rest);
    } else {
      absl::StrAppend(&out, "{", a, "}", b, rest);
    }
  }
  return out;
}

// True for an integer as Python's str(int(x)) writes it: "0" or an optional "-" and digits
// without a leading zero. (Checked by hand: std::regex recurses per character and could
// exhaust the stack on a long model output.)
bool IsCanonicalInt(absl::string_view s) {
  if (s == "0") return true;
  if (!s.empty() && s[0] == '-') s.remove_prefix(1);
  if (s.empty() || s[0] == '0') return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// "3/4" -> "\frac{3}{4}" when both sides are canonical integers (so "03/4" and "+3/4" stay
// as they are, as int() round-trips them differently in the Python original).
std::string FixASlashB(const std::string& s) {
  std::vector<std::string> parts = Split(s, "/");
  if (parts.size() != 2) return s;
  if (!IsCanonicalInt(parts[0]) || !IsCanonicalInt(parts[1])) return s;
  return absl::StrCat("\\frac{", parts[0], "}{", parts[1], "}");
}

}  // namespace

std::optional<std::string> LastBoxedOnlyString(absl::string_view text) {
  if (absl::StrContains(text, "\\boxed ")) {
    absl::string_view after = text.substr(text.rfind("\\boxed ") + 7);
    return absl::StrCat("\\boxed ", after.substr(0, after.find('$')));
  }
  size_t idx = text.rfind("\\boxed");
  if (idx == absl::string_view::npos) {
    idx = text.rfind("\\fbox");
    if (idx == absl::string_view::npos) return std::nullopt;
  }
  int open = 0;
  for (size_t i = idx; i < text.size(); ++i) {
    if (text[i] == '{') ++open;
    if (text[i] == '}') {
      --open;
      if (open == 0) return std::string(text.substr(idx, i + 1 - idx));
    }
  }
  return std::nullopt;
}

std::optional<std::string> RemoveBoxed(absl::string_view boxed) {
  if (absl::StrContains(boxed, "\\boxed ")) {
    if (!absl::StartsWith(boxed, "\\boxed ")) return std::nullopt;
    return std::string(boxed.substr(7));
  }
  if (!absl::StartsWith(boxed, "\\boxed{") || !absl::EndsWith(boxed, "}")) return std::nullopt;
  return std::string(boxed.substr(7, boxed.size() - 8));
}

std::optional<std::string> StripMathAnswer(absl::string_view answer) {
  std::string s(answer);
  Replace(s, "\n", "");
  Replace(s, "\\!", "");
  Replace(s, "\\\\", "\\");
  Replace(s, "tfrac", "frac");
  Replace(s, "dfrac", "frac");
  Replace(s, "\\left", "");
  Replace(s, "\\right", "");
  Replace(s, "^{\\circ}", "");
  Replace(s, "^\\circ", "");
  Replace(s, "\\$", "");
  std::optional<std::string> without_units = RemoveRightUnits(s);
  if (!without_units.has_value()) return std::nullopt;
  s = *std::move(without_units);
  Replace(s, "\\\\%", "");
  Replace(s, "\\%", "");
  Replace(s, " .", " 0.");
  Replace(s, "{.", "{0.");
  if (s.empty()) return s;
  if (s[0] == '.') s = "0" + s;
  // A short left-hand side ("k = ", "x=") in front of the answer.
  std::vector<std::string> sides = Split(s, "=");
  if (sides.size() == 2 && CodePointCount(sides[0]) <= 2) s = sides[1];
  std::optional<std::string> sqrt_fixed = FixSqrt(s);
  if (!sqrt_fixed.has_value()) return std::nullopt;
  s = *std::move(sqrt_fixed);
  Replace(s, " ", "");
  std::optional<std::string> fracs_fixed = FixFracs(s);
  if (!fracs_fixed.has_value()) return std::nullopt;
  s = *std::move(fracs_fixed);
  if (s == "0.5") s = "\\frac{1}{2}";
  return FixASlashB(s);
}

bool MathAnswersEquivalent(absl::string_view a, absl::string_view b) {
  std::optional<std::string> stripped_a = StripMathAnswer(a);
  std::optional<std::string> stripped_b = StripMathAnswer(b);
  if (!stripped_a.has_value() || !stripped_b.has_value()) return a == b;
  return *stripped_a == *stripped_b;
}

absl::StatusOr<ScoreResult> MathScorer::Score(const RewardItem& item) const {
  if (item.ground_truth.empty()) {
    return absl::InvalidArgumentError(
        "math scorer: ground_truth is empty; expected the reference answer (reward_model."
        "ground_truth of the dataset row)");
  }
  ScoreResult result;
  std::optional<std::string> answer;
  if (std::optional<std::string> boxed = LastBoxedOnlyString(item.response)) {
    answer = RemoveBoxed(*boxed);
  }
  const bool correct = answer.has_value() && MathAnswersEquivalent(*answer, item.ground_truth);
  result.score = correct ? 1.0 : 0.0;
  result.extra["acc"] = result.score;
  result.extra["has_answer"] = answer.has_value() ? 1.0 : 0.0;
  return result;
}

}  // namespace rlmesh::reward
