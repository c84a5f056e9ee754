#include "common/rpc/rpc_metrics.h"

#include <google/protobuf/descriptor.h>

#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rlmesh::rpc {
namespace {

using grpc::experimental::InterceptionHookPoints;

const prometheus::Histogram::BucketBoundaries& DurationBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300};
  return *buckets;
}

// Times one RPC from its creation to the status it sends; an RPC that ends without sending a
// status (the client went away) is counted as CANCELLED.
class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(RpcMetrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)), start_(std::chrono::steady_clock::now()) {}

  ~MetricsInterceptor() override {
    if (!recorded_) Finish(grpc::StatusCode::CANCELLED);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      Finish(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  void Finish(grpc::StatusCode code) {
    recorded_ = true;
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
    metrics_->Record(method_, code, elapsed.count());
  }

  RpcMetrics* const metrics_;
  const std::string method_;
  const std::chrono::steady_clock::time_point start_;
  bool recorded_ = false;
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(RpcMetrics* metrics) : metrics_(metrics) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    std::string method = info->method() != nullptr ? info->method() : "unknown";
    if (method.starts_with("/")) method.erase(0, 1);
    // A health Watch is a wait, not a request: it lasts until the client stops watching
    // (WaitForServing cancels it once SERVING), which ended as an error at every start.
    if (method == "grpc.health.v1.Health/Watch") return nullptr;
    return new MetricsInterceptor(metrics_, std::move(method));
  }

 private:
  RpcMetrics* const metrics_;
};

}  // namespace

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

RpcMetrics::RpcMetrics(const std::string& component, prometheus::Registry& registry)
    : requests_(prometheus::BuildCounter()
                    .Name("rlmesh_" + component + "_grpc_requests_total")
                    .Help("gRPC requests handled, by method and status code.")
                    .Register(registry)),
      durations_(prometheus::BuildHistogram()
                     .Name("rlmesh_" + component + "_grpc_request_duration_seconds")
                     .Help("Time from receiving a gRPC request to sending its status.")
                     .Register(registry)) {}

void RpcMetrics::Record(const std::string& method, grpc::StatusCode code, double seconds) {
  requests_.Add({{"method", method}, {"code", StatusCodeName(code)}}).Increment();
  durations_.Add({{"method", method}}, DurationBuckets()).Observe(seconds);
}

void RpcMetrics::InitializeMethods(const std::vector<std::string>& service_names) {
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const std::string& name : service_names) {
    const google::protobuf::ServiceDescriptor* service = pool->FindServiceByName(name);
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) {
      const std::string method = absl::StrCat(name, "/", service->method(i)->name());
      requests_.Add({{"method", method}, {"code", StatusCodeName(grpc::StatusCode::OK)}});
      durations_.Add({{"method", method}}, DurationBuckets());
    }
  }
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcMetrics::MakeInterceptorFactory() {
  return std::make_unique<MetricsInterceptorFactory>(this);
}

}  // namespace rlmesh::rpc
