// Reading and writing the safetensors format of Hugging Face checkpoints: an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, ...,
// "__metadata__": {...}} and the raw little-endian tensor bytes. Files are memory-mapped for
// reading; a checkpoint may be one `model.safetensors` or shards listed by
// `model.safetensors.index.json`. Every error names the file and, where one is involved,
// the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/model_config.h"

namespace rlmesh::model {

struct SafetensorsEntry {
  std::string file;             // path of the file that holds the tensor
  std::string dtype;            // "F32", "BF16" or "F16"
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the file's mapping
  int64_t nbytes = 0;
};

// A read-only view of the tensors of one file or one sharded checkpoint. Thread-compatible;
// the mappings live as long as the reader.
class SafetensorsReader {
 public:
  // `path` is a .safetensors file, or a folder holding model.safetensors or
  // model.safetensors.index.json (with the shards it names). Validates every header.
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> Open(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  // Names the checkpoint in error messages (the file, or the index file of shards).
  const std::string& source() const { return source_; }

  // A new CPU tensor holding `name` converted to `dtype`. NotFound names the tensor.
  absl::StatusOr<torch::Tensor> Get(const std::string& name, torch::Dtype dtype) const;

  // Checks that the tensors are exactly those of config.TensorShapes(), with those shapes:
  // missing, unexpected and mis-shaped tensors are errors naming the file and the tensor.
  absl::Status ValidateAgainst(const ModelConfig& config) const;

 private:
  struct Mapping {
    std::string path;
    void* addr = nullptr;
    size_t size = 0;
  };
  SafetensorsReader() = default;
  absl::Status AddFile(const std::string& path);

  std::string source_;
  std::vector<Mapping> mappings_;
  std::map<std::string, SafetensorsEntry> entries_;
};

// Writes `tensors` (any device; F32, BF16 or F16) to one safetensors file with
// __metadata__ {"format": "pt"}, atomically: into a temporary file beside `path`, then renamed.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors);

// Writes a checkpoint's weights into `dir`: one model.safetensors when the total is at most
// `max_shard_bytes`, else shards model-0000i-of-0000n.safetensors (each at most that size
// unless a single tensor is larger) plus model.safetensors.index.json.
absl::Status WriteSafetensorsCheckpoint(
    const std::string& dir, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    int64_t max_shard_bytes = int64_t{5} << 30);

}  // namespace rlmesh::model
