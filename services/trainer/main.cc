// rlmesh-trainer: the actor-trainer serving TrainerService. Loads actor_rollout_ref.model.path;
// checkpoints go under trainer.default_local_dir (the coordinator asks for them and for
// resuming). Health turns SERVING once the model is loaded.
//
// In a trainer group (trainer.n_gpus_per_node > 1) each rank is one process of this binary
// with its own rlmesh.trainer.rank: rank 0 hosts the group's store at rlmesh.trainer.group_host
// and group_port (printing "trainer: rank 0 of W hosts the group at HOST:PORT"), serves the
// coordinator and posts its requests to the others; ranks > 0 serve only health and /metrics
// and run what rank 0 posts until it stops them.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/config/config.h"
#include "common/config/dry_run.h"
#include "common/config/service_settings.h"
#include "common/dist/group.h"
#include "common/process/cpu_affinity.h"
#include "common/process/malloc_arenas.h"
#include "common/process/tensor_memory.h"
#include "common/rpc/service_args.h"
#include "common/rpc/service_server.h"
#include "common/rpc/tls_config.h"
#include "common/status/grpc_status.h"
#include "services/trainer/trainer_service.h"

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "trainer: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) try {
  rlmesh::process::UseOneMallocArena();  // before any thread starts
  rlmesh::process::KeepFreedMemory();
  rlmesh::process::CountCpuTensorMemory();  // perf/max_memory_allocated_gb, before the model
  auto args = rlmesh::rpc::ParseServiceArgs(argc, argv);
  if (!args.ok() || args->help) {
    if (!args.ok()) std::fprintf(stderr, "%s\n", args.status().ToString().c_str());
    std::fprintf(args.ok() ? stdout : stderr, "%s",
                 rlmesh::rpc::ServiceUsage("rlmesh-trainer").c_str());
    return args.ok() ? 0 : 2;
  }
  auto config = rlmesh::config::LoadConfigForStart("trainer", args->config_path, args->overrides,
                                                   /*whole_run=*/true);
  if (!config.ok()) return Fail(config.status());
  auto settings = rlmesh::config::DeriveSettings(*config);
  if (!settings.ok()) return Fail(settings.status());
  rlmesh::config::TrainerSettings& trainer_settings = settings->trainer;
  if (trainer_settings.rank < 0) {
    // A StatefulSet pod (the Helm chart): the rank is the pod's ordinal.
    const char* pod = std::getenv("POD_NAME");
    auto rank = rlmesh::config::RankFromPodName(pod != nullptr ? pod : "");
    if (!rank.ok()) return Fail(rank.status());
    if (*rank >= trainer_settings.world_size) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("pod ", pod, " is rank ", *rank,
                       ", outside the group of trainer.n_gpus_per_node x "
                       "trainer.nnodes = ",
                       trainer_settings.world_size, " ranks")));
    }
    trainer_settings.rank = *rank;
  }
  const int rank = static_cast<int>(trainer_settings.rank);
  const int world_size = static_cast<int>(trainer_settings.world_size);
  const std::vector<int>& cpus = settings->trainer_listen.cpus;
  if (absl::Status placed = rlmesh::process::RunOnCpus(cpus); !placed.ok()) {
    return Fail(
        absl::Status(placed.code(), absl::StrCat("rlmesh.trainer.cpus: ", placed.message())));
  }
  // The ranks of a node share its cores.
  if (const int64_t threads = rlmesh::process::LibTorchThreads(trainer_settings.num_threads, cpus,
                                                               trainer_settings.ranks_per_node);
      threads > 0) {
    at::set_num_threads(static_cast<int>(threads));
  }
  torch::manual_seed(trainer_settings.seed);

  // The group first: rank 0 prints its store's address, which the launcher hands the others.
  std::unique_ptr<rlmesh::dist::Group> group;
  if (world_size > 1) {
    // This rank's device and the group's backend (common/dist/placement.h).
    rlmesh::dist::GroupOptions options;
    const int per_node = static_cast<int>(trainer_settings.ranks_per_node);
    auto placement =
        rlmesh::dist::PlaceGroupRank(trainer_settings.device, rank % per_node, per_node, &options);
    if (!placement.ok()) return Fail(placement.status());
    trainer_settings.device = placement->device;
    std::printf("trainer: rank %d %s\n", rank, placement->summary.c_str());
    options.rank = rank;
    options.world_size = world_size;
    options.host = trainer_settings.group_host;
    options.port = static_cast<int>(trainer_settings.group_port);
    options.timeout_s = trainer_settings.weight_timeout_s;
    options.listening = [&](int port) {
      std::printf("trainer: rank 0 of %d hosts the group at %s:%d\n", world_size,
                  options.host.c_str(), port);
      std::fflush(stdout);
    };
    auto joined = rlmesh::dist::Group::Join(options);
    if (!joined.ok()) return Fail(joined.status());
    group = std::move(joined).value();
    std::printf("trainer: rank %d of %d joined the group\n", rank, world_size);
    std::fflush(stdout);
  }

  auto registry = std::make_shared<prometheus::Registry>();
  rlmesh::trainer::TrainerServiceImpl service(*registry);
  const rlmesh::config::ListenSettings& listen = settings->trainer_listen;
  auto server_options = rlmesh::rpc::ServerOptionsFromArgs("trainer", *args, listen.host,
                                                           listen.port, listen.metrics_port);
  server_options.tls = rlmesh::rpc::TlsOptionsFromConfig(*config);
  rlmesh::rpc::ApplyRpcConfig(*config, &server_options, nullptr);
  // Ranks > 0 take no requests (rank 0 posts them to them): they answer each call with a
  // pointer to rank 0, and serve health and /metrics.
  service.SetGroupRank(rank);
  auto server = rlmesh::rpc::ServiceServer::Create(
      server_options, {{rlmesh::v1::TrainerService::service_full_name(), &service}}, registry);
  if (!server.ok()) return Fail(server.status());
  // Weight publishing dials the rollout replicas with the same transport security.
  rlmesh::rpc::ChannelOptions publish_channel;
  rlmesh::rpc::ApplyRpcConfig(*config, nullptr, &publish_channel);
  if (absl::Status s = rlmesh::rpc::ApplyTls(server_options.tls, &publish_channel); !s.ok()) {
    return Fail(s);
  }
  auto trainer = rlmesh::trainer::Trainer::Create(trainer_settings, publish_channel, group.get());
  if (!trainer.ok()) return Fail(trainer.status());
  if (rank > 0) {
    (*server)->SetServing(true);
    return rlmesh::rpc::RunFollowerRank(**server, "trainer",
                                        [&] { return (*trainer)->ServeRank(); });
  }
  service.SetTrainer(trainer->get());
  // Ready only once calls can be served: health SERVING before this would let a client's
  // first call meet "the model is loading".
  (*server)->SetServing(true);
  (*server)->Wait();
  service.SetTrainer(nullptr);
  (*trainer)->StopRanks();
  return 0;
} catch (...) {
  // The one boundary of the process: whatever escaped is named, not std::terminate's abort.
  return rlmesh::ExitFromCurrentException("trainer");
}
