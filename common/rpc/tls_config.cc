#include "common/rpc/tls_config.h"

namespace rlmesh::rpc {

TlsOptions TlsOptionsFromConfig(const config::Config& config) {
  const config::TlsConfig& tls = config.rlmesh.tls;
  TlsOptions options;
  options.enabled = tls.enabled;
  options.insecure_plaintext = tls.insecure_plaintext;
  options.cert_file = tls.cert_file;
  options.key_file = tls.key_file;
  options.ca_file = tls.ca_file;
  options.server_name = tls.server_name;
  return options;
}

KeepaliveOptions KeepaliveFromConfig(const config::Config& config) {
  return {.time_seconds = config.rlmesh.rpc.keepalive_s,
          .timeout_seconds = config.rlmesh.rpc.keepalive_timeout_s};
}

}  // namespace rlmesh::rpc
