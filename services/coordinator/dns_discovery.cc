#include "services/coordinator/dns_discovery.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

std::vector<std::string> OneFamily(const std::vector<std::string>& addresses) {
  std::vector<std::string> v4;
  for (const auto& ip : addresses) {
    if (!absl::StartsWith(ip, "[")) v4.push_back(ip);
  }
  return v4.empty() ? addresses : v4;
}

absl::StatusOr<std::vector<std::string>> ReplicaAddresses(const std::string& target,
                                                          const Resolver& resolver) {
  std::vector<std::string> listed;
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    if (!absl::StartsWith(target, scheme)) continue;
    for (absl::string_view entry : absl::StrSplit(target.substr(5), ',', absl::SkipEmpty())) {
      if (std::find(listed.begin(), listed.end(), entry) == listed.end()) {
        listed.emplace_back(entry);
      }
    }
    if (listed.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(target, " lists no address"));
    }
    return listed;
  }
  if (absl::StartsWith(target, "unix:") || absl::StartsWith(target, "unix-abstract:")) {
    return std::vector<std::string>{target};
  }
  std::string authority = target;  // host:port
  if (absl::StartsWith(authority, "dns://")) {
    const size_t slash = authority.find('/', 6);
    authority = slash == std::string::npos ? "" : authority.substr(slash + 1);
  } else if (absl::StartsWith(authority, "dns:")) {
    authority = authority.substr(4);
  }
  std::string host, port;
  if (absl::StartsWith(authority, "[")) {
    const size_t close = authority.find("]:");
    if (close == std::string::npos) return std::vector<std::string>{target};
    host = authority.substr(1, close - 1);
    port = authority.substr(close + 2);
  } else {
    const size_t colon = authority.rfind(':');
    if (colon == std::string::npos || authority.find(':') != colon) {
      return std::vector<std::string>{target};  // no port, or a bare IPv6 address
    }
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  in6_addr literal;
  if (inet_pton(AF_INET, host.c_str(), &literal) == 1 ||
      inet_pton(AF_INET6, host.c_str(), &literal) == 1) {
    return std::vector<std::string>{target};
  }
  auto resolved = resolver(host);
  if (!resolved.ok()) return resolved.status();
  const std::vector<std::string> ips = OneFamily(*resolved);
  if (ips.empty()) return absl::UnavailableError(absl::StrCat(host, " resolves to no address"));
  if (ips.size() == 1) return std::vector<std::string>{target};
  for (const auto& ip : ips) listed.push_back(absl::StrCat(ip, ":", port));
  return listed;
}

DnsDiscovery::DnsDiscovery(const DnsDiscoveryOptions& options, RolloutPool* pool, Resolver resolver)
    : options_(options), pool_(pool), resolver_(std::move(resolver)) {}

DnsDiscovery::~DnsDiscovery() { Stop(); }

absl::Status DnsDiscovery::RefreshOnce() {
  auto addresses = resolver_(options_.name);
  if (!addresses.ok()) return addresses.status();
  std::set<std::string> now;
  // A dual-stack Service answers with both addresses of each pod: one replica, not two.
  for (const auto& ip : OneFamily(*addresses)) {
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
