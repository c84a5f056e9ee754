// rlmesh.v1.Tensor <-> torch::Tensor: dtype, shape and little-endian raw bytes. Used by the
// trainer to send weights inline and by the rollout replica to receive them.
#pragma once

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "rlmesh/v1/common.pb.h"

namespace rlmesh::rollout {

// Copies `tensor` (any device, contiguous or not) into a proto named `name`.
absl::Status EncodeTensor(const std::string& name, const torch::Tensor& tensor, v1::Tensor* out);

// A CPU tensor holding a copy of the proto's data. InvalidArgument (naming the tensor) for an
// unknown dtype or a byte count that does not match the shape.
absl::StatusOr<torch::Tensor> DecodeTensor(const v1::Tensor& tensor);

}  // namespace rlmesh::rollout
