// rlmesh-rollout: a rollout replica serving RolloutService with the policy of
// actor_rollout_ref.model.path. Health turns SERVING once the model is loaded; new weights
// arrive from the trainer through UpdateWeights.
#include <ATen/Parallel.h>

#include <cstdio>

#include "common/config/config.h"
#include "common/config/dry_run.h"
#include "common/config/memory_estimate.h"
#include "common/config/service_settings.h"
#include "common/process/cpu_affinity.h"
#include "common/process/malloc_arenas.h"
#include "common/rpc/log.h"
#include "common/rpc/service_args.h"
#include "common/rpc/service_server.h"
#include "common/rpc/tls.h"
#include "common/rpc/tls_config.h"
#include "common/status/grpc_status.h"
#include "services/rollout/registration.h"
#include "services/rollout/rollout_service.h"

int main(int argc, char** argv) try {
  rlmesh::process::UseOneMallocArena();  // before any thread starts
  rlmesh::process::KeepFreedMemory();
  auto args = rlmesh::rpc::ParseServiceArgs(argc, argv);
  if (!args.ok() || args->help) {
    if (!args.ok()) std::fprintf(stderr, "%s\n", args.status().ToString().c_str());
    std::fprintf(args.ok() ? stdout : stderr, "%s",
                 rlmesh::rpc::ServiceUsage("rlmesh-rollout").c_str());
    return args.ok() ? 0 : 2;
  }
  auto config = rlmesh::config::LoadConfigForStart("rollout", args->config_path, args->overrides,
                                                   /*whole_run=*/true);
  if (!config.ok()) {
    std::fprintf(stderr, "rollout: %s\n", config.status().ToString().c_str());
    return 1;
  }
  auto settings = rlmesh::config::DeriveSettings(*config);
  if (!settings.ok()) {
    std::fprintf(stderr, "rollout: %s\n", settings.status().ToString().c_str());
    return 1;
  }
  const rlmesh::config::RolloutSettings& rollout = settings->rollout;
  const rlmesh::config::ListenSettings& listen = settings->rollout_listen;
  if (absl::Status placed = rlmesh::process::RunOnCpus(listen.cpus); !placed.ok()) {
    std::fprintf(stderr, "rollout: rlmesh.rollout.cpus: %s\n", placed.ToString().c_str());
    return 1;
  }
  if (const int64_t threads = rlmesh::process::LibTorchThreads(rollout.num_threads, listen.cpus, 1);
      threads > 0) {
    at::set_num_threads(static_cast<int>(threads));
  }
  auto registry = std::make_shared<prometheus::Registry>();
  auto server_options = rlmesh::rpc::ServerOptionsFromArgs("rollout", *args, listen.host,
                                                           listen.port, listen.metrics_port);
  server_options.tls = rlmesh::rpc::TlsOptionsFromConfig(*config);
  rlmesh::rpc::ApplyRpcConfig(*config, &server_options, nullptr);
  rlmesh::rollout::RolloutServiceImpl service(
      *registry, rollout.max_queue, rollout.max_queued_samples, server_options.max_message_bytes);
  auto server = rlmesh::rpc::ServiceServer::Create(
      server_options, {{rlmesh::v1::RolloutService::service_full_name(), &service}}, registry);
  if (!server.ok()) {
    std::fprintf(stderr, "rollout: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const rlmesh::config::DeviceCapacity memory = rlmesh::config::ReplicaMemoryCapacity(*config);
  const rlmesh::rollout::ReplicaOptions options =
      rlmesh::rollout::ReplicaOptionsFrom(rollout, memory.bytes);
  // verl's engine names are served by this engine with the same sampling semantics; say so.
  if (rollout.engine_name != "rlmesh") {
    rlmesh::rpc::Log("rollout",
                     "actor_rollout_ref.rollout.name = %s: served by rlmesh's own engine with %s's "
                     "sampling semantics (temperature, top-p, top-k, n, stop at EOS)",
                     rollout.engine_name.c_str(), rollout.engine_name.c_str());
  }
  if (!rollout.enforce_eager) {
    rlmesh::rpc::Log("rollout",
                     "actor_rollout_ref.rollout.enforce_eager = false: rlmesh's engine has no "
                     "graph capture, so it decodes eagerly either way");
  }
  auto replica = rlmesh::rollout::Replica::Create(options);
  if (!replica.ok()) {
    std::fprintf(stderr, "rollout: %s\n", replica.status().ToString().c_str());
    return 1;
  }
  {
    const auto stats = (*replica)->EngineStats();
    rlmesh::rpc::Log("rollout",
                     "KV cache: %lld slots of %lld tokens (%.1f MiB; max_num_seqs %lld, "
                     "gpu_memory_utilization %.2f of %.1f GiB from %s)%s",
                     static_cast<long long>((*replica)->slots()),
                     static_cast<long long>(options.max_model_len),
                     static_cast<double>(stats.kv_cache_bytes) / (1 << 20),
                     static_cast<long long>(options.max_num_seqs), rollout.gpu_memory_utilization,
                     memory.bytes / (1 << 30), memory.source.c_str(),
                     options.free_cache_engine ? "; released while idle" : "");
  }
  service.SetReplica(replica->get());
  std::unique_ptr<rlmesh::rollout::CoordinatorRegistration> registration;
  (*server)->SetDrainCallback([&] {
    // Leave the fleet first, so the coordinator re-dispatches rather than waits.
    if (registration) registration->Stop();
    (*replica)->AbortAll();
  });
  (*server)->SetServing(true);
  if (!rollout.register_with.empty()) {
    rlmesh::rollout::RegistrationOptions reg;
    reg.coordinator = rollout.register_with;
    reg.address =
        rollout.advertise_address.empty() ? (*server)->address() : rollout.advertise_address;
    reg.replica_id = rollout.replica_id;
    reg.max_num_seqs = static_cast<int32_t>((*replica)->slots());
    reg.on_registered = [&service](const std::string& id) { service.SetReplicaId(id); };
    rlmesh::rpc::ApplyRpcConfig(*config, nullptr, &reg.channel);
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
} catch (...) {
  // The one boundary of the process: whatever escaped is named, not std::terminate's abort.
  return rlmesh::ExitFromCurrentException("rollout");
}
