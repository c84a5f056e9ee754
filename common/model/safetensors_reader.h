// Reading the safetensors format of Hugging Face checkpoints without LibTorch: an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, ...,
// "__metadata__": {...}} and the raw little-endian tensor bytes. Files are memory-mapped; a
// checkpoint may be one `model.safetensors` or shards listed by `model.safetensors.index.json`.
// Opening validates every header against the file's size, so a truncated or corrupted file is
// refused before any tensor is read; the dry-run and `rlmesh run` use this to check a model
// folder in milliseconds. Tensors are turned into LibTorch tensors by ReadTensor
// (safetensors.h). Every error names the file and, where one is involved, the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/model_config.h"

namespace rlmesh::model {

struct SafetensorsEntry {
  std::string file;   // path of the file that holds the tensor
  std::string dtype;  // "F32", "BF16" or "F16"
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the file's mapping
  int64_t nbytes = 0;
};

// Bytes per element of a safetensors dtype name ("F32" 4, "BF16" and "F16" 2); 0 for the
// dtypes rlmesh does not read.
int64_t SafetensorsElementSize(const std::string& dtype);

// "[2, 3]".
std::string ShapeString(const std::vector<int64_t>& shape);

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

// True when `dir` holds model.safetensors or model.safetensors.index.json.
bool HasSafetensors(const std::string& dir);

// Checks a Hugging Face model folder without loading it: config.json parses into a supported
// architecture and, when the folder holds safetensors weights, every tensor is present with
// the shape config.json implies and lies inside its file. Returns the parsed config.json.
absl::StatusOr<ModelConfig> CheckModelFolder(const std::string& dir);

}  // namespace rlmesh::model
