// Transport security of every rlmesh gRPC server and channel: TLS, and mutual TLS when a CA
// bundle is given. TlsOptions mirrors the rlmesh.tls.* config keys and is filled once in each
// binary's main (tls_config.h); the functions here read the PEM files it names and build
// grpc++ credentials, with errors that name the config key and the path. Plaintext is allowed
// only when TLS is off and the address is loopback or rlmesh.tls.insecure_plaintext is set.
// Stateless and thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/rpc/client.h"

namespace rlmesh::rpc {

struct TlsOptions {
  // rlmesh.tls.enabled: serve and dial gRPC over TLS.
  bool enabled = false;
  // rlmesh.tls.insecure_plaintext: allow plaintext on a non-loopback address.
  bool insecure_plaintext = false;
  // rlmesh.tls.cert_file: PEM certificate chain this process presents (server and client).
  std::string cert_file = {};
  // rlmesh.tls.key_file: PEM private key of cert_file.
  std::string key_file = {};
  // rlmesh.tls.ca_file: PEM CA bundle. Servers then require and verify client certificates
  // (mutual TLS) and clients verify servers against it; empty: servers ask for no client
  // certificate and clients verify servers against the system's roots.
  std::string ca_file = {};
  // rlmesh.tls.server_name: name clients expect in every server's certificate; empty means
  // the host part of the address dialed.
  std::string server_name = {};
};

// True for addresses that never leave the machine: 127.0.0.0/8, ::1, localhost.
bool IsLoopbackHost(const std::string& host);

// The host part of "host:port", "[v6]:port" or a bare host.
std::string HostOfAddress(const std::string& address);

// OK when `host` may carry gRPC under `tls`: TLS is on, or the host is loopback, or
// insecure_plaintext is set. FAILED_PRECONDITION naming the keys otherwise.
absl::Status CheckPlaintextAllowed(const TlsOptions& tls, const std::string& host);

// Server credentials: TLS with cert_file/key_file, requiring and verifying client
// certificates against ca_file when it is set; insecure credentials when TLS is off (after
// CheckPlaintextAllowed on `host`, the address the server binds). INVALID_ARGUMENT naming the
// key for a missing setting, NOT_FOUND / INVALID_ARGUMENT naming key and path for a file that
// cannot be read or holds no PEM block of the expected kind.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& tls, const std::string& host);

// Channel credentials: TLS verifying the server against ca_file (system roots when empty),
// presenting cert_file/key_file when set (both or neither); null when TLS is off, which
// CreateChannel reads as plaintext. Errors as MakeServerCredentials.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsOptions& tls);

// Sets options->credentials (MakeChannelCredentials) and options->tls_server_name from `tls`;
// the error of MakeChannelCredentials otherwise, leaving *options unchanged.
absl::Status ApplyTls(const TlsOptions& tls, ChannelOptions* options);

}  // namespace rlmesh::rpc
