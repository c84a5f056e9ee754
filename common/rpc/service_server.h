// ServiceServer: the gRPC + health + /metrics + signal plumbing that every rlmesh service
// binary shares.
//
//   auto server = ServiceServer::Create(options, {{RolloutService::service_full_name(), &impl}});
//   ... load weights ...
//   (*server)->SetServing(true);      // readiness: weights loaded, version known
//   (*server)->SetDrainCallback([&] { engine.AbortAll(); });
//   return (*server)->Wait();         // until SIGTERM/SIGINT or Shutdown()
//
// Create() builds a grpc::Server on host:port with the given services and grpc++'s built-in
// grpc.health.v1 service (overall "" and every service name NOT_SERVING until SetServing(true);
// grpc++ starts "" at SERVING, so there is a window of microseconds between the port opening
// and Create() setting it, before the announce line is printed),
// starts a MetricsServer on the registry, records per-RPC metrics, and prints one line to
// stdout, flushed, that tests and `rlmesh run` parse:
//   <component>: listening on 127.0.0.1:<port> (metrics :<metrics_port>)[ tls| mtls]
// With handle_signals, SIGTERM and SIGINT make Wait() set NOT_SERVING, run the drain callback
// (in-flight work finishes or aborts), shut the gRPC server down with a deadline (RPCs still
// running then are cancelled) and stop the metrics server; a second signal during the drain
// exits the process at once with status 128 + signal. Only one ServiceServer per process may
// handle signals at a time. Services must outlive the ServiceServer. All methods are thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/metrics_server.h"
#include "common/metrics/process_metrics.h"
#include "common/rpc/rpc_metrics.h"
#include "common/rpc/service_args.h"
#include "common/rpc/tls.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace rlmesh::rpc {

struct ServiceServerOptions {
  // Component name used in the announce line, logs and metric names ([a-z][a-z0-9_]*).
  std::string component = "service";
  // Address the gRPC and metrics servers bind; "0.0.0.0" for all interfaces.
  std::string host = "127.0.0.1";
  // gRPC port; 0 picks a free one.
  int port = 0;
  // /metrics port; 0 picks a free one.
  int metrics_port = 0;
  // Largest gRPC message accepted or sent (batches of tokens and log-probs can be large).
  int max_message_bytes = 1 << 30;
  // Seconds Shutdown gives in-flight RPCs after the drain callback before cancelling them.
  double shutdown_deadline_seconds = 30.0;
  // Install SIGTERM/SIGINT handlers that start the shutdown sequence.
  bool handle_signals = true;
  // Print the "listening on" line to stdout.
  bool announce = true;
  // Transport security of the gRPC port (mutual TLS when tls.ca_file is set). With TLS off,
  // Create() refuses a non-loopback host unless tls.insecure_plaintext is set. /metrics is
  // always plain HTTP.
  TlsOptions tls = {};
  // Pings to every client (and how often clients may ping: as often as they like).
  KeepaliveOptions keepalive = {};
  // The rlmesh_process_* metrics: capacity (rlmesh.device_memory_gb) and the threads the
  // utilization divides by (rlmesh.num_threads); 0 = detect.
  metrics::ProcessMetricsOptions process = {};
};

// Options for `component`: --host, --port and --metrics_port where given on the command line,
// else the config's values (rlmesh.host, rlmesh.<component>.port and .metrics_port).
ServiceServerOptions ServerOptionsFromArgs(const std::string& component, const ServiceArgs& args,
                                           const std::string& config_host, int64_t config_port,
                                           int64_t config_metrics_port);

// A service to serve and the name its health status is reported under
// (e.g. rlmesh::v1::RolloutService::service_full_name()).
struct ServiceRegistration {
  std::string name;
  grpc::Service* service = nullptr;
};

class ServiceServer {
 public:
  // Starts serving. `registry` receives the per-RPC and serving metrics and is served at
  // /metrics; a new one is made when null. INVALID_ARGUMENT for bad options (naming the
  // option), FAILED_PRECONDITION for plaintext on a non-loopback host without
  // tls.insecure_plaintext, the errors of MakeServerCredentials for TLS files (naming the
  // rlmesh.tls.* key and the path), UNAVAILABLE when a port cannot be bound.
  static absl::StatusOr<std::unique_ptr<ServiceServer>> Create(
      const ServiceServerOptions& options, const std::vector<ServiceRegistration>& services,
      std::shared_ptr<prometheus::Registry> registry = nullptr);

  // Shuts down (without the drain callback) if Wait() has not done so.
  ~ServiceServer();
  ServiceServer(const ServiceServer&) = delete;
  ServiceServer& operator=(const ServiceServer&) = delete;

  int port() const { return port_; }
  int metrics_port() const { return metrics_->port(); }
  // "127.0.0.1:<port>" (or "<host>:<port>" for a specific host): where clients connect.
  std::string address() const;
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

  // Sets the health of "" and of every registered service name; ignored once shutdown began.
  void SetServing(bool serving);

  // Called once by the shutdown sequence, after health goes NOT_SERVING and before the gRPC
  // server stops, so the service can finish or abort in-flight work. Replaces any earlier one.
  void SetDrainCallback(std::function<void()> drain);

  // Starts the shutdown sequence from any thread (as a signal would); Wait() returns 0.
  void Shutdown();

  // Blocks until SIGTERM/SIGINT (with handle_signals) or Shutdown(), runs the shutdown
  // sequence, and returns the signal number, or 0 after Shutdown(). Call from one thread.
  int Wait();

 private:
  ServiceServer(const ServiceServerOptions& options, std::vector<std::string> health_names,
                std::shared_ptr<prometheus::Registry> registry,
                std::unique_ptr<RpcMetrics> rpc_metrics, std::unique_ptr<grpc::Server> server,
                int port, std::unique_ptr<metrics::MetricsServer> metrics, int wake_read_fd,
                int wake_write_fd);

  // The shutdown sequence; runs once.
  void StopServing(int signal_number);

  const ServiceServerOptions options_;
  const std::vector<std::string> health_names_;
  const std::shared_ptr<prometheus::Registry> registry_;
  // Declared before server_ so the interceptors' target outlives the server.
  const std::unique_ptr<RpcMetrics> rpc_metrics_;
  std::unique_ptr<grpc::Server> server_;
  const int port_;
  std::unique_ptr<metrics::MetricsServer> metrics_;
  prometheus::Gauge& serving_gauge_;
  // rlmesh_process_* (docs/metrics.md), readiness included.
  std::unique_ptr<metrics::ProcessMetrics> process_metrics_;
  // Self-pipe: the signal handler and Shutdown() write one byte (the signal number or 0).
  const int wake_read_fd_;
  const int wake_write_fd_;

  absl::Mutex mu_;
  std::function<void()> drain_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// A rank > 0 of a service group (trainer or reference): runs `follow`, the rank's loop over
// rank 0's commands, on a thread while `server` serves health and /metrics, and returns the
// process's exit code. 0 once `follow` returned OK (the server is then shut down); 1 with
// "<name>: <status>" on stderr when it failed. A signal stops the process at once with 0:
// the loop, waiting on rank 0, cannot be joined.
int RunFollowerRank(ServiceServer& server, const std::string& name,
                    const std::function<absl::Status()>& follow);

}  // namespace rlmesh::rpc
