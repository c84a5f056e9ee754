// MetricsServer: serves one prometheus::Registry as Prometheus text (format 0.0.4) on
// `GET /metrics` over a minimal HTTP/1.1 server of its own (POSIX sockets, one std::thread).
// It does not use prometheus-cpp's pull/civetweb exposer, whose small-stack threads fail in a
// process that has loaded LibTorch and OpenBLAS. `GET /readyz` answers 200 once SetReady(true)
// was called and 503 otherwise: an HTTP readiness probe for where the gRPC port speaks TLS,
// which Kubernetes' gRPC probes cannot. Any other path answers 404, any other method 405. One connection is served at a time (scrapes are rare and short), with
// `Connection: close`. Create() binds and starts the thread; Stop() (or the destructor) joins
// it. port() and Stop() may be called from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"

namespace rlmesh::metrics {

struct MetricsServerOptions {
  // IPv4 address or host name to bind; "0.0.0.0" (or "::") lets a Prometheus server on another
  // host scrape it.
  std::string host = "0.0.0.0";
  // TCP port; 0 picks a free one (see port()).
  int port = 0;
  // Seconds to wait for a client's request headers before dropping the connection.
  double read_timeout_seconds = 5.0;
};

class MetricsServer {
 public:
  // Binds host:port and starts serving `registry`. INVALID_ARGUMENT for a bad host or port,
  // UNAVAILABLE when the port cannot be bound (the message names host and port).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Create(
      const MetricsServerOptions& options, std::shared_ptr<prometheus::Registry> registry);

  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port (the chosen one when options.port was 0).
  int port() const { return port_; }

  // Stops accepting, finishes the response in progress and joins the thread. Idempotent.
  void Stop();

  // What /readyz reports: 200 when true, 503 when false (the initial state).
  void SetReady(bool ready) { ready_.store(ready); }

 private:
  MetricsServer(const MetricsServerOptions& options, std::shared_ptr<prometheus::Registry> registry,
                int listen_fd, int port, int wake_read_fd, int wake_write_fd);

  void Serve();
  void HandleConnection(int fd);
  // The whole HTTP response (status line, headers, body) for one request head.
  std::string Respond(const std::string& request_head) const;

  const MetricsServerOptions options_;
  const std::shared_ptr<prometheus::Registry> registry_;
  const int listen_fd_;
  const int port_;
  // A pipe whose write end Stop() writes to, to wake the poll() of the serving thread.
  const int wake_read_fd_;
  const int wake_write_fd_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> ready_{false};
  std::thread thread_;
};

}  // namespace rlmesh::metrics
