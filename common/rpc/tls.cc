#include "common/rpc/tls.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace rlmesh::rpc {
namespace {

// What a PEM file must hold to be worth handing to gRPC, whose own errors for a bad file come
// only at handshake time and name neither the key nor the path.
enum class PemKind { kCertificate, kPrivateKey };

// Contents of the PEM file named by config key `key`.
absl::StatusOr<std::string> ReadPem(const char* key, const std::string& path, PemKind kind) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected the path of a PEM file when rlmesh.tls.enabled is true, "
                          "got \"\""));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    return absl::NotFoundError(
        absl::StrCat(key, ": cannot read \"", path, "\": ", std::strerror(error)));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string pem = text.str();
  const bool ok = kind == PemKind::kCertificate
                      ? absl::StrContains(pem, "-----BEGIN CERTIFICATE-----")
                      : absl::StrContains(pem, "PRIVATE KEY-----");
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, ": \"", path, "\" holds no PEM ",
        kind == PemKind::kCertificate ? "certificate (-----BEGIN CERTIFICATE-----)"
                                      : "private key (-----BEGIN ... PRIVATE KEY-----)"));
  }
  return pem;
}

}  // namespace

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || absl::StartsWith(host, "127.");
}

std::string HostOfAddress(const std::string& address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return close == std::string::npos ? address : address.substr(1, close - 1);
  }
  // One colon: host:port. None, or several (a bare IPv6 address): no port to strip.
  const size_t colon = address.find(':');
  if (colon != std::string::npos && address.find(':', colon + 1) == std::string::npos) {
    return address.substr(0, colon);
  }
  return address;
}

absl::Status CheckPlaintextAllowed(const TlsOptions& tls, const std::string& host) {
  if (tls.enabled || tls.insecure_plaintext || IsLoopbackHost(host)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing plaintext gRPC on \"", host,
      "\", which is not a loopback address: set rlmesh.tls.enabled = true (with "
      "rlmesh.tls.cert_file, rlmesh.tls.key_file and rlmesh.tls.ca_file), or accept "
      "unencrypted traffic explicitly with rlmesh.tls.insecure_plaintext = true"));
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& tls, const std::string& host) {
  if (!tls.enabled) {
    if (absl::Status s = CheckPlaintextAllowed(tls, host); !s.ok()) return s;
    return grpc::InsecureServerCredentials();
  }
  auto cert = ReadPem("rlmesh.tls.cert_file", tls.cert_file, PemKind::kCertificate);
  if (!cert.ok()) return cert.status();
  auto key = ReadPem("rlmesh.tls.key_file", tls.key_file, PemKind::kPrivateKey);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  if (!tls.ca_file.empty()) {
    auto ca = ReadPem("rlmesh.tls.ca_file", tls.ca_file, PemKind::kCertificate);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsOptions& tls) {
  if (!tls.enabled) return std::shared_ptr<grpc::ChannelCredentials>();
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty()) {
    auto ca = ReadPem("rlmesh.tls.ca_file", tls.ca_file, PemKind::kCertificate);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  // A client certificate is optional for TLS without a CA bundle on the server, but half of
  // one is a mistake.
  if (!tls.cert_file.empty() || !tls.key_file.empty()) {
    auto cert = ReadPem("rlmesh.tls.cert_file", tls.cert_file, PemKind::kCertificate);
    if (!cert.ok()) return cert.status();
    auto key = ReadPem("rlmesh.tls.key_file", tls.key_file, PemKind::kPrivateKey);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(options);
}

absl::Status ApplyTls(const TlsOptions& tls, ChannelOptions* options) {
  auto credentials = MakeChannelCredentials(tls);
  if (!credentials.ok()) return credentials.status();
  options->credentials = *std::move(credentials);
  options->tls_server_name = tls.enabled ? tls.server_name : "";
  return absl::OkStatus();
}

}  // namespace rlmesh::rpc
