// Conversion between absl::Status (used everywhere inside rlmesh) and grpc::Status (used only
// at the edge of a gRPC handler or client call). Codes map one to one by name; the message is
// kept unchanged. Status payloads are not carried over.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace rlmesh {

// The grpc::Status with the same code and message; OK maps to grpc::Status::OK.
// (absl::Status already stores a code outside its enum as kUnknown.)
grpc::Status ToGrpcStatus(const absl::Status& status);

// The absl::Status with the same code and message. A code outside gRPC's 17 known codes
// becomes absl::StatusCode::kUnknown with the original number in the message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace rlmesh
