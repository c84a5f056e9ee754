#include "common/metrics/promtool.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace rlmesh::metrics {

absl::StatusOr<std::string> PromtoolCheckMetrics(const std::string& exposition,
                                                 const std::string& promtool) {
  if (::access(promtool.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(
        promtool, " is not installed (Debian package `prometheus`); cannot check metrics"));
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/rlmesh_metrics_XXXXXX");
  const int fd = ::mkstemp(path.data());
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("mkstemp(", path, "): ", std::strerror(errno)));
  }
  ::close(fd);
  {
    std::ofstream out(path, std::ios::binary);
    out << exposition;
    if (!out) {
      ::unlink(path.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", path));
    }
  }
  // promtool reads the exposition from stdin.
  const std::string command = absl::StrCat("'", promtool, "' check metrics < '", path, "' 2>&1");
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ::unlink(path.c_str());
    return absl::InternalError(absl::StrCat("cannot run ", command, ": ", std::strerror(errno)));
  }
  std::string output;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  const int status = ::pclose(pipe);
  ::unlink(path.c_str());
  if (status == -1 || !WIFEXITED(status)) {
    return absl::InternalError(absl::StrCat(command, " did not exit normally: ", output));
  }
  if (WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("promtool check metrics exited ", WEXITSTATUS(status), ": ", output));
  }
  return output;
}

}  // namespace rlmesh::metrics
