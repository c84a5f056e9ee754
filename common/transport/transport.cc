#include "common/transport/transport.h"

#include <cstdio>
#include <fstream>

namespace rlmesh::transport {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kBFloat16:
      return 2;
    case DType::kFloat16:
      return 2;
    case DType::kFloat64:
      return 8;
    case DType::kInt64:
      return 8;
    case DType::kInt32:
      return 4;
    case DType::kInt8:
      return 1;
    case DType::kUInt8:
      return 1;
    case DType::kBool:
      return 1;
  }
  return 0;
}

std::string DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
    case DType::kFloat64:
      return "float64";
    case DType::kInt64:
      return "int64";
    case DType::kInt32:
      return "int32";
    case DType::kInt8:
      return "int8";
    case DType::kUInt8:
      return "uint8";
    case DType::kBool:
      return "bool";
  }
  return "dtype(" + std::to_string(static_cast<int>(dtype)) + ")";
}

int64_t TensorMeta::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  const char* name = "UNKNOWN";
  switch (code_) {
    case Code::kOk:
      name = "OK";
      break;
    case Code::kInvalidArgument:
      name = "INVALID_ARGUMENT";
      break;
    case Code::kDeadlineExceeded:
      name = "DEADLINE_EXCEEDED";
      break;
    case Code::kNotFound:
      name = "NOT_FOUND";
      break;
    case Code::kFailedPrecondition:
      name = "FAILED_PRECONDITION";
      break;
    case Code::kAborted:
      name = "ABORTED";
      break;
    case Code::kInternal:
      name = "INTERNAL";
      break;
    case Code::kUnavailable:
      name = "UNAVAILABLE";
      break;
  }
  return std::string(name) + ": " + message_;
}

StatusOr<PublishReport> WeightSender::PublishStream(uint64_t, const std::vector<TensorMeta>&,
                                                    const TensorSource&) {
  return FailedPreconditionError(
      "this weight sender reads a version's tensors after Publish returns (to catch up late "
      "receivers), so it cannot publish them from a stream");
}

std::string NodeId() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string line;
    std::getline(in, line);
    return line;
  }();
  return id;
}

Offer ChooseOffer(const Offer& primary, const Offer& same_node, const std::string& sender_node,
                  const std::string& node, bool on_gpu) {
  const bool takes = !same_node.backend.empty() && !same_node.endpoint.empty() &&
                     !sender_node.empty() && sender_node == node &&
                     (on_gpu || !MovesDeviceMemory(same_node.backend));
  return takes ? same_node : primary;
}

void OfferChoice::PassOver(const Offer& offer, const Offer& primary, const std::string& why) {
  std::fprintf(stderr, "%s: the trainer's %s at %s failed here (%s); taking its %s from now on\n",
               who_.c_str(), offer.backend.c_str(), offer.endpoint.c_str(), why.c_str(),
               primary.backend.c_str());
  failed_.insert(offer.endpoint);
}

}  // namespace rlmesh::transport
