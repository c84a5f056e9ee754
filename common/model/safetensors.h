// The LibTorch side of the safetensors format (safetensors_reader.h reads the headers):
// tensors out of a reader, and writing tensors to one file or a sharded checkpoint. Every
// error names the file and, where one is involved, the tensor.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/model_config.h"
#include "common/model/safetensors_reader.h"

namespace rlmesh::model {

// A new CPU tensor holding `name` of `reader` converted to `dtype`. NotFound names the tensor.
absl::StatusOr<torch::Tensor> ReadTensor(const SafetensorsReader& reader, const std::string& name,
                                         torch::Dtype dtype);

// Called for each tensor just before its bytes are written, in file order, with its name and
// the tensor as given (whose dtype and shape the header already holds); returns the tensor
// whose data to write, of that dtype and shape. Lets a caller produce the data as late as
// possible, e.g. gather a sharded unit only while its tensors are written.
using TensorFetch =
    std::function<absl::StatusOr<torch::Tensor>(const std::string& name, const torch::Tensor&)>;

// Writes `tensors` (any device; F32, BF16 or F16) to one safetensors file with
// __metadata__ {"format": "pt"}, atomically: into a temporary file beside `path`, then renamed.
// With `fetch`, the header is made from the tensors' dtypes and shapes alone (their storage may
// be released) and each tensor's data comes from fetch.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const TensorFetch& fetch = nullptr);

// Writes a checkpoint's weights into `dir`: one model.safetensors when the total is at most
// `max_shard_bytes`, else shards model-0000i-of-0000n.safetensors (each at most that size
// unless a single tensor is larger) plus model.safetensors.index.json.
absl::Status WriteSafetensorsCheckpoint(
    const std::string& dir, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    int64_t max_shard_bytes = int64_t{5} << 30, const TensorFetch& fetch = nullptr);

}  // namespace rlmesh::model
