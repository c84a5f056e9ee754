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

void ApplyRpcConfig(const config::Config& config, ServiceServerOptions* server,
                    ChannelOptions* channel) {
  const int bytes = static_cast<int>(config.rlmesh.rpc.max_message_bytes);
  if (server != nullptr) {
    server->keepalive = KeepaliveFromConfig(config);
    server->max_message_bytes = bytes;
    server->process.device_memory_capacity_bytes = config.rlmesh.device_memory_gb * (1ull << 30);
    server->process.threads = static_cast<int>(config.rlmesh.num_threads);
  }
  if (channel != nullptr) {
    channel->keepalive = KeepaliveFromConfig(config);
    channel->max_message_bytes = bytes;
  }
}

}  // namespace rlmesh::rpc
