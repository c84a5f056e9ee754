// Writes a small, valid byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json)
// for tiny test models: the 256 byte tokens (id = byte value), optionally merges learned
// from a text, then the special tokens <|endoftext|> (pad), <|im_start|> and <|im_end|>
// (eos), a ChatML chat_template, NFC and the Qwen2 split pattern. The files load in this
// library and in Hugging Face tokenizers alike. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rlmesh::tokenizer {

struct TinyTokenizerOptions {
  // Text to learn merges from (pre-tokenized like Qwen2). Empty: no merges.
  std::string merge_text;
  // At most this many merges; fewer when the text runs out of pairs seen twice or more.
  int num_merges = 0;
};

struct TinyTokenizerInfo {
  int32_t vocab_size = 0;  // one more than the largest id: the model's vocab_size
  int32_t num_merges = 0;
  int32_t endoftext_id = 0;  // also the pad token
  int32_t im_start_id = 0;
  int32_t im_end_id = 0;  // also the eos token
};

// The layout WriteTinyTokenizer would produce, without writing anything.
absl::StatusOr<TinyTokenizerInfo> TinyTokenizerLayout(const TinyTokenizerOptions& options);

// Creates `dir` if needed and writes the two files into it. Errors name the file.
absl::Status WriteTinyTokenizer(const std::string& dir, const TinyTokenizerOptions& options,
                                TinyTokenizerInfo* info = nullptr);

}  // namespace rlmesh::tokenizer
