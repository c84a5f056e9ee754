// Fuzz target: a Hugging Face tokenizer.json through Tokenizer::Create (written to a scratch
// file, as Create reads paths). A tokenizer that loads then encodes and decodes a few short
// texts (plain, with added tokens, with the chat templates) and looks up ids at the edges of
// its vocabulary. Encode must succeed on valid UTF-8 and Decode must refuse ids outside the
// vocabulary, as tokenizer.h promises; any other error is a correct answer.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rlmesh::fuzz::Fail;
  namespace tk = rlmesh::tokenizer;
  static const std::string path = (rlmesh::fuzz::ScratchDir() / "tokenizer.json").string();
  rlmesh::fuzz::WriteScratchFile(path, rlmesh::fuzz::AsText(data, size));
  tk::TokenizerOptions options;
  options.tokenizer_json = path;
  options.cache_capacity = 64;  // a small cache: one is built per input
  auto tokenizer = tk::Tokenizer::Create(options);
  if (!tokenizer.ok()) return 0;
  ++rlmesh::fuzz::AcceptedInputs();
  const tk::Tokenizer& t = **tokenizer;

  constexpr std::string_view kTexts[] = {
      "Hello, world! 123 4567",
      "<|im_start|>user\nCaf\xc3\xa9 na\xc3\xafve <|im_end|>  \n\t x",
      "   ",
      "",
  };
  for (std::string_view text : kTexts) {
    for (bool add_special_tokens : {true, false}) {
      tk::EncodeOptions encode;
      encode.add_special_tokens = add_special_tokens;
      auto ids = t.Encode(text, encode);
      if (!ids.ok()) Fail("Encode refused valid UTF-8 text");
      (void)t.Decode(*ids);
      tk::DecodeOptions skip;
      skip.skip_special_tokens = true;
      skip.clean_up_tokenization_spaces = true;
      (void)t.Decode(*ids, skip);
    }
  }
  std::vector<tk::ChatMessage> chat(2);
  chat[0].role = "system";
  chat[0].content = "Be brief.";
  chat[1].role = "user";
  chat[1].content = "2+2?";
  for (std::string_view name : {"chatml", "qwen3", "llama3", "raw"}) {
    (void)t.EncodeChat(chat, tk::ChatTemplateOptions{}, name);
  }

  const int32_t vocab = t.vocab_size();
  for (int32_t id : {0, vocab - 1, vocab / 2}) {
    (void)t.Decode({id});
    if (std::optional<std::string> token = t.IdToToken(id)) (void)t.TokenToId(*token);
  }
  if (t.Decode({vocab}).ok() || t.Decode({-1}).ok()) {
    Fail("Decode accepted an id outside [0, vocab_size)");
  }
  (void)t.SpecialIds();
  return 0;
}
