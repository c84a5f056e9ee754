// Load test of one rollout replica's admission control (issue #16, item 6), run by hand:
//
//   build/bin/rollout_load_bench [streams=2000] [samples_per_stream=64] [max_queued=4096]
//
// Starts a real rlmesh-rollout (the quickstart's tiny model, made here with rlmesh
// make-tiny-model) with rlmesh.rollout.max_queued_samples = max_queued, then opens `streams`
// Generate calls at once, each asking for samples_per_stream samples, over one HTTP/2
// connection per 100 streams. Prints how many calls were admitted and refused
// (RESOURCE_EXHAUSTED, naming the limit), whether every admitted call delivered all of its
// samples, the most samples the replica was seen holding (GetStatus, sampled every 10 ms)
// against the limit, and the replica's resident memory before, at its peak and after.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "absl/time/clock.h"
#include "common/process/subprocess.h"
#include "rlmesh/v1/rollout.grpc.pb.h"

namespace {

std::string BinDir() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : self.parent_path().string();
}

// A /proc/<pid>/status field in MiB ("VmRSS", "VmHWM").
double StatusMiB(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    int64_t kib = 0;
    std::smatch m;
    if (std::regex_search(line, m, std::regex(R"((\d+) kB)")) && absl::SimpleAtoi(m[1].str(), &kib))
      return kib / 1024.0;
  }
  return 0;
}

int Arg(int argc, char** argv, int i, int fallback) {
  int value = fallback;
  if (argc > i && !absl::SimpleAtoi(argv[i], &value)) {
    std::fprintf(stderr, "rollout_load_bench: argument %d: expected an integer\n", i);
    std::exit(2);
  }
  return value;
}

std::unique_ptr<rlmesh::process::Subprocess> Start(const std::vector<std::string>& argv,
                                                   const std::string& log) {
  rlmesh::process::SubprocessOptions options;
  options.argv = argv;
  options.log_path = log;
  auto p = rlmesh::process::Subprocess::Start(options);
  if (!p.ok()) {
    std::fprintf(stderr, "rollout_load_bench: %s\n", p.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(p).value();
}

}  // namespace

int main(int argc, char** argv) {
  const int streams = Arg(argc, argv, 1, 2000);
  const int per_stream = Arg(argc, argv, 2, 64);
  const int max_queued = Arg(argc, argv, 3, 4096);
  const std::string bin = BinDir();
  const std::string dir = std::filesystem::temp_directory_path() / "rlmesh_rollout_load_bench";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  auto make = Start({bin + "/rlmesh",  "make-tiny-model",
                     "--arch",         "llama",
                     "--out",          dir + "/model",
                     "--hidden",       "128",
                     "--layers",       "2",
                     "--heads",        "4",
                     "--kv-heads",     "4",
                     "--intermediate", "352",
                     "--max-position", "64",
                     "--seed",         "1"},
                    dir + "/make-tiny-model.log");
  if (auto s = make->Wait(absl::Minutes(5)); !s.has_value() || *s != 0) {
    std::fprintf(stderr, "rollout_load_bench: make-tiny-model failed; see %s\n", dir.c_str());
    return 1;
  }
  auto replica =
      Start({bin + "/rlmesh-rollout", "--config",
             std::string(RLMESH_BENCH_SOURCE_DIR) + "/deploy/configs/quickstart.yaml", "--port",
             "0", "--metrics_port", "0", "actor_rollout_ref.model.path=" + dir + "/model",
             absl::StrCat("rlmesh.rollout.max_queued_samples=", max_queued),
             absl::StrCat("rlmesh.rollout.max_queue=", std::max(per_stream, 1))},
            dir + "/rollout.log");
  auto line = replica->WaitForLine(
      [](const std::string& l) { return l.find("listening on") != std::string::npos; },
      absl::Minutes(3));
  std::smatch m;
  if (!line.ok() || !std::regex_search(*line, m, std::regex(R"(listening on (\S+) )"))) {
    std::fprintf(stderr, "rollout_load_bench: the replica did not start; see %s\n", dir.c_str());
    return 1;
  }
  const std::string address = m[1];
  const pid_t pid = replica->pid();
  absl::SleepFor(absl::Seconds(1));  // let it settle after loading
  const double rss_before = StatusMiB(pid, "VmRSS");

  // One connection per 100 streams: a server takes 100 concurrent streams per connection.
  std::vector<std::unique_ptr<rlmesh::v1::RolloutService::Stub>> stubs;
  for (int c = 0; c * 100 < streams; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("rlmesh.bench.channel", c);  // distinct arguments: distinct connections
    stubs.push_back(rlmesh::v1::RolloutService::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
  }

  std::atomic<int> admitted{0}, refused{0}, failed{0}, short_calls{0};
  std::atomic<int64_t> samples{0};
  std::atomic<bool> done{false};
  std::string refusal;
  std::mutex refusal_mu;
  // The most samples seen held at once: GetStatus's queued + running sequences.
  int max_held = 0;
  std::thread watcher([&] {
    auto stub = rlmesh::v1::RolloutService::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    while (!done.load()) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      rlmesh::v1::GetRolloutStatusResponse status;
      if (stub->GetStatus(&context, {}, &status).ok()) {
        max_held = std::max(max_held, status.queue_depth() + status.running_sequences());
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  });
  absl::Barrier* start = new absl::Barrier(streams);
  const absl::Time t0 = absl::Now();
  std::vector<std::thread> threads;
  threads.reserve(streams);
  for (int s = 0; s < streams; ++s) {
    threads.emplace_back([&, s] {
      rlmesh::v1::GenerateRequest request;
      request.set_request_id(absl::StrCat("load-", s));
      auto* prompt = request.add_prompts();
      prompt->set_prompt_id(absl::StrCat("p", s));
      for (int t : {49, 50, 51, 61}) prompt->add_token_ids(t);  // "123="
      request.mutable_sampling_params()->set_n(per_stream);
      request.mutable_sampling_params()->set_temperature(1.0);
      request.mutable_sampling_params()->set_max_new_tokens(4);
      request.mutable_sampling_params()->set_seed(s);
      if (start->Block()) delete start;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
      auto reader = stubs[s / 100]->Generate(&context, request);
      rlmesh::v1::GenerateResponse response;
      int got = 0;
      while (reader->Read(&response)) ++got;
      const grpc::Status status = reader->Finish();
      samples += got;
      if (status.ok()) {
        ++admitted;
        if (got != per_stream) ++short_calls;
      } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        ++refused;
        std::lock_guard<std::mutex> lock(refusal_mu);
        if (refusal.empty()) refusal = status.error_message();
      } else {
        ++failed;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  done = true;
  watcher.join();
  const double rss_peak = StatusMiB(pid, "VmHWM");
  absl::SleepFor(absl::Seconds(2));
  const double rss_after = StatusMiB(pid, "VmRSS");

  std::printf("rollout_load_bench: %d streams x %d samples at one replica, max_queued_samples %d\n",
              streams, per_stream, max_queued);
  std::printf("  admitted %d, refused with RESOURCE_EXHAUSTED %d, other errors %d (%.1f s)\n",
              admitted.load(), refused.load(), failed.load(), seconds);
  std::printf("  first refusal: %s\n", refusal.c_str());
  std::printf("  admitted calls that delivered all their samples: %d of %d (%lld samples)\n",
              admitted.load() - short_calls.load(), admitted.load(),
              static_cast<long long>(samples.load()));
  std::printf("  most samples held at once (sampled): %d, %.2f of the limit\n", max_held,
              static_cast<double>(max_held) / max_queued);
  std::printf("  replica resident memory: %.0f MiB before, %.0f MiB peak (%.2fx), %.0f MiB after\n",
              rss_before, rss_peak, rss_peak / rss_before, rss_after);
  replica->Stop(SIGTERM, absl::Seconds(20));
  return failed.load() == 0 && short_calls.load() == 0 ? 0 : 1;
}
