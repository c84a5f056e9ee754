// rlmesh.v1.Tensor <-> torch::Tensor: dtype, shape and little-endian raw bytes. Used by the
// trainer to send weights inline and by the rollout replica to receive them. Also the dtype
// mapping between torch and the weight data plane (common/transport).
#pragma once

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "common/transport/transport.h"
#include "rlmesh/v1/common.pb.h"

namespace rlmesh::rollout {

// Copies `tensor` (any device, contiguous or not) into a proto named `name`.
absl::Status EncodeTensor(const std::string& name, const torch::Tensor& tensor, v1::Tensor* out);

// A CPU tensor holding a copy of the proto's data. InvalidArgument (naming the tensor) for an
// unknown dtype or a byte count that does not match the shape.
absl::StatusOr<torch::Tensor> DecodeTensor(const v1::Tensor& tensor);

// torch dtype <-> data-plane dtype; InvalidArgument naming the dtype when it has no counterpart.
absl::StatusOr<transport::DType> ToTransportDType(torch::Dtype dtype);
absl::StatusOr<torch::Dtype> FromTransportDType(transport::DType dtype);

}  // namespace rlmesh::rollout
