#include "common/rpc/service_server.h"

#include <fcntl.h>
#include <grpcpp/health_check_service_interface.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rpc/log.h"

namespace rlmesh::rpc {
namespace {

// Write end of the self-pipe of the ServiceServer that handles signals; -1 when none.
std::atomic<int> g_signal_fd{-1};
// Signals received so far; a second one exits at once.
std::atomic<int> g_signal_count{0};

void OnSignal(int signal_number) {
  if (g_signal_count.fetch_add(1) >= 1) _exit(128 + signal_number);
  const int fd = g_signal_fd.load();
  if (fd >= 0) {
    const char byte = static_cast<char>(signal_number);
    // Async-signal-safe; a full pipe means a wake-up is already pending.
    [[maybe_unused]] ssize_t n = ::write(fd, &byte, 1);
  }
}

// Why binding host:port fails, as the kernel says it ("Address already in use"), found by
// binding a plain socket the way gRPC would; "" when that works or the host does not resolve.
// gRPC's own error says only that no address was added.
std::string BindError(const std::string& host, int port) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0) return "";
  std::string why;
  for (addrinfo* a = found; a != nullptr && why.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0) why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return why;
}

// Where a service's port is set, for the message of a port it cannot listen on.
std::string PortHint(const std::string& component, const char* key) {
  for (const char* service : {"coordinator", "rollout", "reward", "reference", "trainer"}) {
    if (component == service) {
      return absl::StrCat(" (set --", key, " or rlmesh.", component, ".", key, "; 0 = any free)");
    }
  }
  return absl::StrCat(" (", key, " 0 = any free)");
}

absl::Status ValidateOptions(const ServiceServerOptions& options,
                             const std::vector<ServiceRegistration>& services) {
  static const std::regex kComponent("[a-z][a-z0-9_]*");
  if (!std::regex_match(options.component, kComponent)) {
    return absl::InvalidArgumentError(
        absl::StrCat("component: expected [a-z][a-z0-9_]*, got \"", options.component, "\""));
  }
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port: expected 0..65535, got ", options.port));
  }
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes: expected > 0, got ", options.max_message_bytes));
  }
  if (!(options.shutdown_deadline_seconds >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("shutdown_deadline_seconds: expected >= 0, got ",
                                                   options.shutdown_deadline_seconds));
  }
  for (const ServiceRegistration& s : services) {
    if (s.service == nullptr || s.name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("services: entry \"", s.name, "\" needs a name and a service"));
    }
  }
  if (options.handle_signals && g_signal_fd.load() >= 0) {
    return absl::FailedPreconditionError(
        "handle_signals: another ServiceServer in this process already handles signals");
  }
  return absl::OkStatus();
}

// Where a local client reaches a server bound to `host`.
std::string ConnectHost(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host == "[::]" ? "127.0.0.1" : host;
}

}  // namespace

ServiceServerOptions ServerOptionsFromArgs(const std::string& component, const ServiceArgs& args,
                                           const std::string& config_host, int64_t config_port,
                                           int64_t config_metrics_port) {
  ServiceServerOptions options;
  options.component = component;
  options.host = args.host.value_or(config_host);
  options.port = args.port.value_or(static_cast<int>(config_port));
  options.metrics_port = args.metrics_port.value_or(static_cast<int>(config_metrics_port));
  return options;
}

absl::StatusOr<std::unique_ptr<ServiceServer>> ServiceServer::Create(
    const ServiceServerOptions& options, const std::vector<ServiceRegistration>& services,
    std::shared_ptr<prometheus::Registry> registry) {
  if (absl::Status s = ValidateOptions(options, services); !s.ok()) return s;
  auto credentials = MakeServerCredentials(options.tls, options.host);
  if (!credentials.ok()) {
    return absl::Status(credentials.status().code(),
                        absl::StrCat(options.component, ": ", credentials.status().message()));
  }
  if (registry == nullptr) registry = std::make_shared<prometheus::Registry>();

  auto metrics_server = metrics::MetricsServer::Create(
      {.host = options.host, .port = options.metrics_port}, registry);
  if (!metrics_server.ok()) {
    return absl::Status(metrics_server.status().code(),
                        absl::StrCat(options.component, ": ", metrics_server.status().message(),
                                     PortHint(options.component, "metrics_port")));
  }

  auto rpc_metrics = std::make_unique<RpcMetrics>(options.component, *registry);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::StrCat(options.host, ":", options.port), *credentials, &port);
  // Without SO_REUSEPORT (gRPC's default on Linux), so that a second service started on the
  // same port fails instead of silently sharing its connections with the first.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(options.keepalive.time_seconds));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             Millis(options.keepalive.timeout_seconds));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Clients ping every rlmesh.rpc.keepalive_s, which may be far below gRPC's default floor of
  // 5 minutes; without these the server would answer them with GOAWAY (too_many_pings).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(rpc_metrics->MakeInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(creators));
  std::vector<std::string> names;
  for (const ServiceRegistration& s : services) {
    builder.RegisterService(s.service);
    names.push_back(s.name);
  }
  // grpc++'s default health service is served too, and probed by Kubernetes.
  std::vector<std::string> counted = names;
  counted.push_back("grpc.health.v1.Health");
  rpc_metrics->InitializeMethods(counted);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    const std::string why = options.port != 0 ? BindError(options.host, options.port) : "";
    return absl::UnavailableError(
        absl::StrCat(options.component, ": cannot listen on ", options.host, ":", options.port,
                     why.empty() ? "" : ": ", why, PortHint(options.component, "port")));
  }
  // Not ready until the owner says so (weights loaded, version known).
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);
  for (const std::string& name : names) health->SetServingStatus(name, false);

  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    server->Shutdown();
    return absl::InternalError(absl::StrCat("pipe(): ", std::strerror(errno)));
  }
  std::unique_ptr<ServiceServer> result(new ServiceServer(
      options, std::move(names), std::move(registry), std::move(rpc_metrics), std::move(server),
      port, std::move(metrics_server).value(), wake[0], wake[1]));
  if (options.handle_signals) {
    g_signal_count.store(0);
    g_signal_fd.store(wake[1]);
    struct sigaction action {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
  }
  if (options.announce) {
    std::printf("%s: listening on %s (metrics :%d)%s\n", options.component.c_str(),
                result->address().c_str(), result->metrics_port(),
                !options.tls.enabled          ? ""
                : options.tls.ca_file.empty() ? " tls"
                                              : " mtls");
    std::fflush(stdout);
  }
  return result;
}

ServiceServer::ServiceServer(const ServiceServerOptions& options,
                             std::vector<std::string> health_names,
                             std::shared_ptr<prometheus::Registry> registry,
                             std::unique_ptr<RpcMetrics> rpc_metrics,
                             std::unique_ptr<grpc::Server> server, int port,
                             std::unique_ptr<metrics::MetricsServer> metrics, int wake_read_fd,
                             int wake_write_fd)
    : options_(options),
      health_names_(std::move(health_names)),
      registry_(std::move(registry)),
      rpc_metrics_(std::move(rpc_metrics)),
      server_(std::move(server)),
      port_(port),
      metrics_(std::move(metrics)),
      serving_gauge_(prometheus::BuildGauge()
                         .Name("rlmesh_" + options.component + "_serving")
                         .Help("1 when the health status is SERVING (weights loaded), else 0.")
                         .Register(*registry_)
                         .Add({})),
      process_metrics_(std::make_unique<metrics::ProcessMetrics>(*registry_, options.process)),
      wake_read_fd_(wake_read_fd),
      wake_write_fd_(wake_write_fd) {}

ServiceServer::~ServiceServer() {
  {
    absl::MutexLock lock(&mu_);
    drain_ = nullptr;
  }
  StopServing(0);
  if (options_.handle_signals) {
    int expected = wake_write_fd_;
    if (g_signal_fd.compare_exchange_strong(expected, -1)) {
      signal(SIGTERM, SIG_DFL);
      signal(SIGINT, SIG_DFL);
    }
  }
  ::close(wake_read_fd_);
  ::close(wake_write_fd_);
}

std::string ServiceServer::address() const {
  return absl::StrCat(ConnectHost(options_.host), ":", port_);
}

void ServiceServer::SetServing(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus(serving);
  for (const std::string& name : health_names_) health->SetServingStatus(name, serving);
  serving_gauge_.Set(serving ? 1 : 0);
  process_metrics_->SetReady(serving);
  metrics_->SetReady(serving);
  Log(options_.component.c_str(), "health %s", serving ? "SERVING" : "NOT_SERVING");
}

void ServiceServer::SetDrainCallback(std::function<void()> drain) {
  absl::MutexLock lock(&mu_);
  drain_ = std::move(drain);
}

void ServiceServer::Shutdown() {
  const char byte = 0;
  [[maybe_unused]] ssize_t n = ::write(wake_write_fd_, &byte, 1);
}

int ServiceServer::Wait() {
  char byte = 0;
  while (true) {
    pollfd pfd{wake_read_fd_, POLLIN, 0};
    const int n = ::poll(&pfd, 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (::read(wake_read_fd_, &byte, 1) == 1) break;
  }
  const int signal_number = static_cast<unsigned char>(byte);
  if (signal_number != 0) {
    Log(options_.component.c_str(), "received signal %d (%s); draining", signal_number,
        strsignal(signal_number));
  } else {
    Log(options_.component.c_str(), "shutdown requested; draining");
  }
  StopServing(signal_number);
  return signal_number;
}

void ServiceServer::StopServing(int signal_number) {
  std::function<void()> drain;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    shutting_down_ = true;
    grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
    health->SetServingStatus(false);
    for (const std::string& name : health_names_) health->SetServingStatus(name, false);
    serving_gauge_.Set(0);
    process_metrics_->SetReady(false);
    metrics_->SetReady(false);
    drain = std::move(drain_);
  }
  const auto start = std::chrono::steady_clock::now();
  if (drain) drain();
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(
                        std::chrono::duration<double>(options_.shutdown_deadline_seconds)));
  server_->Wait();
  metrics_->Stop();
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  Log(options_.component.c_str(), "stopped%s%s after %.3f s", signal_number != 0 ? " on " : "",
      signal_number != 0 ? strsignal(signal_number) : "", took.count());
}

int RunFollowerRank(ServiceServer& server, const std::string& name,
                    const std::function<absl::Status()>& follow) {
  absl::Status followed;
  std::thread loop([&] {
    followed = follow();
    server.Shutdown();
  });
  if (server.Wait() != 0) {
    std::fflush(stdout);
    std::_Exit(0);
  }
  loop.join();
  if (!followed.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), followed.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace rlmesh::rpc
