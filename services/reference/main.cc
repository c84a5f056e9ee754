// rlmesh-reference: serves ReferenceService with a frozen copy of actor_rollout_ref.model.path.
// Health turns SERVING once the model is loaded.
//
// In a reference group (rlmesh.reference.world_size > 1) each rank is one process of this
// binary with its own rlmesh.reference.rank: rank 0 hosts the group's store at
// rlmesh.reference.group_host and group_port (printing "reference: rank 0 of R hosts the
// group at HOST:PORT"), serves the coordinator and posts its requests to the others; ranks > 0
// serve only health and /metrics and run what rank 0 posts until it stops them.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include "common/config/config.h"
#include "common/config/dry_run.h"
#include "common/config/service_settings.h"
#include "common/dist/group.h"
#include "common/process/cpu_affinity.h"
#include "common/process/malloc_arenas.h"
#include "common/rpc/service_args.h"
#include "common/rpc/service_server.h"
#include "common/rpc/tls_config.h"
#include "common/status/grpc_status.h"
#include "services/reference/reference_service.h"

int main(int argc, char** argv) try {
  rlmesh::process::UseOneMallocArena();  // before any thread starts
  rlmesh::process::KeepFreedMemory();
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
  rlmesh::config::ReferenceSettings& reference = settings->reference;
  const int rank = static_cast<int>(reference.rank);
  const int world_size = static_cast<int>(reference.world_size);
  const std::vector<int>& cpus = settings->reference_listen.cpus;
  if (absl::Status placed = rlmesh::process::RunOnCpus(cpus); !placed.ok()) {
    std::fprintf(stderr, "reference: rlmesh.reference.cpus: %s\n", placed.ToString().c_str());
    return 1;
  }
  // The ranks share this machine's cores (rlmesh run starts them all here).
  if (const int64_t threads =
          rlmesh::process::LibTorchThreads(reference.num_threads, cpus, world_size);
      threads > 0) {
    at::set_num_threads(static_cast<int>(threads));
  }

  // The group first: rank 0 prints its store's address, which the launcher hands the others.
  std::unique_ptr<rlmesh::dist::Group> group;
  if (world_size > 1) {
    // This rank's device and the group's backend (common/dist/placement.h); the ranks all run
    // on this machine.
    rlmesh::dist::GroupOptions options;
    auto placement = rlmesh::dist::PlaceGroupRank(reference.device, rank, world_size, &options);
    if (!placement.ok()) {
      std::fprintf(stderr, "reference: %s\n", placement.status().ToString().c_str());
      return 1;
    }
    reference.device = placement->device;
    std::printf("reference: rank %d %s\n", rank, placement->summary.c_str());
    options.rank = rank;
    options.world_size = world_size;
    options.host = reference.group_host;
    options.port = static_cast<int>(reference.group_port);
    options.timeout_s = reference.timeout_s;
    options.name = "reference";
    options.listening = [&](int port) {
      std::printf("reference: rank 0 of %d hosts the group at %s:%d\n", world_size,
                  options.host.c_str(), port);
      std::fflush(stdout);
    };
    auto joined = rlmesh::dist::Group::Join(options);
    if (!joined.ok()) {
      std::fprintf(stderr, "reference: %s\n", joined.status().ToString().c_str());
      return 1;
    }
    group = std::move(joined).value();
    std::printf("reference: rank %d of %d joined the group\n", rank, world_size);
    std::fflush(stdout);
  }

  auto registry = std::make_shared<prometheus::Registry>();
  // The server starts first, NOT_SERVING, so probes see the process while the model loads.
  const rlmesh::config::ListenSettings& listen = settings->reference_listen;
  auto server_options = rlmesh::rpc::ServerOptionsFromArgs("reference", *args, listen.host,
                                                           listen.port, listen.metrics_port);
  server_options.tls = rlmesh::rpc::TlsOptionsFromConfig(*config);
  rlmesh::rpc::ApplyRpcConfig(*config, &server_options, nullptr);
  rlmesh::reference::ReferenceServiceImpl service(*registry, server_options.max_message_bytes);
  service.SetGroupRank(rank);
  auto server = rlmesh::rpc::ServiceServer::Create(
      server_options, {{rlmesh::v1::ReferenceService::service_full_name(), &service}}, registry);
  if (!server.ok()) {
    std::fprintf(stderr, "reference: %s\n", server.status().ToString().c_str());
    return 1;
  }
  auto model = rlmesh::reference::ReferenceModel::Create(
      rlmesh::reference::ReferenceOptionsFrom(reference), group.get());
  if (!model.ok()) {
    std::fprintf(stderr, "reference: %s\n", model.status().ToString().c_str());
    return 1;
  }
  if (rank > 0) {
    (*server)->SetServing(true);
    // Runs what rank 0 posts; serves only health and /metrics itself.
    return rlmesh::rpc::RunFollowerRank(**server, "reference",
                                        [&] { return (*model)->ServeRank(); });
  }
  service.SetModel(model->get());
  // Ready only once calls can be served: health SERVING before this would let a client's
  // first call meet "the model is loading".
  (*server)->SetServing(true);
  (*server)->Wait();
  service.SetModel(nullptr);
  (*model)->StopRanks();
  return 0;
} catch (...) {
  // The one boundary of the process: whatever escaped is named, not std::terminate's abort.
  return rlmesh::ExitFromCurrentException("reference");
}
