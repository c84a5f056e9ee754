// rlmesh-reference: serves ReferenceService with a frozen copy of actor_rollout_ref.model.path.
// Health turns SERVING once the model is loaded.
#include <ATen/Parallel.h>

#include <cstdio>

#include "common/config/config.h"
#include "common/config/dry_run.h"
#include "common/config/service_settings.h"
#include "common/process/malloc_arenas.h"
#include "common/rpc/service_args.h"
#include "common/rpc/service_server.h"
#include "common/rpc/tls_config.h"
#include "services/reference/reference_service.h"

int main(int argc, char** argv) {
  rlmesh::process::UseOneMallocArena();  // before any thread starts
  auto args = rlmesh::rpc::ParseServiceArgs(argc, argv);
  if (!args.ok() || args->help) {
    if (!args.ok()) std::fprintf(stderr, "%s\n", args.status().ToString().c_str());
    std::fprintf(args.ok() ? stdout : stderr, "%s",
                 rlmesh::rpc::ServiceUsage("rlmesh-reference").c_str());
    return args.ok() ? 0 : 2;
  }
  auto config = rlmesh::config::LoadConfigForStart("reference", args->config_path, args->overrides,
                                                   /*whole_run=*/true);
  if (!config.ok()) {
    std::fprintf(stderr, "reference: %s\n", config.status().ToString().c_str());
    return 1;
  }
  auto settings = rlmesh::config::DeriveSettings(*config);
  if (!settings.ok()) {
    std::fprintf(stderr, "reference: %s\n", settings.status().ToString().c_str());
    return 1;
  }
  const rlmesh::config::ReferenceSettings& reference = settings->reference;
  if (reference.num_threads > 0) at::set_num_threads(static_cast<int>(reference.num_threads));

  auto registry = std::make_shared<prometheus::Registry>();
  // The server starts first, NOT_SERVING, so probes see the process while the model loads.
  rlmesh::reference::ReferenceServiceImpl service(*registry);
  const rlmesh::config::ListenSettings& listen = settings->reference_listen;
  auto server_options = rlmesh::rpc::ServerOptionsFromArgs("reference", *args, listen.host,
                                                           listen.port, listen.metrics_port);
  server_options.tls = rlmesh::rpc::TlsOptionsFromConfig(*config);
  auto server = rlmesh::rpc::ServiceServer::Create(
      server_options, {{rlmesh::v1::ReferenceService::service_full_name(), &service}}, registry);
  if (!server.ok()) {
    std::fprintf(stderr, "reference: %s\n", server.status().ToString().c_str());
    return 1;
  }
  auto model =
      rlmesh::reference::ReferenceModel::Create(rlmesh::reference::ReferenceOptionsFrom(reference));
  if (!model.ok()) {
    std::fprintf(stderr, "reference: %s\n", model.status().ToString().c_str());
    return 1;
  }
  service.SetModel(model->get());
  (*server)->SetServing(true);
  (*server)->Wait();
  return 0;
}
