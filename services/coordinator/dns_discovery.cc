#include "services/coordinator/dns_discovery.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include <cstdio>

namespace rlmesh::coordinator {

absl::StatusOr<std::vector<std::string>> ResolveHost(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &result);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolving ", name, ": ", gai_strerror(rc)));
  }
  std::vector<std::string> addresses;
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw = a->ai_family == AF_INET
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (inet_ntop(a->ai_family, raw, text, sizeof(text)) != nullptr) {
      addresses.push_back(a->ai_family == AF_INET6 ? absl::StrCat("[", text, "]") : text);
    }
  }
  freeaddrinfo(result);
  std::sort(addresses.begin(), addresses.end());
  addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
  return addresses;
}

DnsDiscovery::DnsDiscovery(const DnsDiscoveryOptions& options, RolloutPool* pool, Resolver resolver)
    : options_(options), pool_(pool), resolver_(std::move(resolver)) {}

DnsDiscovery::~DnsDiscovery() { Stop(); }

absl::Status DnsDiscovery::RefreshOnce() {
  auto addresses = resolver_(options_.name);
  if (!addresses.ok()) return addresses.status();
  std::set<std::string> now;
  for (const auto& ip : *addresses) {
    const std::string address = absl::StrCat(ip, ":", options_.port);
    const std::string id = absl::StrCat("dns-", address);
    now.insert(id);
    // New ones join in SYNCING; known ones are refreshed (a LOST one is probed again).
    pool_->Register(address, id, 1, {{"source", "dns"}});
  }
  for (const auto& id : known_) {
    if (now.count(id) == 0) {
      pool_->Unregister(id, absl::StrCat("no longer in the DNS answer for ", options_.name))
          .IgnoreError();  // already gone
    }
  }
  known_ = std::move(now);
  return absl::OkStatus();
}

void DnsDiscovery::Start() {
  thread_ = std::thread([this] {
    std::string last_error;
    do {
      absl::Status status = RefreshOnce();
      const std::string error = status.ok() ? "" : std::string(status.message());
      if (error != last_error && !error.empty()) {
        std::fprintf(stderr, "coordinator: rollout discovery: %s; keeping the current fleet\n",
                     error.c_str());
      }
      last_error = error;
    } while (!stop_.WaitForNotificationWithTimeout(options_.interval));
  });
}

void DnsDiscovery::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

}  // namespace rlmesh::coordinator
