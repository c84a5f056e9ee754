// Weight-sync benchmark: publishes the bfloat16 parameters of a Qwen2.5-0.5B-shaped model
// (hidden 896, 24 layers, intermediate 4864, 14 heads, 2 KV heads, head_dim 64, vocab 151936,
// tied embeddings: ~0.99 GB) to 1, 2 and 4 receiver processes on this host, and prints GB/s
// per receiver count next to two ceilings measured in the same run: single-thread memcpy and a
// single loopback TCP stream between two processes (1 MiB writes).
//
// GB/s = version bytes / (time from Publish until the last receiver acknowledged), i.e. what
// each receiver got. Receivers write into pre-touched buffers, as a rollout replica's staging
// buffers are after the first version.
//
//   weight_sync_bench [--backend=shm] [--receivers=1,2,4] [--iterations=5] [--bucket_mb=64]
//                     [--scale=1.0]   (--scale shrinks every tensor's leading dimension)
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/control_channel.h"
#include "common/transport/transport_factory.h"

namespace rlmesh::transport {
namespace {

using BenchClock = std::chrono::steady_clock;

struct Flags {
  std::string backend = "shm";
  std::vector<int> receivers = {1, 2, 4};
  int iterations = 5;
  size_t bucket_bytes = 64 << 20;
  double scale = 1.0;
};

std::vector<TensorMeta> QwenShapes(double scale) {
  const int64_t hidden = 896, layers = 24, inter = 4864, heads = 14, kv = 2, head_dim = 64,
                vocab = 151936;
  auto s = [scale](int64_t rows) {
    return std::max<int64_t>(1, static_cast<int64_t>(rows * scale));
  };
  std::vector<TensorMeta> t;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    t.push_back({std::move(name), DType::kBFloat16, std::move(shape)});
  };
  add("model.embed_tokens.weight", {s(vocab), hidden});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "self_attn.q_proj.weight", {s(heads * head_dim), hidden});
    add(p + "self_attn.q_proj.bias", {heads * head_dim});
    add(p + "self_attn.k_proj.weight", {s(kv * head_dim), hidden});
    add(p + "self_attn.k_proj.bias", {kv * head_dim});
    add(p + "self_attn.v_proj.weight", {s(kv * head_dim), hidden});
    add(p + "self_attn.v_proj.bias", {kv * head_dim});
    add(p + "self_attn.o_proj.weight", {s(hidden), heads * head_dim});
    add(p + "mlp.gate_proj.weight", {s(inter), hidden});
    add(p + "mlp.up_proj.weight", {s(inter), hidden});
    add(p + "mlp.down_proj.weight", {s(hidden), inter});
    add(p + "input_layernorm.weight", {hidden});
    add(p + "post_attention_layernorm.weight", {hidden});
  }
  add("model.norm.weight", {hidden});
  return t;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Bytes copied per second by one thread, best of 3 over `bytes` (buffers pre-touched).
double MemcpyBandwidth(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = BenchClock::now();
    std::memcpy(b.data(), a.data(), bytes);
    const double s = std::chrono::duration<double>(BenchClock::now() - t0).count();
    best = std::max(best, bytes / s);
  }
  if (b[bytes / 2] != 1) std::abort();  // keep the copy observable
  return best;
}

// Control sockets are non-blocking; the TCP ceiling wants plain blocking calls, as iperf3 does.
void MakeBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK); }

// One TCP stream over loopback from this process to a child, 1 MiB writes; best of 3.
double TcpBandwidth(size_t bytes) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::abort();  // only to pass the port
  pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    auto listener = Listener::Listen("127.0.0.1", 0);
    if (!listener.ok()) _exit(2);
    const std::string endpoint = (*listener)->endpoint();
    (void)!::write(fds[1], endpoint.data(), endpoint.size());
    auto connection = (*listener)->Accept(Duration(30));
    if (!connection.ok()) _exit(3);
    MakeBlocking((*connection)->fd());
    std::vector<char> buffer(1 << 20);
    for (int i = 0; i < 3; ++i) {
      size_t left = bytes;
      while (left > 0) {
        ssize_t r = ::recv((*connection)->fd(), buffer.data(), std::min(buffer.size(), left), 0);
        if (r > 0) {
          left -= static_cast<size_t>(r);
        } else if (r == 0) {
          _exit(4);
        }
      }
      (void)!::send((*connection)->fd(), "k", 1, MSG_NOSIGNAL);
    }
    _exit(0);
  }
  ::close(fds[1]);
  char text[128] = {0};
  if (::read(fds[0], text, sizeof(text) - 1) <= 0) std::abort();
  ::close(fds[0]);
  auto connection = Connection::Dial(text, Duration(30));
  if (!connection.ok()) std::abort();
  MakeBlocking((*connection)->fd());
  std::vector<char> buffer(1 << 20, 7);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = BenchClock::now();
    size_t left = bytes;
    while (left > 0) {
      ssize_t w =
          ::send((*connection)->fd(), buffer.data(), std::min(buffer.size(), left), MSG_NOSIGNAL);
      if (w > 0) left -= static_cast<size_t>(w);
    }
    char ack;
    while (::recv((*connection)->fd(), &ack, 1, 0) != 1) {
    }
    best = std::max(best, bytes / std::chrono::duration<double>(BenchClock::now() - t0).count());
  }
  ::waitpid(child, nullptr, 0);
  return best;
}

// A receiver process: subscribes, receives `versions` versions into pre-touched buffers.
pid_t SpawnReceiver(const Flags& flags, const std::vector<TensorMeta>& metas, int index,
                    int versions, int* endpoint_pipe) {
  int p[2];
  if (::pipe(p) != 0) std::abort();
  pid_t pid = ::fork();
  if (pid != 0) {
    ::close(p[0]);
    *endpoint_pipe = p[1];
    return pid;
  }
  ::close(p[1]);
  std::vector<std::vector<char>> buffers;
  for (const auto& m : metas) buffers.emplace_back(m.NumBytes(), 0);
  std::string endpoint;
  char c;
  while (::read(p[0], &c, 1) == 1 && c != '\n') endpoint += c;
  ReceiverOptions options;
  options.endpoint = endpoint;
  options.name = "bench-" + std::to_string(index);
  auto receiver = CreateReceiver(flags.backend, options);
  if (!receiver.ok()) {
    std::fprintf(stderr, "receiver %d: %s\n", index, receiver.status().ToString().c_str());
    _exit(2);
  }
  auto destination = [&](const TensorMeta& meta) -> StatusOr<void*> {
    for (size_t i = 0; i < metas.size(); ++i) {
      if (metas[i].name == meta.name) return static_cast<void*>(buffers[i].data());
    }
    return InvalidArgumentError("unknown tensor " + meta.name);
  };
  for (int v = 0; v < versions; ++v) {
    auto got = (*receiver)->ReceiveNext(destination, Duration(300));
    if (!got.ok()) {
      std::fprintf(stderr, "receiver %d: %s\n", index, got.status().ToString().c_str());
      _exit(3);
    }
  }
  _exit(0);
}

int Main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const std::string& key) {
      return a.rfind(key, 0) == 0 ? a.substr(key.size()) : std::string();
    };
    if (auto v = value("--backend="); !v.empty()) {
      flags.backend = v;
    } else if (auto v = value("--receivers="); !v.empty()) {
      flags.receivers.clear();
      for (size_t pos = 0; pos < v.size();) {
        size_t comma = v.find(',', pos);
        flags.receivers.push_back(std::atoi(v.substr(pos, comma - pos).c_str()));
        pos = comma == std::string::npos ? v.size() : comma + 1;
      }
    } else if (auto v = value("--iterations="); !v.empty()) {
      flags.iterations = std::max(1, std::atoi(v.c_str()));
    } else if (auto v = value("--bucket_mb="); !v.empty()) {
      flags.bucket_bytes = static_cast<size_t>(std::atof(v.c_str()) * (1 << 20));
    } else if (auto v = value("--scale="); !v.empty()) {
      flags.scale = std::atof(v.c_str());
    } else {
      const bool help = a == "--help" || a == "-h";
      if (!help) std::fprintf(stderr, "weight_sync_bench: unknown argument %s\n", a.c_str());
      std::fputs(
          "usage: weight_sync_bench [--backend=shm|tcp|nccl|cuda_ipc] [--receivers=1,2,4] "
          "[--iterations=5] [--bucket_mb=64] [--scale=1.0]\n"
          "  (--scale shrinks every tensor's leading dimension)\n",
          help ? stdout : stderr);
      return help ? 0 : 2;
    }
  }
  const auto metas = QwenShapes(flags.scale);
  size_t total = 0;
  for (const auto& m : metas) total += m.NumBytes();
  std::printf(
      "weight_sync_bench: backend %s, %zu bf16 tensors, %.3f GB per version, bucket %zu MiB, %d "
      "timed "
      "versions per receiver count\n",
      flags.backend.c_str(), metas.size(), total / 1e9, flags.bucket_bytes >> 20, flags.iterations);
  const double memcpy_bw = MemcpyBandwidth(total);
  const double tcp_bw = TcpBandwidth(total);
  std::printf("ceilings: memcpy %.2f GB/s (1 thread), loopback TCP %.2f GB/s (1 stream)\n\n",
              memcpy_bw / 1e9, tcp_bw / 1e9);
  std::printf(
      "| receivers | GB/s (best) | GB/s (median) | vs memcpy | vs TCP | sender Publish s (median) "
      "|\n");
  std::printf("|---|---|---|---|---|---|\n");

  std::vector<char> source(total + metas.size() * 256);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<char>(i * 131 + 7);
  std::vector<ConstTensorView> views;
  size_t offset = 0;
  for (const auto& m : metas) {
    views.push_back({m, source.data() + offset});
    offset += m.NumBytes();
  }
  int failures = 0;
  for (int n : flags.receivers) {
    const int versions = flags.iterations + 1;  // the first one also faults in the segment
    std::vector<pid_t> children(n);
    std::vector<int> pipes(n);
    for (int i = 0; i < n; ++i) children[i] = SpawnReceiver(flags, metas, i, versions, &pipes[i]);
    SenderOptions options;
    options.bucket_bytes = flags.bucket_bytes;
    auto sender = CreateSender(flags.backend, options);
    if (!sender.ok()) {
      std::fprintf(stderr, "%s\n", sender.status().ToString().c_str());
      return 1;
    }
    const std::string line = (*sender)->endpoint() + "\n";
    for (int fd : pipes) {
      (void)!::write(fd, line.data(), line.size());
      ::close(fd);
    }
    while ((*sender)->NumReceivers() < n) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::vector<double> rates, seconds;
    for (int v = 1; v <= versions; ++v) {
      auto report = (*sender)->Publish(static_cast<uint64_t>(v), views);
      if (!report.ok() || report->dropped() > 0) {
        std::fprintf(
            stderr, "publish %d to %d receivers failed: %s\n", v, n,
            report.ok() ? report->receivers[0].error.c_str() : report.status().ToString().c_str());
        ++failures;
        break;
      }
      if (v == 1) continue;
      rates.push_back(report->bytes / report->seconds);
      seconds.push_back(report->seconds);
    }
    for (pid_t c : children) {
      int status = 0;
      ::waitpid(c, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
    }
    if (rates.empty()) continue;
    const double best = *std::max_element(rates.begin(), rates.end());
    const double median = Median(rates);
    std::printf("| %d | %.2f | %.2f | %.2f | %.2f | %.3f |\n", n, best / 1e9, median / 1e9,
                median / memcpy_bw, median / tcp_bw, Median(seconds));
    std::fflush(stdout);
  }
  if (failures > 0) std::fprintf(stderr, "%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rlmesh::transport

int main(int argc, char** argv) { return rlmesh::transport::Main(argc, argv); }
