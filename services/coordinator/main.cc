// rlmesh-coordinator: runs the GRPO loop of a config against the reward, reference, trainer and
// rollout services at the addresses the config names (rlmesh.<service>.address, or
// rlmesh.host:rlmesh.<service>.port; rollout replicas from rlmesh.rollout.addresses and
// RegisterReplica), and serves CoordinatorService, health and /metrics.
#include <ATen/Parallel.h>

#include <cstdio>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config/config.h"
#include "common/config/dry_run.h"
#include "common/config/service_settings.h"
#include "common/process/cpu_affinity.h"
#include "common/process/malloc_arenas.h"
#include "common/rpc/client.h"
#include "common/rpc/service_args.h"
#include "common/rpc/service_server.h"
#include "common/rpc/tls_config.h"
#include "common/status/grpc_status.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/coordinator_service.h"
#include "services/coordinator/grpc_clients.h"

namespace {

using rlmesh::coordinator::Coordinator;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "coordinator: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) try {
  rlmesh::process::UseOneMallocArena();  // before any thread starts
  rlmesh::process::KeepFreedMemory();
  auto args = rlmesh::rpc::ParseServiceArgs(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "%s\n%s", args.status().ToString().c_str(),
                 rlmesh::rpc::ServiceUsage("rlmesh-coordinator").c_str());
    return 2;
  }
  if (args->help) {
    std::printf("%s", rlmesh::rpc::ServiceUsage("rlmesh-coordinator").c_str());
    return 0;
  }
  auto config =
      rlmesh::config::LoadConfigForStart("coordinator", args->config_path, args->overrides,
                                         /*whole_run=*/true);
  if (!config.ok()) return Fail(config.status());
  auto settings = rlmesh::config::DeriveSettings(*config);
  if (!settings.ok()) return Fail(settings.status());
  const rlmesh::config::CoordinatorSettings& c = settings->coordinator;

  const rlmesh::config::ListenSettings& listen = settings->coordinator_listen;
  if (absl::Status placed = rlmesh::process::RunOnCpus(listen.cpus); !placed.ok()) {
    return Fail(
        absl::Status(placed.code(), absl::StrCat("rlmesh.coordinator.cpus: ", placed.message())));
  }
  // The coordinator's own tensors (advantages, KL, rollout correction) run on LibTorch.
  if (const int64_t threads = rlmesh::process::LibTorchThreads(c.num_threads, listen.cpus, 1);
      threads > 0) {
    at::set_num_threads(static_cast<int>(threads));
  }
  auto server_options = rlmesh::rpc::ServerOptionsFromArgs("coordinator", *args, listen.host,
                                                           listen.port, listen.metrics_port);
  server_options.tls = rlmesh::rpc::TlsOptionsFromConfig(*config);
  rlmesh::rpc::ApplyRpcConfig(*config, &server_options, nullptr);
  rlmesh::coordinator::GrpcClientOptions client_options;
  rlmesh::rpc::ApplyRpcConfig(*config, nullptr, &client_options.channel);
  client_options.probe_timeout_seconds = c.keepalive_timeout_s;
  client_options.score_timeout_seconds = c.reward_timeout_s + c.keepalive_timeout_s;
  if (absl::Status s = rlmesh::rpc::ApplyTls(server_options.tls, &client_options.channel);
      !s.ok()) {
    return Fail(s);
  }
  const std::string& reward = c.reward_address;
  const std::string& reference = c.reference_address;
  const std::string& trainer = c.trainer_address;
  std::vector<std::string> peers = {reward, reference, trainer};
  peers.insert(peers.end(), c.rollout_addresses.begin(), c.rollout_addresses.end());
  // Services load models at start-up: wait until each reports SERVING. Plaintext to a peer
  // off this machine needs rlmesh.tls.insecure_plaintext, as it does for a server.
  for (const std::string& address : peers) {
    // Every address of a list ("ipv4:a:p,b:p"); a name as it is, without a lookup.
    auto listed = rlmesh::coordinator::ReplicaAddresses(address, [](const std::string& name) {
      return absl::StatusOr<std::vector<std::string>>(std::vector<std::string>{name});
    });
    if (!listed.ok()) return Fail(listed.status());
    for (const std::string& one : *listed) {
      const std::string peer_host = rlmesh::rpc::HostOfAddress(one);
      if (absl::Status s = rlmesh::rpc::CheckPlaintextAllowed(server_options.tls, peer_host);
          !s.ok()) {
        return Fail(s);
      }
    }
    auto channel = rlmesh::rpc::ConnectWhenServing(address, "", 900, client_options.channel);
    if (!channel.ok()) return Fail(channel.status());
  }
  rlmesh::coordinator::CoordinatorClients clients;
  clients.reward = rlmesh::coordinator::NewGrpcRewardClient(reward, client_options);
  clients.reference = rlmesh::coordinator::NewGrpcReferenceClient(reference, client_options);
  clients.trainer = rlmesh::coordinator::NewGrpcTrainerClient(trainer, client_options);
  clients.rollout_factory = [client_options](const std::string& address) {
    return rlmesh::coordinator::NewGrpcRolloutClient(address, client_options);
  };

  auto registry = std::make_shared<prometheus::Registry>();
  auto coordinator = Coordinator::Create(c, std::move(clients), *registry);
  if (!coordinator.ok()) return Fail(coordinator.status());
  rlmesh::coordinator::CoordinatorServiceImpl service(coordinator->get());
  auto server = rlmesh::rpc::ServiceServer::Create(
      server_options, {{rlmesh::v1::CoordinatorService::service_full_name(), &service}}, registry);
  if (!server.ok()) return Fail(server.status());
  (*server)->SetServing(true);

  absl::Status result;
  std::thread loop([&] {
    result = (*coordinator)->Run();
    (*server)->Shutdown();
  });
  // SIGTERM/SIGINT: finish the current step, checkpoint, then stop.
  (*server)->SetDrainCallback([&] { (*coordinator)->RequestStop(); });
  (*server)->Wait();
  (*coordinator)->RequestStop();
  loop.join();
  if (!result.ok()) return Fail(result);
  return 0;
} catch (...) {
  // The one boundary of the process: whatever escaped is named, not std::terminate's abort.
  return rlmesh::ExitFromCurrentException("coordinator");
}
