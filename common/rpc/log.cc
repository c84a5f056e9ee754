#include "common/rpc/log.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rlmesh::rpc {

std::string FormatLogLine(const char* component, const std::string& message) {
  std::string line = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  line += ' ';
  line += component;
  line += ": ";
  line += message;
  if (line.empty() || line.back() != '\n') line += '\n';
  return line;
}

void Log(const char* component, const char* format, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, format);
  const int n = std::vsnprintf(buf, sizeof(buf), format, ap);
  va_end(ap);
  std::string message;
  if (n >= static_cast<int>(sizeof(buf))) {
    message.resize(static_cast<size_t>(n) + 1);
    va_start(ap, format);
    std::vsnprintf(message.data(), message.size(), format, ap);
    va_end(ap);
    message.resize(static_cast<size_t>(n));
  } else if (n > 0) {
    message.assign(buf, static_cast<size_t>(n));
  }
  const std::string line = FormatLogLine(component, message);
  // One write(2) keeps the line whole when several threads log at once.
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t w = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
}

}  // namespace rlmesh::rpc
