// HttpGet: a blocking HTTP/1.1 GET over a plain TCP socket, enough to fetch /metrics from
// rlmesh processes in tests and tools (no TLS, no redirects, no chunked encoding: the server
// must send Content-Length or close the connection). Thread-safe; no shared state.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace rlmesh::metrics {

struct HttpResult {
  // Status code from the status line, e.g. 200.
  int status_code = 0;
  // The status line without CRLF, e.g. "HTTP/1.1 200 OK".
  std::string status_line;
  // Header fields, names lower-cased; a repeated name keeps the last value.
  std::map<std::string, std::string> headers;
  // The body.
  std::string body;
};

// Fetches http://host:port/path. UNAVAILABLE when the connection fails, DEADLINE_EXCEEDED
// after timeout_seconds, DATA_LOSS for a malformed or truncated response.
absl::StatusOr<HttpResult> HttpGet(const std::string& host, int port, const std::string& path,
                                   double timeout_seconds = 10.0);

}  // namespace rlmesh::metrics
