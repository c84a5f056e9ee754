// `rlmesh run CONFIG [key=value ...]`: the one-machine launcher. Starts the reward, reference,
// trainer and rollout services as child processes on loopback with free ports, then the
// coordinator pointed at them; waits for the coordinator to finish the run; stops everything.
// A trainer group (trainer.n_gpus_per_node = W > 1) is W trainer processes: rank 0 first, on
// a free group port, then ranks 1..W-1 pointed at the address rank 0 prints; a reference group
// (rlmesh.reference.world_size = R > 1) likewise.
// If a service dies, the rest are stopped and the dead one is named with its exit status and
// last log lines; but with more than one rollout replica a dead replica is started again, on
// its old port and registering with the coordinator, up to rlmesh.rollout.max_restarts times
// with a growing wait (1, 2, 4 ... s, at most 30 s), while the run goes on. Ctrl-C (or SIGTERM)
// asks the coordinator to finish its step and checkpoint; a second one stops everything at once.
// Logs go to <run_dir>/logs/<service>.log; the coordinator's progress lines are echoed to stdout;
// <run_dir>/targets.json lists every /metrics endpoint for Prometheus
// (deploy/prometheus/prometheus-local.yml).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cli/command.h"
#include "common/config/config.h"
#include "common/config/dry_run.h"
#include "common/config/service_settings.h"
#include "common/process/subprocess.h"

namespace rlmesh::cli {
namespace {

using process::Subprocess;
using process::SubprocessOptions;

std::atomic<int> g_signals{0};

void OnSignal(int) { g_signals.fetch_add(1); }

struct Service {
  std::string name;       // "reward", "rollout-0", "trainer", "trainer-1", ...
  std::string component;  // "reward", "rollout", ...
  std::string replica;    // rollout replica index, else empty
  std::string rank;       // trainer or reference rank in a group, else empty
  std::unique_ptr<Subprocess> process;
  std::string address;  // gRPC host:port
  int metrics_port = 0;
  std::vector<std::string> extra;                  // arguments after the config's overrides
  int64_t restarts = 0;                            // times started again after it died
  absl::Time restart_at = absl::InfiniteFuture();  // when a dead one starts again
};

std::string BinaryDir() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : self.parent_path().string();
}

void PrintDeath(const Service& s, int status) {
  std::fprintf(stderr, "rlmesh run: %s %s; its last log lines:\n", s.name.c_str(),
               Subprocess::DescribeWaitStatus(status).c_str());
  for (const auto& line : s.process->LastLines(20)) std::fprintf(stderr, "  | %s\n", line.c_str());
}

// After a service other than the coordinator ended the run: where it can go on from, read
// from the checkpoint marker the trainer writes last.
void PrintWhereToGoOn(const std::string& checkpoint_dir) {
  const std::filesystem::path dir(checkpoint_dir);
  std::ifstream marker(dir / "latest_checkpointed_iteration.txt");
  long long step = -1;
  if (marker >> step && step >= 0) {
    std::fprintf(stderr,
                 "rlmesh run: the newest checkpoint is %s: run again with "
                 "trainer.resume_mode=auto to go on from it\n",
                 (dir / ("global_step_" + std::to_string(step))).string().c_str());
  } else {
    std::fprintf(stderr,
                 "rlmesh run: the run wrote no checkpoint under %s to go on from "
                 "(trainer.save_freq)\n",
                 checkpoint_dir.c_str());
  }
}

const std::regex& ListeningLine() {
  static const auto* re = new std::regex(R"(listening on (\S+) \(metrics :(\d+)\))");
  return *re;
}

const std::regex& GroupLine() {
  static const auto* re = new std::regex(R"(hosts the group at \S+:(\d+))");
  return *re;
}

// Waits until `s` prints a line matching `pattern` and returns its groups. Every child is
// watched meanwhile: a service that exits (a bad model folder, a port in use) ends the wait
// within a poll interval with its exit status and last log lines, rather than after `timeout`.
std::optional<std::vector<std::string>> WaitForOutput(Service& s, std::vector<Service>& all,
                                                      const std::regex& pattern,
                                                      absl::Duration timeout,
                                                      const std::string& what) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    auto line =
        s.process->WaitForLine([&](const std::string& l) { return std::regex_search(l, pattern); },
                               absl::Milliseconds(100));
    if (line.ok()) {
      std::smatch m;
      std::regex_search(*line, m, pattern);
      std::vector<std::string> groups;
      for (size_t i = 1; i < m.size(); ++i) groups.push_back(m[i]);
      return groups;
    }
    for (Service& other : all) {
      if (auto status = other.process->ExitStatus()) {
        PrintDeath(other, *status);
        return std::nullopt;
      }
    }
    if (absl::Now() > deadline) {
      std::fprintf(stderr, "rlmesh run: %s did not %s within %s\n", s.name.c_str(), what.c_str(),
                   absl::FormatDuration(timeout).c_str());
      return std::nullopt;
    }
  }
}

// Waits until `s` listens, and fills its address and metrics port.
bool WaitListening(Service& s, std::vector<Service>& all, absl::Duration timeout) {
  auto groups = WaitForOutput(s, all, ListeningLine(), timeout, "start");
  if (!groups) return false;
  s.address = (*groups)[0];
  s.metrics_port = std::stoi((*groups)[1]);
  return true;
}

// Waits for trainer rank 0's "hosts the group at HOST:PORT" line and returns the port.
bool WaitForGroup(Service& s, std::vector<Service>& all, absl::Duration timeout,
                  std::string* port) {
  auto groups = WaitForOutput(s, all, GroupLine(), timeout, "host its group");
  if (!groups) return false;
  *port = (*groups)[0];
  return true;
}

int Usage() {
  std::fprintf(stderr,
               "usage: rlmesh run CONFIG [key=value ...]\n"
               "Starts every service on loopback, runs the GRPO loop of CONFIG, stops them all.\n");
  return 2;
}

int Run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") return Usage();
  const std::string config_path = argv[1];
  std::vector<std::string> overrides(argv + 2, argv + argc);
  auto config = config::LoadConfig(config_path, overrides);
  if (!config.ok()) {
    std::fprintf(stderr, "rlmesh run: %s\n", std::string(config.status().message()).c_str());
    return 1;
  }
  // The dry-run's checks, before anything starts: every service would refuse the same
  // config, but one message here is clearer than five dead children.
  {
    std::vector<std::string> warnings;
    absl::Status checked = config::CheckBeforeStart(*config, /*whole_run=*/true, &warnings,
                                                    /*local_run=*/true);
    for (const auto& line : warnings) std::fprintf(stderr, "rlmesh run: %s\n", line.c_str());
    if (!checked.ok()) {
      std::fprintf(stderr, "rlmesh run: %s\n", std::string(checked.message()).c_str());
      return 1;
    }
  }
  if (config->trainer.nnodes > 1) {
    std::fprintf(stderr,
                 "rlmesh run: trainer.nnodes = %lld: rlmesh run starts every trainer rank on "
                 "this machine; use trainer.n_gpus_per_node for ranks here, or the Helm chart "
                 "(trainer.replicas) for ranks on several nodes\n",
                 static_cast<long long>(config->trainer.nnodes));
    return 1;
  }
  auto settings = config::DeriveSettings(*config);
  if (!settings.ok()) {
    std::fprintf(stderr, "rlmesh run: %s\n", std::string(settings.status().message()).c_str());
    return 1;
  }
  const config::LauncherSettings& launch = settings->launcher;
  const std::filesystem::path run_dir = launch.run_dir;
  const std::filesystem::path log_dir = run_dir / "logs";
  std::filesystem::create_directories(log_dir);
  // One run per folder: two would interleave metrics.jsonl and overwrite each other's logs
  // (and, with the same default_local_dir, checkpoints). The lock goes with this process.
  const std::string lock_path = (run_dir / ".rlmesh-run.lock").string();
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    std::fprintf(stderr, "rlmesh run: cannot open %s: %s\n", lock_path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    std::fprintf(stderr,
                 "rlmesh run: another rlmesh run is using rlmesh.run_dir %s (it holds %s): its "
                 "logs and metrics.jsonl would be mixed with this one's; give this run another "
                 "rlmesh.run_dir\n",
                 run_dir.string().c_str(), lock_path.c_str());
    return 1;
  }
  const std::string bin = BinaryDir();

  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  std::vector<Service> services;
  auto spawn = [&](const std::string& name, const std::string& component,
                   const std::vector<std::string>& extra, bool echo,
                   bool fresh_log) -> absl::StatusOr<std::unique_ptr<Subprocess>> {
    SubprocessOptions options;
    options.argv = {absl::StrCat(bin, "/rlmesh-", component),
                    "--config",
                    config_path,
                    "--host",
                    launch.host,
                    "--port",
                    "0",
                    "--metrics_port",
                    "0"};
    options.argv.insert(options.argv.end(), overrides.begin(), overrides.end());
    options.argv.insert(options.argv.end(), extra.begin(), extra.end());
    options.log_path = (log_dir / (name + ".log")).string();
    if (fresh_log) std::filesystem::remove(options.log_path);
    options.echo = echo;
    return Subprocess::Start(options);
  };
  auto start = [&](const std::string& name, const std::string& component,
                   const std::string& replica, const std::vector<std::string>& extra,
                   bool echo) -> Service* {
    auto process = spawn(name, component, extra, echo, /*fresh_log=*/true);
    if (!process.ok()) {
      std::fprintf(stderr, "rlmesh run: cannot start %s: %s\n", name.c_str(),
                   process.status().ToString().c_str());
      return nullptr;
    }
    services.push_back({name, component, replica, "", std::move(process).value(), "", 0, extra});
    return &services.back();
  };
  auto stop_all = [&](int signal) {
    for (auto it = services.rbegin(); it != services.rend(); ++it) it->process->Signal(signal);
    for (auto it = services.rbegin(); it != services.rend(); ++it) {
      it->process->Stop(SIGKILL, absl::Seconds(30));
    }
  };

  // A group of `ranks` processes of `component`: rank 0 on a free group port, the others once
  // it says where (rlmesh.<component>.group_host, group_port and rank).
  auto start_group = [&](const std::string& component, int64_t ranks) -> bool {
    if (ranks == 1) return start(component, component, "", {}, false) != nullptr;
    const std::string key = absl::StrCat("rlmesh.", component, ".");
    Service* rank0 = start(component, component, "",
                           {absl::StrCat(key, "group_host=", launch.host),
                            absl::StrCat(key, "group_port=0"), absl::StrCat(key, "rank=0")},
                           false);
    if (rank0 == nullptr) return false;
    rank0->rank = "0";
    std::string group_port;
    if (!WaitForGroup(*rank0, services, absl::Minutes(10), &group_port)) return false;
    for (int64_t r = 1; r < ranks; ++r) {
      Service* s =
          start(absl::StrCat(component, "-", r), component, "",
                {absl::StrCat(key, "group_host=", launch.host),
                 absl::StrCat(key, "group_port=", group_port), absl::StrCat(key, "rank=", r)},
                false);
      if (s == nullptr) return false;
      s->rank = std::to_string(r);
    }
    return true;
  };

  // The services, then the coordinator once they listen.
  const int64_t replicas = launch.rollout_replicas;
  const int64_t ranks = launch.trainer_ranks;
  services.reserve(static_cast<size_t>(replicas + ranks + launch.reference_ranks) + 2);
  bool started = start("reward", "reward", "", {}, false) &&
                 start_group("reference", launch.reference_ranks) && start_group("trainer", ranks);
  for (int64_t r = 0; started && r < replicas; ++r) {
    // The id the coordinator gives the r-th listed replica; a restarted one registers with it.
    started = start(absl::StrCat("rollout-", r), "rollout", std::to_string(r),
                    {absl::StrCat("rlmesh.rollout.replica_id=rollout-", r)}, false);
  }
  for (auto& s : services) {
    if (!started) break;
    started = WaitListening(s, services, absl::Minutes(10));
  }
  if (!started) {
    stop_all(SIGTERM);
    return 1;
  }
  std::vector<std::string> rollout_addresses;
  std::string reward, reference, trainer;
  for (const auto& s : services) {
    if (s.component == "rollout") rollout_addresses.push_back(s.address);
    if (s.component == "reward") reward = s.address;
    if (s.component == "reference" && (s.rank.empty() || s.rank == "0")) reference = s.address;
    if (s.component == "trainer" && (s.rank.empty() || s.rank == "0")) trainer = s.address;
  }
  Service* coordinator = start(
      "coordinator", "coordinator", "",
      {absl::StrCat("rlmesh.reward.address=", reward),
       absl::StrCat("rlmesh.reference.address=", reference),
       absl::StrCat("rlmesh.trainer.address=", trainer),
       absl::StrCat("rlmesh.rollout.addresses=[", absl::StrJoin(rollout_addresses, ","), "]")},
      /*echo=*/true);
  if (coordinator == nullptr) {
    stop_all(SIGTERM);
    return 1;
  }
  // The coordinator listens once every peer is SERVING, i.e. once the models are loaded.
  if (!WaitListening(*coordinator, services, absl::Minutes(20))) {
    stop_all(SIGTERM);
    return 1;
  }
  // Prometheus file_sd targets (docs/deploy.md).
  nlohmann::json targets = nlohmann::json::array();
  for (const auto& s : services) {
    if (s.metrics_port == 0) continue;
    nlohmann::json labels = {{"component", s.component}};
    if (!s.replica.empty()) labels["replica"] = s.replica;
    if (!s.rank.empty()) labels["rank"] = s.rank;
    targets.push_back(
        {{"targets", {absl::StrCat(launch.host, ":", s.metrics_port)}}, {"labels", labels}});
  }
  {
    const auto path = run_dir / "targets.json";
    std::ofstream(path.string() + ".tmp") << targets.dump(1) << "\n";
    std::filesystem::rename(path.string() + ".tmp", path);
  }

  int exit_code = 0;
  bool asked_to_stop = false;
  while (true) {
    if (auto status = coordinator->process->ExitStatus()) {
      coordinator->process->Wait(absl::Seconds(5));
      if (!(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)) {
        PrintDeath(*coordinator, *status);
        exit_code = 1;
      }
      break;
    }
    for (auto& s : services) {
      if (&s == coordinator) continue;
      if (s.restart_at != absl::InfiniteFuture()) {
        if (absl::Now() < s.restart_at) continue;
        // Back on its old port (the coordinator dials that address), and registering with the
        // coordinator in case it left the pool meanwhile.
        std::vector<std::string> extra = s.extra;
        const size_t colon = s.address.rfind(':');
        extra.insert(extra.end(), {"--port", s.address.substr(colon + 1), "--metrics_port",
                                   std::to_string(s.metrics_port),
                                   "rlmesh.rollout.register_with=" + coordinator->address});
        auto process = spawn(s.name, s.component, extra, false, /*fresh_log=*/false);
        if (!process.ok()) {
          std::fprintf(stderr, "rlmesh run: cannot restart %s: %s\n", s.name.c_str(),
                       process.status().ToString().c_str());
          stop_all(SIGTERM);
          return 1;
        }
        s.process = std::move(process).value();
        s.restart_at = absl::InfiniteFuture();
        std::fprintf(stderr, "rlmesh run: %s started again (restart %lld of %lld)\n",
                     s.name.c_str(), static_cast<long long>(s.restarts),
                     static_cast<long long>(launch.rollout_max_restarts));
        continue;
      }
      if (auto status = s.process->ExitStatus()) {
        if (s.component == "rollout" && replicas > 1 && s.restarts < launch.rollout_max_restarts &&
            !asked_to_stop) {
          ++s.restarts;
          const double wait = std::min(30.0, std::pow(2.0, static_cast<double>(s.restarts - 1)));
          PrintDeath(s, *status);
          std::fprintf(stderr,
                       "rlmesh run: the other replicas go on; starting %s again in %g s "
                       "(restart %lld of rlmesh.rollout.max_restarts = %lld)\n",
                       s.name.c_str(), wait, static_cast<long long>(s.restarts),
                       static_cast<long long>(launch.rollout_max_restarts));
          s.restart_at = absl::Now() + absl::Seconds(wait);
          continue;
        }
        PrintDeath(s, *status);
        stop_all(SIGTERM);
        PrintWhereToGoOn(config->trainer.default_local_dir);
        return 1;
      }
    }
    const int signals = g_signals.load();
    if (signals >= 2) {
      std::fprintf(stderr, "rlmesh run: stopping every service now\n");
      stop_all(SIGKILL);
      return 130;
    }
    if (signals == 1 && !asked_to_stop) {
      asked_to_stop = true;
      std::fprintf(stderr,
                   "rlmesh run: finishing the current step and writing a checkpoint (Ctrl-C "
                   "again to stop at once)\n");
      coordinator->process->Signal(SIGTERM);
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  // The coordinator is done: the services end gracefully.
  for (auto& s : services) {
    if (&s != coordinator) s.process->Signal(SIGTERM);
  }
  for (auto& s : services) s.process->Stop(SIGKILL, absl::Seconds(30));
  return asked_to_stop && exit_code == 0 ? 130 : exit_code;
}

}  // namespace

RLMESH_REGISTER_COMMAND("run", "run a config's GRPO training with every service on this machine",
                        Run);

}  // namespace rlmesh::cli
