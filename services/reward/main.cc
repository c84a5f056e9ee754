// rlmesh-reward: the reward service binary.
//   rlmesh-reward [--config FILE] [--host ADDR] [--port N] [--metrics_port N] [key=value ...]
// Scores batches with the built-in rule scorers (by data_source), with a verl reward file
// (custom_reward_function.path) in a pool of Python processes, or forwards them to a custom
// RewardService at rlmesh.reward.custom_address. Ready (health SERVING) as soon as it listens:
// rule scorers load nothing, and a reward file's Python workers have loaded it before.
#include <ATen/Parallel.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/config/config.h"
#include "common/config/dry_run.h"
#include "common/config/service_settings.h"
#include "common/process/cpu_affinity.h"
#include "common/process/malloc_arenas.h"
#include "common/rpc/log.h"
#include "common/rpc/service_args.h"
#include "common/rpc/service_server.h"
#include "common/rpc/tls_config.h"
#include "common/status/grpc_status.h"
#include "services/reward/grpc_remote_scorer.h"
#include "services/reward/metrics.h"
#include "services/reward/python_pool.h"
#include "services/reward/reward_grpc.h"
#include "services/reward/reward_model_scorer.h"
#include "services/reward/reward_service.h"

namespace rlmesh::reward {
namespace {

constexpr char kProgram[] = "rlmesh-reward";

int Fail(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", kProgram, message.c_str());
  return 1;
}

int Main(int argc, char** argv) {
  absl::StatusOr<rpc::ServiceArgs> args = rpc::ParseServiceArgs(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "%s: %s\n\n%s", kProgram, std::string(args.status().message()).c_str(),
                 rpc::ServiceUsage(kProgram).c_str());
    return 2;
  }
  if (args->help) {
    std::fputs(rpc::ServiceUsage(kProgram).c_str(), stdout);
    return 0;
  }
  // Without a config file the service scores for whoever calls it; with one it is part of
  // that run and refuses to start on what `rlmesh dry-run` would call an error.
  absl::StatusOr<config::Config> config =
      args->config_path.empty()
          ? config::LoadConfigFromString("{}", args->overrides)
          : config::LoadConfigForStart(kProgram, args->config_path, args->overrides,
                                       /*whole_run=*/false);
  if (!config.ok()) return Fail(std::string(config.status().message()));
  absl::StatusOr<config::Settings> settings = config::DeriveSettings(*config);
  if (!settings.ok()) return Fail(std::string(settings.status().message()));
  const config::RewardSettings& reward = settings->reward;

  const RewardServiceOptions options = RewardServiceOptionsFrom(reward);
  RewardGrpcOptions grpc_options;
  grpc_options.max_batch_size = static_cast<int>(reward.max_batch_size);

  const config::ListenSettings& listen = settings->reward_listen;
  if (absl::Status placed = process::RunOnCpus(listen.cpus); !placed.ok()) {
    return Fail(absl::StrCat("rlmesh.reward.cpus: ", placed.message()));
  }
  rpc::ServiceServerOptions server_options =
      rpc::ServerOptionsFromArgs("reward", *args, listen.host, listen.port, listen.metrics_port);
  server_options.tls = rpc::TlsOptionsFromConfig(*config);
  rpc::ApplyRpcConfig(*config, &server_options, nullptr);
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::Counter& replaced =
      prometheus::BuildCounter()
          .Name("rlmesh_reward_python_workers_replaced_total")
          .Help(
              "Python processes of custom_reward_function replaced after a call ran past the "
              "deadline or the process died.")
          .Register(*registry)
          .Add({});
  std::unique_ptr<RemoteScorer> remote;
  if (!reward.reward_file.empty()) {
    PythonRewardPoolOptions pool = PythonRewardPoolOptionsFrom(reward);
    pool.on_replaced = [&replaced] { replaced.Increment(); };
    absl::StatusOr<std::string> package = FindPythonPackage("/proc/self/exe");
    if (!package.ok()) return Fail(std::string(package.status().message()));
    pool.package_dir = *package;
    rpc::Log("reward", "starting %d Python workers for %s in %s", pool.workers,
             reward.reward_file.c_str(), reward.python.c_str());
    absl::StatusOr<std::unique_ptr<PythonRewardPool>> started = PythonRewardPool::Create(pool);
    if (!started.ok()) return Fail(std::string(started.status().message()));
    remote = *std::move(started);
  } else if (!reward.custom_address.empty()) {
    // The custom scorer is dialed with the same transport security as every other peer.
    rpc::ChannelOptions channel;
    rpc::ApplyRpcConfig(*config, nullptr, &channel);
    if (absl::Status s = rpc::CheckPlaintextAllowed(server_options.tls,
                                                    rpc::HostOfAddress(reward.custom_address));
        !s.ok()) {
      return Fail(absl::StrCat("rlmesh.reward.custom_address: ", s.message()));
    }
    if (absl::Status s = rpc::ApplyTls(server_options.tls, &channel); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    absl::StatusOr<std::unique_ptr<GrpcRemoteScorer>> client =
        GrpcRemoteScorer::Create(reward.custom_address, channel);
    if (!client.ok()) return Fail(std::string(client.status().message()));
    remote = *std::move(client);
  }
  std::unique_ptr<RemoteScorer> reward_model;
  if (!reward.reward_model_path.empty()) {
    if (const int64_t threads =
            process::LibTorchThreads(reward.num_threads, listen.cpus, /*processes=*/1);
        threads > 0) {
      at::set_num_threads(static_cast<int>(threads));
    }
    RewardModelOptions model;
    model.model_path = reward.reward_model_path;
    model.micro_batch_size = reward.reward_model_micro_batch_size;
    absl::StatusOr<std::unique_ptr<RewardModelScorer>> loaded = RewardModelScorer::Create(model);
    if (!loaded.ok()) return Fail(std::string(loaded.status().message()));
    reward_model = *std::move(loaded);
    rpc::Log("reward",
             "reward model %s loaded: it scores the requests that ask for it "
             "(training samples)",
             reward.reward_model_path.c_str());
  }
  absl::StatusOr<std::unique_ptr<RewardService>> service =
      RewardService::Create(options, std::move(remote), nullptr, nullptr, std::move(reward_model));
  if (!service.ok()) return Fail(std::string(service.status().message()));

  RewardMetrics metrics(*registry, (*service)->KnownDataSources());
  RewardGrpcService handler(service->get(), &metrics, grpc_options);
  absl::StatusOr<std::unique_ptr<rpc::ServiceServer>> server = rpc::ServiceServer::Create(
      server_options, {{v1::RewardService::service_full_name(), &handler}}, registry);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  if (!reward.reward_file.empty()) {
    rpc::Log("reward",
             "ready: every item scored by %s in %s (%lld Python workers), default "
             "timeout %.3g s",
             reward.reward_function.c_str(), reward.reward_file.c_str(),
             static_cast<long long>(reward.python_workers), reward.timeout_s);
  } else if (reward.custom_address.empty()) {
    rpc::Log("reward", "ready: built-in scorers, %d workers, default timeout %.3g s",
             options.num_workers, reward.timeout_s);
  } else {
    rpc::Log("reward", "ready: forwarding %s to the custom scorer at %s, %d workers",
             options.custom_data_sources.empty() ? "every item" : "the listed data sources",
             reward.custom_address.c_str(), options.num_workers);
  }
  (*server)->SetServing(true);
  const int signal_number = (*server)->Wait();
  rpc::Log("reward", "stopped (signal %d)", signal_number);
  return 0;
}

}  // namespace
}  // namespace rlmesh::reward

int main(int argc, char** argv) try {
  rlmesh::process::UseOneMallocArena();  // before any thread starts
  rlmesh::process::KeepFreedMemory();
  return rlmesh::reward::Main(argc, argv);
} catch (...) {
  // The one boundary of the process: whatever escaped is named, not std::terminate's abort.
  return rlmesh::ExitFromCurrentException("reward");
}
