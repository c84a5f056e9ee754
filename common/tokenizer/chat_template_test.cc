#include "common/tokenizer/chat_template.h"

#include <gtest/gtest.h>

namespace rlmesh::tokenizer {
namespace {

using Messages = std::vector<ChatMessage>;

std::string Render(const ChatTemplate& t, const Messages& m, bool generation_prompt = true,
                   std::optional<bool> thinking = std::nullopt) {
  ChatTemplateOptions options;
  options.add_generation_prompt = generation_prompt;
  options.enable_thinking = thinking;
  auto text = t.Render(m, options);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

TEST(ChatTemplateTest, ChatMl) {
  auto t = ChatTemplate::FromName("chatml");
  ASSERT_TRUE(t.ok());
  const Messages m = {{"system", "Be brief.", {}}, {"user", "Hi", {}}};
  EXPECT_EQ(Render(*t, m),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(Render(*t, m, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

// Qwen2.5's template writes a default system prompt; it is used when none is given.
TEST(ChatTemplateTest, DetectsQwen25DefaultSystemPrompt) {
  const std::string jinja =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
      "messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are "
      "Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}";
  auto t = ChatTemplate::Detect(jinja, "test chat_template");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->kind(), ChatTemplateKind::kChatMl);
  EXPECT_EQ(Render(*t, {{"user", "Hi", {}}}),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Render(*t, {{"system", "S", {}}, {"user", "Hi", {}}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplateTest, Qwen3ThinkHandling) {
  auto t =
      ChatTemplate::Detect("{{'<|im_start|>'}}{% if enable_thinking %}</think>{% endif %}", "test");
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->kind(), ChatTemplateKind::kQwen3);
  EXPECT_EQ(Render(*t, {{"user", "Hi", {}}}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Render(*t, {{"user", "Hi", {}}}, true, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // An earlier assistant turn loses its reasoning; the last one (after the last user
  // query) keeps it in a think block.
  const Messages m = {{"user", "Q1", {}},
                      {"assistant", "<think>\nr1\n</think>\n\nA1", {}},
                      {"user", "Q2", {}},
                      {"assistant", "A2", std::string("r2")}};
  EXPECT_EQ(Render(*t, m, false),
            "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n");
}

TEST(ChatTemplateTest, Qwen3ToolResponsesJoinOneUserTurn) {
  auto t = ChatTemplate::FromName("qwen3");
  ASSERT_TRUE(t.ok());
  const Messages m = {{"user", "Q", {}}, {"tool", "r1", {}}, {"tool", "r2", {}}};
  EXPECT_EQ(Render(*t, m, false),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>user\n<tool_response>\nr1\n"
            "</tool_response>\n<tool_response>\nr2\n</tool_response><|im_end|>\n");
}

TEST(ChatTemplateTest, Llama3TrimsContentAndStartsWithBos) {
  auto t = ChatTemplate::Detect("{{ '<|start_header_id|>' }}", "test", "<|begin_of_text|>");
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->kind(), ChatTemplateKind::kLlama3);
  const Messages m = {{"system", " S \n", {}}, {"user", "Hi", {}}};
  EXPECT_EQ(Render(*t, m),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(Render(*t, {{"user", "Hi", {}}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplateTest, RawJoinsContents) {
  auto t = ChatTemplate::FromName("raw");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(Render(*t, {{"system", "a", {}}, {"user", "b", {}}}), "a\nb");
}

TEST(ChatTemplateTest, Errors) {
  auto unknown =
      ChatTemplate::Detect("{{ bos_token }}{% for m in messages %}[INST]", "x.json chat_template");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("x.json chat_template"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("[INST]"), std::string::npos);
  EXPECT_FALSE(ChatTemplate::FromName("vicuna").ok());
  EXPECT_FALSE(ChatTemplate::Detect("<|start_header_id|> Cutting Knowledge Date", "t").ok());
  auto t = ChatTemplate::FromName("chatml");
  EXPECT_FALSE(t->Render({}, {}).ok());
  EXPECT_FALSE(t->Render({{"", "x", {}}}, {}).ok());
}

}  // namespace
}  // namespace rlmesh::tokenizer
