// TlsOptions from the rlmesh.tls.* section of a loaded config: called once in each binary's
// main, which passes the result into ServiceServerOptions and ApplyTls (STYLE rule 5).
#pragma once

#include "common/config/config.h"
#include "common/rpc/tls.h"

namespace rlmesh::rpc {

TlsOptions TlsOptionsFromConfig(const config::Config& config);

}  // namespace rlmesh::rpc
