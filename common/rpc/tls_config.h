// TlsOptions from the rlmesh.tls.* section (and KeepaliveOptions from rlmesh.rpc.*) of a loaded
// config: called once in each binary's main, which passes the result into ServiceServerOptions and
// ApplyTls (STYLE rule 5).
#pragma once

#include "common/config/config.h"
#include "common/rpc/service_server.h"
#include "common/rpc/tls.h"

namespace rlmesh::rpc {

TlsOptions TlsOptionsFromConfig(const config::Config& config);

// KeepaliveOptions from rlmesh.rpc.keepalive_s and keepalive_timeout_s, for the server and
// every channel of a binary.
KeepaliveOptions KeepaliveFromConfig(const config::Config& config);

// rlmesh.rpc.keepalive_* and rlmesh.rpc.max_message_bytes into a server's options and the
// channel options of its binary's clients.
void ApplyRpcConfig(const config::Config& config, ServiceServerOptions* server,
                    ChannelOptions* channel);

}  // namespace rlmesh::rpc
