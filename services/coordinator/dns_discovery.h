// Rollout replicas found through DNS (rlmesh.rollout.discovery_dns, a Kubernetes headless
// Service): every `interval` the name is resolved; each address not yet in the pool (the IPv4
// ones when a dual-stack answer has both) is registered as "<ip>:<port>" (it gets the current
// weights before any work), and a replica
// this discovery added whose address left the answer is unregistered (its unfinished samples
// are re-dispatched). Replicas registered by other means are left alone. A failed lookup keeps
// the fleet as it is. Owns one thread; the resolver is injectable for tests.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "services/coordinator/rollout_pool.h"

namespace rlmesh::coordinator {

// Addresses (IPv4 dotted or IPv6) of a host name.
using Resolver = std::function<absl::StatusOr<std::vector<std::string>>(const std::string& name)>;

// getaddrinfo(3), TCP, any family; the addresses sorted and de-duplicated.
absl::StatusOr<std::vector<std::string>> ResolveHost(const std::string& name);

// The IPv4 addresses of a DNS answer when it has any, else all (IPv6): one address per server
// of a dual-stack name.
std::vector<std::string> OneFamily(const std::vector<std::string>& addresses);

// The addresses a gRPC target lists or resolves to, for parts that must reach every server
// behind it one by one (the KL reference's weight updates): "ipv4:a:p,b:p" and "ipv6:[a]:p,..."
// list theirs; "host:port" and "dns:[//authority/]host:port" resolve the host, keeping the
// IPv4 answers when there are any (a dual-stack name lists each server once) and giving each
// the port; an address literal, a host that resolves to one address and a unix: target are
// returned unchanged (so TLS still checks the dialed name). An empty answer is an error.
absl::StatusOr<std::vector<std::string>> ReplicaAddresses(const std::string& target,
                                                          const Resolver& resolver = ResolveHost);

struct DnsDiscoveryOptions {
  std::string name;  // rlmesh.rollout.discovery_dns
  int64_t port = 0;  // rlmesh.rollout.port: every replica listens on it
  absl::Duration interval = absl::Seconds(10);
};

class DnsDiscovery {
 public:
  DnsDiscovery(const DnsDiscoveryOptions& options, RolloutPool* pool, Resolver resolver = ResolveHost);
  ~DnsDiscovery();
  DnsDiscovery(const DnsDiscovery&) = delete;
  DnsDiscovery& operator=(const DnsDiscovery&) = delete;

  // One resolution and the registrations it implies (the thread calls it every interval).
  absl::Status RefreshOnce();
  void Start();
  void Stop();

 private:
  const DnsDiscoveryOptions options_;
  RolloutPool* const pool_;
  const Resolver resolver_;
  std::set<std::string> known_;  // ids this discovery registered; only the refresh touches it
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace rlmesh::coordinator
