// rlmesh-reference: serves ReferenceService with a frozen copy of actor_rollout_ref.model.path.
// Health turns SERVING once the model is loaded.
#include <ATen/Parallel.h>

#include <cstdio>

#include "common/config/config.h"
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
  auto config = rlmesh::config::LoadConfig(args->config_path, args->overrides);
  if (!config.ok()) {
    std::fprintf(stderr, "reference: %s\n", config.status().ToString().c_str());
    return 1;
  }
  if (config->rlmesh.num_threads > 0) at::set_num_threads(static_cast<int>(config->rlmesh.num_threads));

  auto registry = std::make_shared<prometheus::Registry>();
  // The server starts first, NOT_SERVING, so probes see the process while the model loads.
  rlmesh::reference::ReferenceServiceImpl service(*registry);
  auto server_options = rlmesh::rpc::ServerOptionsFromArgs("reference", *args);
  server_options.tls = rlmesh::rpc::TlsOptionsFromConfig(*config);
  auto server = rlmesh::rpc::ServiceServer::Create(
      server_options,
      {{rlmesh::v1::ReferenceService::service_full_name(), &service}}, registry);
  if (!server.ok()) {
    std::fprintf(stderr, "reference: %s\n", server.status().ToString().c_str());
    return 1;
  }
  rlmesh::reference::ReferenceOptions options;
  options.model_path = config->actor_rollout_ref.model.path;
  options.dtype = config->rlmesh.dtype;
  options.device = config->rlmesh.device;
  options.micro_batch_size =
      config->actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu.value_or(16);
  options.max_batch_sequences =
      config->data.train_batch_size * config->actor_rollout_ref.rollout.n;
  auto model = rlmesh::reference::ReferenceModel::Create(options);
  if (!model.ok()) {
    std::fprintf(stderr, "reference: %s\n", model.status().ToString().c_str());
    return 1;
  }
  service.SetModel(model->get());
  (*server)->SetServing(true);
  (*server)->Wait();
  return 0;
}
