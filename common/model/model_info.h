// What a client needs to know about a model folder to build valid requests
// (GetModelInfoResponse): vocabulary size, end and special tokens, the chat template, and the
// SHA-256 of the tokenizer and generation files. The serving service adds its length limits.
// Torch-free; reads files only.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "rlmesh/v1/common.pb.h"

namespace rlmesh::model {

// SHA-256 of the file's bytes, as 64 lowercase hex digits; NotFound when it cannot be read.
absl::StatusOr<std::string> FileSha256(const std::string& path);

// The model part of GetModelInfoResponse for the folder `model_path` (config.json: the
// architecture, vocab_size and the eos ids a sample stops at). The tokenizer fields stay empty
// when the folder has no tokenizer.json; a config.json or tokenizer.json that does not load is
// an error naming the file. Limits and weight version are left for the service to fill.
absl::StatusOr<v1::GetModelInfoResponse> ReadModelInfo(const std::string& model_path);

}  // namespace rlmesh::model
