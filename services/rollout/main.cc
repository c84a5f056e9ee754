// rlmesh-rollout: a rollout replica serving RolloutService with the policy of
// actor_rollout_ref.model.path. Health turns SERVING once the model is loaded; new weights
// arrive from the trainer through UpdateWeights.
#include <ATen/Parallel.h>

#include <cstdio>

#include "common/config/config.h"
#include "common/process/malloc_arenas.h"
#include "common/rpc/service_args.h"
#include "common/rpc/service_server.h"
#include "common/rpc/tls.h"
#include "common/rpc/tls_config.h"
#include "services/rollout/registration.h"
#include "services/rollout/rollout_service.h"

int main(int argc, char** argv) {
  rlmesh::process::UseOneMallocArena();  // before any thread starts
  auto args = rlmesh::rpc::ParseServiceArgs(argc, argv);
  if (!args.ok() || args->help) {
    if (!args.ok()) std::fprintf(stderr, "%s\n", args.status().ToString().c_str());
    std::fprintf(args.ok() ? stdout : stderr, "%s",
                 rlmesh::rpc::ServiceUsage("rlmesh-rollout").c_str());
    return args.ok() ? 0 : 2;
  }
  auto config = rlmesh::config::LoadConfig(args->config_path, args->overrides);
  if (!config.ok()) {
    std::fprintf(stderr, "rollout: %s\n", config.status().ToString().c_str());
    return 1;
  }
  if (config->rlmesh.num_threads > 0) at::set_num_threads(static_cast<int>(config->rlmesh.num_threads));
  auto registry = std::make_shared<prometheus::Registry>();
  rlmesh::rollout::RolloutServiceImpl service(*registry, config->rlmesh.rollout.max_queue);
  auto server_options = rlmesh::rpc::ServerOptionsFromArgs("rollout", *args);
  server_options.tls = rlmesh::rpc::TlsOptionsFromConfig(*config);
  auto server = rlmesh::rpc::ServiceServer::Create(
      server_options,
      {{rlmesh::v1::RolloutService::service_full_name(), &service}}, registry);
  if (!server.ok()) {
    std::fprintf(stderr, "rollout: %s\n", server.status().ToString().c_str());
    return 1;
  }
  rlmesh::rollout::ReplicaOptions options;
  options.model_path = config->actor_rollout_ref.model.path;
  options.dtype = config->rlmesh.dtype;
  options.device = config->rlmesh.device;
  options.max_num_seqs = config->actor_rollout_ref.rollout.max_num_seqs;
  options.max_model_len = config->data.max_prompt_length + config->data.max_response_length;
  options.default_max_new_tokens = config->data.max_response_length;
  auto replica = rlmesh::rollout::Replica::Create(options);
  if (!replica.ok()) {
    std::fprintf(stderr, "rollout: %s\n", replica.status().ToString().c_str());
    return 1;
  }
  service.SetReplica(replica->get());
  std::unique_ptr<rlmesh::rollout::CoordinatorRegistration> registration;
  (*server)->SetDrainCallback([&] {
    // Leave the fleet first, so the coordinator re-dispatches rather than waits.
    if (registration) registration->Stop();
    (*replica)->AbortAll();
  });
  (*server)->SetServing(true);
  if (!config->rlmesh.rollout.register_with.empty()) {
    rlmesh::rollout::RegistrationOptions reg;
    reg.coordinator = config->rlmesh.rollout.register_with;
    reg.address = config->rlmesh.rollout.advertise_address.empty()
                      ? (*server)->address()
                      : config->rlmesh.rollout.advertise_address;
    reg.replica_id = config->rlmesh.rollout.replica_id;
    reg.max_num_seqs = static_cast<int32_t>(options.max_num_seqs);
    if (auto tls = rlmesh::rpc::ApplyTls(server_options.tls, &reg.channel); !tls.ok()) {
      std::fprintf(stderr, "rollout: %s\n", tls.ToString().c_str());
      return 1;
    }
    registration = std::make_unique<rlmesh::rollout::CoordinatorRegistration>(reg);
    registration->Start();
  }
  (*server)->Wait();
  if (registration) registration->Stop();
  service.SetReplica(nullptr);
  (*replica)->Shutdown();
  return 0;
}
