// `rlmesh tokenize --model DIR`: text (or JSON strings, or chat message lists) on stdin,
// one JSON array of token ids per line on stdout; `--decode` goes the other way.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "common/tokenizer/tokenizer.h"

namespace rlmesh::cli {
namespace {

using nlohmann::json;
using tokenizer::ChatMessage;

constexpr char kUsage[] =
    "usage: rlmesh tokenize --model DIR [--jsonl] [--decode] [--chat] [options]\n"
    "  stdin: one text per line -> one JSON array of token ids per line\n"
    "  --jsonl                  each input line is a JSON string (for texts with newlines)\n"
    "  --decode                 input lines are JSON arrays of ids; output JSON strings\n"
    "  --chat                   input lines are JSON message lists [{\"role\",\"content\"}]\n"
    "  --no-generation-prompt   with --chat: do not open an assistant turn\n"
    "  --template NAME          with --chat: raw|chatml|qwen3|llama3 instead of the one\n"
    "                           in tokenizer_config.json\n"
    "  --enable-thinking=BOOL   with --chat and qwen3: false closes an empty think block\n"
    "  --add-special-tokens=BOOL  run the post-processor (default true, as Hugging Face)\n"
    "  --skip-special-tokens    with --decode: leave special tokens out\n";

struct Flags {
  std::string model;
  bool jsonl = false, decode = false, chat = false, generation_prompt = true;
  bool add_special_tokens = true, skip_special_tokens = false;
  std::optional<bool> enable_thinking;
  std::string chat_template;
};

bool ParseBool(const std::string& flag, const std::string& value, bool& out) {
  if (value == "true" || value == "1") {
    out = true;
  } else if (value == "false" || value == "0") {
    out = false;
  } else {
    std::fprintf(stderr, "rlmesh tokenize: %s: expected true or false, got \"%s\"\n", flag.c_str(),
                 value.c_str());
    return false;
  }
  return true;
}

// Returns false (after printing why) on a bad command line.
bool ParseFlags(int argc, char** argv, Flags& flags) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    const size_t eq = arg.find('=');
    const bool has_value = eq != std::string::npos;
    if (has_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto next_value = [&](std::string& out) {
      if (has_value) {
        out = value;
        return true;
      }
      if (i + 1 >= argc) {
        std::fprintf(stderr, "rlmesh tokenize: %s needs a value\n", arg.c_str());
        return false;
      }
      out = argv[++i];
      return true;
    };
    bool b = true;
    if (arg == "--model") {
      if (!next_value(flags.model)) return false;
    } else if (arg == "--template") {
      if (!next_value(flags.chat_template)) return false;
    } else if (arg == "--jsonl") {
      flags.jsonl = true;
    } else if (arg == "--decode") {
      flags.decode = true;
    } else if (arg == "--chat") {
      flags.chat = true;
    } else if (arg == "--no-generation-prompt") {
      flags.generation_prompt = false;
    } else if (arg == "--skip-special-tokens") {
      flags.skip_special_tokens = true;
    } else if (arg == "--add-special-tokens" || arg == "--enable-thinking") {
      if (has_value && !ParseBool(arg, value, b)) return false;
      if (arg == "--add-special-tokens") {
        flags.add_special_tokens = b;
      } else {
        flags.enable_thinking = b;
      }
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      std::fprintf(stderr, "rlmesh tokenize: unknown flag \"%s\"\n%s", argv[i], kUsage);
      return false;
    }
  }
  if (flags.model.empty()) {
    std::fprintf(stderr, "rlmesh tokenize: --model DIR is required\n%s", kUsage);
    return false;
  }
  if (flags.decode + flags.chat + flags.jsonl > 1) {
    std::fprintf(stderr, "rlmesh tokenize: --decode, --chat and --jsonl exclude each other\n");
    return false;
  }
  return true;
}

absl::StatusOr<std::vector<ChatMessage>> ParseMessages(const json& j) {
  if (!j.is_array()) {
    return absl::InvalidArgumentError("expected a JSON array of {\"role\", \"content\"} objects");
  }
  std::vector<ChatMessage> messages;
  for (const json& m : j) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      return absl::InvalidArgumentError(
          "expected each message to be an object with string \"role\" and \"content\"");
    }
    ChatMessage message{m["role"].get<std::string>(), m["content"].get<std::string>(), {}};
    if (m.contains("reasoning_content") && m["reasoning_content"].is_string()) {
      message.reasoning_content = m["reasoning_content"].get<std::string>();
    }
    messages.push_back(std::move(message));
  }
  return messages;
}

// Handles one input line; an error is reported with the line number by the caller.
absl::StatusOr<std::string> ProcessLine(const tokenizer::Tokenizer& tok, const Flags& flags,
                                        const std::string& line) {
  auto ids_to_json = [](const std::vector<int32_t>& ids) { return json(ids).dump(); };
  try {
    if (flags.decode) {
      const json j = json::parse(line);
      if (!j.is_array()) return absl::InvalidArgumentError("expected a JSON array of token ids");
      std::vector<int32_t> ids;
      for (const json& id : j) {
        if (!id.is_number_integer()) return absl::InvalidArgumentError("expected integer ids");
        ids.push_back(id.get<int32_t>());
      }
      tokenizer::DecodeOptions options;
      options.skip_special_tokens = flags.skip_special_tokens;
      auto text = tok.Decode(ids, options);
      if (!text.ok()) return text.status();
      return json(*text).dump(-1, ' ', false, json::error_handler_t::replace);
    }
    if (flags.chat) {
      auto messages = ParseMessages(json::parse(line));
      if (!messages.ok()) return messages.status();
      tokenizer::ChatTemplateOptions options;
      options.add_generation_prompt = flags.generation_prompt;
      options.enable_thinking = flags.enable_thinking;
      auto ids = tok.EncodeChat(*messages, options, flags.chat_template);
      if (!ids.ok()) return ids.status();
      return ids_to_json(*ids);
    }
    std::string text = line;
    if (flags.jsonl) {
      const json j = json::parse(line);
      if (!j.is_string()) return absl::InvalidArgumentError("expected a JSON string");
      text = j.get<std::string>();
    }
    tokenizer::EncodeOptions options;
    options.add_special_tokens = flags.add_special_tokens;
    auto ids = tok.Encode(text, options);
    if (!ids.ok()) return ids.status();
    return ids_to_json(*ids);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(std::string("not valid JSON: ") + e.what());
  }
}

int RunTokenize(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, flags)) return 2;
  auto tok = tokenizer::Tokenizer::FromDirectory(flags.model);
  if (!tok.ok()) {
    std::fprintf(stderr, "rlmesh tokenize: %s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  std::ios::sync_with_stdio(false);
  std::string line, out;
  size_t line_number = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    auto result = ProcessLine(**tok, flags, line);
    if (!result.ok()) {
      std::fprintf(stderr, "rlmesh tokenize: stdin line %zu: %s\n", line_number,
                   std::string(result.status().message()).c_str());
      return 1;
    }
    out = *std::move(result);
    out.push_back('\n');
    std::cout << out;
  }
  std::cout.flush();
  return 0;
}

}  // namespace

RLMESH_REGISTER_COMMAND("tokenize", "text <-> token ids with a checkpoint's tokenizer.json",
                        RunTokenize);

}  // namespace rlmesh::cli
