// Per-RPC Prometheus metrics for a gRPC server, recorded by a server interceptor:
//   rlmesh_<component>_grpc_requests_total{method, code}      counter
//   rlmesh_<component>_grpc_request_duration_seconds{method}  histogram (receipt to status)
// `method` is "<package>.<Service>/<Method>" (bounded by the API), `code` the gRPC status name.
// Thread-safe: interceptors run on gRPC's threads.
#pragma once

#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status.h>

#include <memory>
#include <string>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace rlmesh::rpc {

// "OK", "INVALID_ARGUMENT", ... (the names of grpc::StatusCode); "UNKNOWN" for others.
const char* StatusCodeName(grpc::StatusCode code);

class RpcMetrics {
 public:
  // Registers the two families on `registry`, which must outlive this object.
  // `component` must match [a-z][a-z0-9_]* (it becomes part of the metric names).
  RpcMetrics(const std::string& component, prometheus::Registry& registry);

  // Counts one finished RPC.
  void Record(const std::string& method, grpc::StatusCode code, double seconds);

  // Creates the series of every method of the named services (full proto names, found in
  // the generated descriptor pool; unknown names are skipped) at zero: requests with code OK
  // and the duration histogram. A method nobody has called yet then reads 0 instead of being
  // absent, so rates and alerts over it have data from the first scrape.
  void InitializeMethods(const std::vector<std::string>& service_names);

  // An interceptor factory for grpc::ServerBuilder::experimental().SetInterceptorCreators();
  // `this` must outlive the server it is installed in.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeInterceptorFactory();

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& durations_;
};

}  // namespace rlmesh::rpc
