// rlmesh.v1.Tensor <-> torch::Tensor: dtype, shape and little-endian raw bytes. Used by the
// trainer to send weights inline and by the rollout replica to receive them. Also the dtype
// mapping between torch and the weight data plane (common/transport).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/transport/transport.h"
#include "rlmesh/v1/common.pb.h"

namespace rlmesh::rollout {

// Copies `tensor` (any device, contiguous or not) into a proto named `name`.
absl::Status EncodeTensor(const std::string& name, const torch::Tensor& tensor, v1::Tensor* out);

// `tensor` as protos of at most `part_bytes` bytes of data each (Tensor.offset; one proto when
// it fits), handed to `emit` in order; the tensor is copied to the CPU once. Stops at the first
// error of `emit` and returns it.
absl::Status EncodeTensorParts(const std::string& name, const torch::Tensor& tensor,
                               int64_t part_bytes,
                               const std::function<absl::Status(v1::Tensor&&)>& emit);

// A CPU tensor holding a copy of the proto's data. InvalidArgument (naming the tensor) for an
// unknown dtype, a byte count that does not match the shape, or a part of a tensor (offset).
absl::StatusOr<torch::Tensor> DecodeTensor(const v1::Tensor& tensor);

// Joins the tensors of a weight update that arrive in parts (Tensor.offset). Not thread-safe.
class TensorAssembler {
 public:
  // A whole tensor is returned at once; the parts of one are copied into a tensor allocated at
  // the first, which is returned with the last; nullopt in between. InvalidArgument, naming the
  // tensor, for a part out of order, a part whose dtype or shape differs from the first, bytes
  // beyond the tensor, or a new tensor while another is unfinished.
  // With `expected` (the receiving parameter's shape and dtype), a tensor of another shape
  // or dtype is refused at its first part, before anything is allocated; so is a shape whose
  // size overflows, with or without it.
  struct Expected {
    std::vector<int64_t> shape;
    torch::Dtype dtype;
  };
  absl::StatusOr<std::optional<torch::Tensor>> Add(const v1::Tensor& proto,
                                                   const std::optional<Expected>& expected = {});
  // The tensor begun and not finished, "" when none.
  const std::string& unfinished() const { return name_; }

 private:
  std::string name_;
  torch::Tensor tensor_;
  int64_t filled_ = 0;
};

// torch dtype <-> data-plane dtype; InvalidArgument naming the dtype when it has no counterpart.
absl::StatusOr<transport::DType> ToTransportDType(torch::Dtype dtype);
absl::StatusOr<torch::Dtype> FromTransportDType(transport::DType dtype);

}  // namespace rlmesh::rollout
