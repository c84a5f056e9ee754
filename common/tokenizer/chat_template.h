// Chat formatting of a message list for the templates rlmesh knows, without a Jinja engine:
// the template text of tokenizer_config.json is recognised and rendered natively.
//
//   chatml  `<|im_start|>role\ncontent<|im_end|>\n` per message; generation prompt
//           `<|im_start|>assistant\n`. Qwen2/Qwen2.5 and the tiny tokenizer. A default
//           system prompt written in the template (Qwen2.5's "You are Qwen, ...") is
//           inserted when the conversation does not start with a system message.
//   qwen3   Qwen3's ChatML: no default system prompt; assistant turns after the last user
//           query carry `<think>\n...\n</think>\n\n` (reasoning from `reasoning_content` or
//           split off the content), earlier ones lose their reasoning; `tool` messages are
//           wrapped in `<tool_response>` inside a user turn; with enable_thinking=false the
//           generation prompt ends with an empty think block. Tools and tool calls are not
//           rendered.
//   llama3  `<|begin_of_text|>` then `<|start_header_id|>role<|end_header_id|>\n\n` +
//           trimmed content + `<|eot_id|>` per message; generation prompt
//           `<|start_header_id|>assistant<|end_header_id|>\n\n`. The Llama 3.1+ template
//           (date and tool system header) is refused rather than approximated.
//   raw     no template: the message contents joined by "\n"; the generation prompt adds
//           nothing.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace rlmesh::tokenizer {

struct ChatMessage {
  std::string role;
  std::string content;
  // Qwen3 only: the reasoning of an assistant turn, when kept apart from the content.
  std::optional<std::string> reasoning_content;
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  // Qwen3 only: false closes an empty think block after the generation prompt.
  std::optional<bool> enable_thinking;
};

enum class ChatTemplateKind { kRaw, kChatMl, kQwen3, kLlama3 };

class ChatTemplate {
 public:
  // raw | chatml | qwen3 | llama3. `bos_token` is used by llama3.
  static absl::StatusOr<ChatTemplate> FromName(std::string_view name,
                                               std::string_view bos_token = "<|begin_of_text|>");
  // Recognises the Jinja text of a chat_template; `source` (e.g. "tokenizer_config.json
  // chat_template") names it in the error for an unknown template.
  static absl::StatusOr<ChatTemplate> Detect(std::string_view jinja, std::string_view source,
                                             std::string_view bos_token = "<|begin_of_text|>");

  // Errors on an empty message list or a message without a role.
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     const ChatTemplateOptions& options) const;

  ChatTemplateKind kind() const { return kind_; }
  std::string_view name() const;
  const std::string& default_system_prompt() const { return default_system_; }

 private:
  ChatTemplate(ChatTemplateKind kind, std::string bos, std::string default_system)
      : kind_(kind), bos_(std::move(bos)), default_system_(std::move(default_system)) {}
  std::string RenderQwen3(const std::vector<ChatMessage>& messages,
                          const ChatTemplateOptions& options) const;

  ChatTemplateKind kind_;
  std::string bos_;
  std::string default_system_;
};

}  // namespace rlmesh::tokenizer
