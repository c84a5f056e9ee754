#include "services/rollout/tensor_codec.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"

namespace rlmesh::rollout {

namespace {

absl::StatusOr<torch::Dtype> ToTorch(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32: return torch::kFloat32;
    case v1::DTYPE_FLOAT16: return torch::kFloat16;
    case v1::DTYPE_BFLOAT16: return torch::kBFloat16;
    case v1::DTYPE_FLOAT64: return torch::kFloat64;
    case v1::DTYPE_INT64: return torch::kInt64;
    case v1::DTYPE_INT32: return torch::kInt32;
    case v1::DTYPE_INT8: return torch::kInt8;
    case v1::DTYPE_UINT8: return torch::kUInt8;
    case v1::DTYPE_BOOL: return torch::kBool;
    default: return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", dtype));
  }
}

absl::StatusOr<v1::DType> FromTorch(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat32: return v1::DTYPE_FLOAT32;
    case torch::kFloat16: return v1::DTYPE_FLOAT16;
    case torch::kBFloat16: return v1::DTYPE_BFLOAT16;
    case torch::kFloat64: return v1::DTYPE_FLOAT64;
    case torch::kInt64: return v1::DTYPE_INT64;
    case torch::kInt32: return v1::DTYPE_INT32;
    case torch::kInt8: return v1::DTYPE_INT8;
    case torch::kUInt8: return v1::DTYPE_UINT8;
    case torch::kBool: return v1::DTYPE_BOOL;
    default: return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", c10::toString(dtype)));
  }
}

}  // namespace

absl::Status EncodeTensor(const std::string& name, const torch::Tensor& tensor, v1::Tensor* out) {
  auto dtype = FromTorch(tensor.scalar_type());
  if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", dtype.status().message()));
  auto cpu = tensor.detach().to(torch::kCPU).contiguous();
  out->set_name(name);
  out->set_dtype(*dtype);
  out->clear_shape();
  for (int64_t d : cpu.sizes()) out->add_shape(d);
  out->set_data(static_cast<const char*>(cpu.data_ptr()), cpu.numel() * cpu.element_size());
  return absl::OkStatus();
}

absl::Status EncodeTensorParts(const std::string& name, const torch::Tensor& tensor,
                               int64_t part_bytes,
                               const std::function<absl::Status(v1::Tensor&&)>& emit) {
  const int64_t bytes = tensor.numel() * tensor.element_size();
  if (bytes <= part_bytes) {
    v1::Tensor whole;
    RETURN_IF_ERROR(EncodeTensor(name, tensor, &whole));
    return emit(std::move(whole));
  }
  auto dtype = FromTorch(tensor.scalar_type());
  if (!dtype.ok())
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", dtype.status().message()));
  auto cpu = tensor.detach().to(torch::kCPU).contiguous();
  const char* data = static_cast<const char*>(cpu.data_ptr());
  for (int64_t offset = 0; offset < bytes; offset += part_bytes) {
    v1::Tensor part;
    part.set_name(name);
    part.set_dtype(*dtype);
    for (int64_t d : cpu.sizes()) part.add_shape(d);
    part.set_offset(offset);
    part.set_data(data + offset, static_cast<size_t>(std::min(part_bytes, bytes - offset)));
    RETURN_IF_ERROR(emit(std::move(part)));
  }
  return absl::OkStatus();
}

namespace {

// The bytes of a tensor of `shape` with elements of `element_size` bytes; InvalidArgument
// naming `where` for a negative dimension or a size past int64 (checked before any
// allocation: LibTorch would throw, or try to allocate it).
absl::StatusOr<int64_t> ShapeBytes(const std::string& where,
                                   const google::protobuf::RepeatedField<int64_t>& shape,
                                   int64_t element_size) {
  int64_t bytes = element_size;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".shape: dimension ", d, " is negative"));
    }
    if (d != 0 && bytes > std::numeric_limits<int64_t>::max() / d) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".shape: [",
                                                     absl::StrJoin(shape, ", "),
                                                     "] holds more bytes than a tensor can"));
    }
    bytes *= d;
  }
  return bytes;
}

}  // namespace

absl::StatusOr<torch::Tensor> DecodeTensor(const v1::Tensor& tensor) {
  if (tensor.offset() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensors[", tensor.name(), "].offset: ", tensor.offset(),
                     "; parts of a tensor are accepted only by UpdateWeights, in DATA calls"));
  }
  auto dtype = ToTorch(tensor.dtype());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tensors[", tensor.name(), "].dtype: ",
                                                   dtype.status().message()));
  }
  ASSIGN_OR_RETURN(const int64_t expected_bytes,
                   ShapeBytes(absl::StrCat("tensors[", tensor.name(), "]"), tensor.shape(),
                              static_cast<int64_t>(c10::elementSize(*dtype))));
  if (static_cast<size_t>(expected_bytes) != tensor.data().size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensors[", tensor.name(), "].data: expected ",
                                                   expected_bytes, " bytes for the shape, got ",
                                                   tensor.data().size()));
  }
  std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
  auto out = torch::empty(shape, torch::TensorOptions().dtype(*dtype));
  std::memcpy(out.data_ptr(), tensor.data().data(), tensor.data().size());
  return out;
}

absl::StatusOr<std::optional<torch::Tensor>> TensorAssembler::Add(
    const v1::Tensor& proto, const std::optional<Expected>& expected) {
  const std::string where = absl::StrCat("tensors[", proto.name(), "]");
  if (name_.empty() && proto.offset() == 0) {
    // A whole tensor, or the first part of one.
    auto dtype = ToTorch(proto.dtype());
    if (!dtype.ok())
      return absl::InvalidArgumentError(absl::StrCat(where, ".dtype: ", dtype.status().message()));
    std::vector<int64_t> shape(proto.shape().begin(), proto.shape().end());
    if (expected.has_value() && shape != expected->shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".shape: expected [", absl::StrJoin(expected->shape, ", "), "], got [",
          absl::StrJoin(shape, ", "), "]"));
    }
    if (expected.has_value() && *dtype != expected->dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".dtype: expected ", c10::toString(expected->dtype), ", got ",
                       c10::toString(*dtype), " (", v1::DType_Name(proto.dtype()), ")"));
    }
    ASSIGN_OR_RETURN(
        const int64_t bytes,
        ShapeBytes(where, proto.shape(), static_cast<int64_t>(c10::elementSize(*dtype))));
    const int64_t got = static_cast<int64_t>(proto.data().size());
    if (got > bytes || (got < bytes && got == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".data: expected ", bytes,
                                                     " bytes for the shape (or a first part of "
                                                     "them), got ",
                                                     got));
    }
    auto out = torch::empty(shape, torch::TensorOptions().dtype(*dtype));
    std::memcpy(out.data_ptr(), proto.data().data(), static_cast<size_t>(got));
    if (got == bytes) return std::optional<torch::Tensor>(std::move(out));
    name_ = proto.name();
    tensor_ = std::move(out);
    filled_ = got;
    return std::optional<torch::Tensor>();
  }
  if (name_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".offset: ", proto.offset(), ", but no part of it came before"));
  }
  if (proto.name() != name_) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": tensor \"", name_, "\" is not finished: ", filled_, " of ",
                     tensor_.numel() * tensor_.element_size(), " bytes came"));
  }
  std::vector<int64_t> shape(proto.shape().begin(), proto.shape().end());
  auto dtype = ToTorch(proto.dtype());
  if (!dtype.ok() || *dtype != tensor_.scalar_type() || shape != tensor_.sizes().vec()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a part's dtype or shape differs from its first part's"));
  }
  const int64_t bytes = tensor_.numel() * tensor_.element_size();
  const int64_t got = static_cast<int64_t>(proto.data().size());
  if (proto.offset() != filled_ || got == 0 || filled_ + got > bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".offset: expected ", filled_, " (the bytes so far) and at most ",
                     bytes - filled_, " more bytes, got offset ", proto.offset(), " with ", got));
  }
  std::memcpy(static_cast<char*>(tensor_.data_ptr()) + filled_, proto.data().data(),
              static_cast<size_t>(got));
  filled_ += got;
  if (filled_ < bytes) return std::optional<torch::Tensor>();
  name_.clear();
  filled_ = 0;
  return std::optional<torch::Tensor>(std::move(tensor_));
}

absl::StatusOr<transport::DType> ToTransportDType(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat32: return transport::DType::kFloat32;
    case torch::kBFloat16: return transport::DType::kBFloat16;
    case torch::kFloat16: return transport::DType::kFloat16;
    case torch::kFloat64: return transport::DType::kFloat64;
    case torch::kInt64: return transport::DType::kInt64;
    case torch::kInt32: return transport::DType::kInt32;
    case torch::kInt8: return transport::DType::kInt8;
    case torch::kUInt8: return transport::DType::kUInt8;
    case torch::kBool: return transport::DType::kBool;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", c10::toString(dtype), " cannot cross the weight data plane"));
  }
}

absl::StatusOr<torch::Dtype> FromTransportDType(transport::DType dtype) {
  switch (dtype) {
    case transport::DType::kFloat32: return torch::kFloat32;
    case transport::DType::kBFloat16: return torch::kBFloat16;
    case transport::DType::kFloat16: return torch::kFloat16;
    case transport::DType::kFloat64: return torch::kFloat64;
    case transport::DType::kInt64: return torch::kInt64;
    case transport::DType::kInt32: return torch::kInt32;
    case transport::DType::kInt8: return torch::kInt8;
    case transport::DType::kUInt8: return torch::kUInt8;
    case transport::DType::kBool: return torch::kBool;
  }
  return absl::InvalidArgumentError(absl::StrCat("data-plane dtype ", static_cast<int>(dtype), " is unknown"));
}

}  // namespace rlmesh::rollout
