// transport::Status -> absl::Status for the services (header-only: the transport libraries
// themselves stay free of Abseil, see transport.h). The codes share absl::StatusCode's values.
#pragma once

#include "absl/status/status.h"
#include "common/transport/status.h"

namespace rlmesh::transport {

inline absl::Status ToAbsl(const Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.code()), status.message());
}

}  // namespace rlmesh::transport
