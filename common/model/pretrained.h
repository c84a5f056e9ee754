// Hugging Face model folders: config.json + model.safetensors (or shards) + tokenizer files.
// LoadPretrained validates the weights against the config before building the network;
// SavePretrained writes a folder that transformers, vLLM and SGLang open.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model/causal_lm.h"
#include "common/model/safetensors.h"

namespace rlmesh::model {

// Reads `dir`/config.json and the weights in `dir`, checks every tensor against
// ModelConfig::TensorShapes() (missing, unexpected, mis-shaped tensors are errors naming the
// file and tensor) and returns the network on options.device in options.dtype.
absl::StatusOr<std::shared_ptr<CausalLmImpl>> LoadPretrained(const std::string& dir,
                                                             const CausalLmOptions& options);

// Copies the weights of the checkpoint in `dir` into `model`'s parameters (same
// architecture and shapes required), e.g. to refresh a policy from a newer save.
absl::Status LoadWeights(const std::string& dir, CausalLmImpl& model);

struct SaveOptions {
  // Above this many bytes of weights the checkpoint is split into shards with an index.
  int64_t max_shard_bytes = int64_t{5} << 30;
  // When set, each parameter's data comes from it just before it is written, in
  // named_parameters order (safetensors.h, TensorFetch): a sharded model gathers one unit at a
  // time instead of holding the whole model gathered.
  TensorFetch fetch;
};

// Writes config.json (torch_dtype = the model's dtype), the weights, and tokenizer.json plus
// tokenizer_config.json (and special_tokens_map.json / generation_config.json when present)
// copied from `tokenizer_source_dir` (skipped when empty). Everything is written into a
// temporary folder beside `dir` and renamed over `dir`, so readers never see half a save.
absl::Status SavePretrained(const CausalLmImpl& model, const std::string& dir,
                            const std::string& tokenizer_source_dir,
                            const SaveOptions& options = {});

// Model options from the config's rlmesh.dtype ("float32" | "bfloat16") and rlmesh.device
// ("cpu" | "cuda", or "cuda:N" as a group places its ranks); InvalidArgument naming the key for
// anything else.
absl::StatusOr<CausalLmOptions> ParseCausalLmOptions(const std::string& dtype,
                                                     const std::string& device);

// ParseCausalLmOptions, and for a CUDA device also the check that this process can use it
// (dist::CheckCudaDevice): FailedPrecondition naming `device_key` (the key or flag the device
// came from) and why not (a LibTorch without CUDA, no GPU visible, an index past them) before
// any model is built there.
absl::StatusOr<CausalLmOptions> CausalLmOptionsFromConfig(
    const std::string& dtype, const std::string& device,
    absl::string_view device_key = "rlmesh.device");

}  // namespace rlmesh::model
