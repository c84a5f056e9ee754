#include "common/tokenizer/chat_template.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/tokenizer/byte_level.h"

namespace rlmesh::tokenizer {
namespace {

// Python's str.isspace, which Jinja's `trim` filter uses.
bool IsPythonSpace(char32_t cp) { return IsUnicodeWhiteSpace(cp) || (cp >= 0x1C && cp <= 0x1F); }

// Jinja `| trim` (Python str.strip()).
std::string Trim(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    size_t next = begin;
    if (!IsPythonSpace(DecodeUtf8At(s, next))) break;
    begin = next;
  }
  size_t end = s.size();
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    size_t probe = start;
    if (!IsPythonSpace(DecodeUtf8At(s, probe))) break;
    end = start;
  }
  return std::string(s.substr(begin, end - begin));
}

std::string_view LStripNewlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view RStripNewlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// A default system prompt spelled as a literal after `<|im_start|>system\n` in the template
// (Qwen2.5: '<|im_start|>system\nYou are Qwen, ...<|im_end|>\n'), or "".
std::string FindDefaultSystemPrompt(std::string_view jinja) {
  constexpr std::string_view kOpen = "<|im_start|>system\\n";
  size_t pos = 0;
  while ((pos = jinja.find(kOpen, pos)) != std::string_view::npos) {
    pos += kOpen.size();
    if (pos >= jinja.size() || jinja[pos] == '\'' || jinja[pos] == '"') continue;
    const size_t end = jinja.find("<|im_end|>", pos);
    if (end == std::string_view::npos) break;
    std::string_view literal = jinja.substr(pos, end - pos);
    if (absl::StrContains(Av(literal), "'") || absl::StrContains(Av(literal), "\"") ||
        absl::StrContains(Av(literal), "{")) {
      continue;  // not a plain literal
    }
    return absl::StrReplaceAll(Av(literal), {{"\\n", "\n"}});
  }
  return "";
}

}  // namespace

std::string_view ChatTemplate::name() const {
  switch (kind_) {
    case ChatTemplateKind::kRaw:
      return "raw";
    case ChatTemplateKind::kChatMl:
      return "chatml";
    case ChatTemplateKind::kQwen3:
      return "qwen3";
    case ChatTemplateKind::kLlama3:
      return "llama3";
  }
  return "raw";
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromName(std::string_view name,
                                                    std::string_view bos_token) {
  if (name == "raw") return ChatTemplate(ChatTemplateKind::kRaw, "", "");
  if (name == "chatml") return ChatTemplate(ChatTemplateKind::kChatMl, "", "");
  if (name == "qwen3") return ChatTemplate(ChatTemplateKind::kQwen3, "", "");
  if (name == "llama3") {
    return ChatTemplate(ChatTemplateKind::kLlama3,
                        std::string(bos_token.empty() ? "<|begin_of_text|>" : bos_token), "");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("chat template \"", Av(name), "\": expected one of raw, chatml, qwen3, llama3"));
}

absl::StatusOr<ChatTemplate> ChatTemplate::Detect(std::string_view jinja, std::string_view source,
                                                  std::string_view bos_token) {
  if (absl::StrContains(Av(jinja), "<|start_header_id|>")) {
    if (absl::StrContains(Av(jinja), "Cutting Knowledge Date")) {
      return absl::UnimplementedError(
          absl::StrCat(Av(source),
                       ": the Llama 3.1+ template (date and tools system header) is not supported; "
                       "pass the template name llama3 to use the plain Llama 3 format"));
    }
    return FromName("llama3", bos_token);
  }
  if (absl::StrContains(Av(jinja), "<|im_start|>")) {
    if (absl::StrContains(Av(jinja), "</think>") ||
        absl::StrContains(Av(jinja), "enable_thinking")) {
      return ChatTemplate(ChatTemplateKind::kQwen3, "", "");
    }
    return ChatTemplate(ChatTemplateKind::kChatMl, "", FindDefaultSystemPrompt(jinja));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(Av(source),
                   ": unknown chat template (expected ChatML with <|im_start|> or Llama 3 with "
                   "<|start_header_id|>), found \"",
                   Av(jinja.substr(0, 80)), jinja.size() > 80 ? "..." : "",
                   "\"; use the raw mode or name a template (raw|chatml|qwen3|llama3)"));
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                 const ChatTemplateOptions& options) const {
  if (messages.empty()) {
    return absl::InvalidArgumentError("chat messages: expected at least one message, got none");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat messages[", i, "]: expected a non-empty role"));
    }
  }
  std::string out;
  switch (kind_) {
    case ChatTemplateKind::kRaw: {
      std::vector<absl::string_view> contents;
      for (const ChatMessage& m : messages) contents.push_back(Av(m.content));
      return absl::StrJoin(contents, "\n");
    }
    case ChatTemplateKind::kChatMl:
      if (!default_system_.empty() && messages[0].role != "system") {
        absl::StrAppend(&out, "<|im_start|>system\n", default_system_, "<|im_end|>\n");
      }
      for (const ChatMessage& m : messages) {
        absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
      }
      if (options.add_generation_prompt) out += "<|im_start|>assistant\n";
      return out;
    case ChatTemplateKind::kQwen3:
      return RenderQwen3(messages, options);
    case ChatTemplateKind::kLlama3:
      out = bos_;
      for (const ChatMessage& m : messages) {
        absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n",
                        Trim(m.content), "<|eot_id|>");
      }
      if (options.add_generation_prompt) {
        out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      }
      return out;
  }
  return out;
}

std::string ChatTemplate::RenderQwen3(const std::vector<ChatMessage>& messages,
                                      const ChatTemplateOptions& options) const {
  std::string out;
  if (messages[0].role == "system") {
    absl::StrAppend(&out, "<|im_start|>system\n", messages[0].content, "<|im_end|>\n");
  }
  // The last user message that is not a tool response wrapped as a user turn.
  size_t last_query = messages.size() - 1;
  for (size_t k = messages.size(); k-- > 0;) {
    const ChatMessage& m = messages[k];
    if (m.role == "user" && !(absl::StartsWith(m.content, "<tool_response>") &&
                              absl::EndsWith(m.content, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool first = i == 0, last = i + 1 == messages.size();
    if (m.role == "user" || (m.role == "system" && !first)) {
      absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
    } else if (m.role == "assistant") {
      std::string_view content = m.content;
      std::string reasoning;
      if (m.reasoning_content.has_value()) {
        reasoning = *m.reasoning_content;
      } else if (const size_t close = content.rfind("</think>"); close != std::string_view::npos) {
        std::string_view before = content.substr(0, content.find("</think>"));
        before = RStripNewlines(before);
        if (const size_t open = before.rfind("<think>"); open != std::string_view::npos) {
          before = before.substr(open + 7);
        }
        reasoning = std::string(LStripNewlines(before));
        content = LStripNewlines(content.substr(close + 8));
      }
      if (i > last_query && (last || !reasoning.empty())) {
        absl::StrAppend(&out, "<|im_start|>", m.role, "\n<think>\n",
                        Av(RStripNewlines(LStripNewlines(reasoning))), "\n</think>\n\n",
                        Av(LStripNewlines(content)));
      } else {
        absl::StrAppend(&out, "<|im_start|>", m.role, "\n", Av(content));
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (first || messages[i - 1].role != "tool") out += "<|im_start|>user";
      absl::StrAppend(&out, "\n<tool_response>\n", m.content, "\n</tool_response>");
      if (last || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (options.enable_thinking.has_value() && !*options.enable_thinking) {
      out += "<think>\n\n</think>\n\n";
    }
  }
  return out;
}

}  // namespace rlmesh::tokenizer
