// rlmesh-trainer: the actor-trainer serving TrainerService. Loads actor_rollout_ref.model.path;
// checkpoints go under trainer.default_local_dir (the coordinator asks for them and for
// resuming). Health turns SERVING once the model is loaded.
#include <ATen/Parallel.h>

#include <cstdio>

#include "common/config/config.h"
#include "common/config/dry_run.h"
#include "common/config/service_settings.h"
#include "common/process/malloc_arenas.h"
#include "common/rpc/service_args.h"
#include "common/rpc/service_server.h"
#include "common/rpc/tls_config.h"
#include "services/trainer/trainer_service.h"

int main(int argc, char** argv) {
  rlmesh::process::UseOneMallocArena();  // before any thread starts
  auto args = rlmesh::rpc::ParseServiceArgs(argc, argv);
  if (!args.ok() || args->help) {
    if (!args.ok()) std::fprintf(stderr, "%s\n", args.status().ToString().c_str());
    std::fprintf(args.ok() ? stdout : stderr, "%s",
                 rlmesh::rpc::ServiceUsage("rlmesh-trainer").c_str());
    return args.ok() ? 0 : 2;
  }
  auto config = rlmesh::config::LoadConfigForStart("trainer", args->config_path, args->overrides,
                                                   /*whole_run=*/true);
  if (!config.ok()) {
    std::fprintf(stderr, "trainer: %s\n", config.status().ToString().c_str());
    return 1;
  }
  auto settings = rlmesh::config::DeriveSettings(*config);
  if (!settings.ok()) {
    std::fprintf(stderr, "trainer: %s\n", settings.status().ToString().c_str());
    return 1;
  }
  const rlmesh::config::TrainerSettings& trainer_settings = settings->trainer;
  if (trainer_settings.num_threads > 0) {
    at::set_num_threads(static_cast<int>(trainer_settings.num_threads));
  }
  torch::manual_seed(trainer_settings.seed);
  auto registry = std::make_shared<prometheus::Registry>();
  rlmesh::trainer::TrainerServiceImpl service(*registry);
  const rlmesh::config::ListenSettings& listen = settings->trainer_listen;
  auto server_options = rlmesh::rpc::ServerOptionsFromArgs("trainer", *args, listen.host,
                                                           listen.port, listen.metrics_port);
  server_options.tls = rlmesh::rpc::TlsOptionsFromConfig(*config);
  auto server = rlmesh::rpc::ServiceServer::Create(
      server_options, {{rlmesh::v1::TrainerService::service_full_name(), &service}}, registry);
  if (!server.ok()) {
    std::fprintf(stderr, "trainer: %s\n", server.status().ToString().c_str());
    return 1;
  }
  // Weight publishing dials the rollout replicas with the same transport security.
  rlmesh::rpc::ChannelOptions publish_channel;
  if (absl::Status s = rlmesh::rpc::ApplyTls(server_options.tls, &publish_channel); !s.ok()) {
    std::fprintf(stderr, "trainer: %s\n", s.ToString().c_str());
    return 1;
  }
  auto trainer = rlmesh::trainer::Trainer::Create(trainer_settings, publish_channel);
  if (!trainer.ok()) {
    std::fprintf(stderr, "trainer: %s\n", trainer.status().ToString().c_str());
    return 1;
  }
  service.SetTrainer(trainer->get());
  (*server)->SetServing(true);
  (*server)->Wait();
  service.SetTrainer(nullptr);
  return 0;
}
