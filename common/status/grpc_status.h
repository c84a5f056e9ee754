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

// The one exception boundary of a gRPC handler: call it from the catch (...) of the handler's
// function-try-block. The exception in flight becomes RESOURCE_EXHAUSTED (std::bad_alloc) or
// INTERNAL, naming `rpc` (e.g. "RolloutService.Generate") and the exception's message, instead
// of gRPC's "Unexpected error in RPC handling"; it is also logged to stderr.
grpc::Status StatusFromCurrentException(const char* rpc);

// The same for a binary's main: prints "<component>: stopped by an unexpected exception: ..."
// and returns the exit status 1.
int ExitFromCurrentException(const char* component);

}  // namespace rlmesh
