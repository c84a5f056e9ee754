#include "common/dist/group.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/dist/cuda_here.h"
#include "common/dist/nccl_collectives.h"
#include "common/transport/absl_status.h"

namespace rlmesh::dist {
namespace {

constexpr char kCommandKey[] = "rlmesh/cmd/";
constexpr char kErrorKey[] = "rlmesh/err/";
constexpr char kHeartbeatKey[] = "rlmesh/heartbeat/";
constexpr char kHeartbeatPortKey[] = "rlmesh/heartbeat_port/";

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

std::vector<uint8_t> Bytes(absl::string_view s) { return {s.begin(), s.end()}; }
std::string Text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

std::string ErrorText(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

// Sets `options` to the classic store server where the option exists (LibTorch 2.4 and later).
template <typename Options>
void AskForTheClassicStore(Options& options) {
  if constexpr (requires { options.useLibUV = false; }) options.useLibUV = false;
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || absl::StartsWith(host, "127.") || host == "::1";
}

// Gloo's options for a group of this rank: its collective timeout and the device its
// connections bind.
c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> GlooOptions(const GroupOptions& options) {
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(Millis(options.timeout_s));
  std::string bind = options.bind_host;
  if (bind.empty() && IsLoopback(options.host)) bind = options.host;
  gloo_options->devices.push_back(bind.empty()
                                      ? c10d::ProcessGroupGloo::createDefaultDevice()
                                      : c10d::ProcessGroupGloo::createDeviceForHostname(bind));
  gloo_options->threads = 1;
  return gloo_options;
}

// Joins the NCCL communicator of one scope whose ranks are 0 .. size - 1 (`rank` this one's):
// its rank 0 puts a fresh id under `key` in the group's store, the others wait for it there.
absl::StatusOr<std::unique_ptr<NcclCollectives>> JoinNccl(c10d::Store& store,
                                                          const std::string& key, int rank,
                                                          int size, const GroupOptions& options) {
  const std::string name = absl::StrCat(options.name, " rank ", options.rank);
  try {
    if (rank == 0) {
      transport::StatusOr<std::string> id = NcclCollectives::NewId();
      if (!id.ok()) return transport::ToAbsl(transport::Annotate(id.status(), name));
      store.set(key, Bytes(*id));
    }
    auto joined = NcclCollectives::Join(Text(store.get(key)), rank, size, options.cuda_device,
                                        options.timeout_s, name);
    if (!joined.ok()) return transport::ToAbsl(joined.status());
    return std::move(joined.value());
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat(name, ": exchanging the NCCL id at ", key, ": ", ErrorText(e)));
  }
}

// NcclCollectives' type for a tensor of `dtype` (float32, float64 or bfloat16).
NcclElement ElementOf(torch::ScalarType dtype) {
  if (dtype == torch::kFloat64) return NcclElement::kFloat64;
  if (dtype == torch::kBFloat16) return NcclElement::kBFloat16;
  return NcclElement::kFloat32;
}

}  // namespace

c10d::TCPStoreOptions StoreOptions() {
  c10d::TCPStoreOptions options;
  AskForTheClassicStore(options);
  return options;
}

absl::StatusOr<RankPlacement> PlaceGroupRank(const std::string& device, int local_rank,
                                             int ranks_per_node, GroupOptions* options) {
  const CudaHere here = device == "cuda" ? CudaHereNow() : CudaHere{};
  absl::StatusOr<RankPlacement> placement = PlaceRank(device, local_rank, ranks_per_node, here);
  if (placement.ok()) {
    options->backend = placement->backend;
    options->cuda_device = std::max(0, placement->cuda_device);
  }
  return placement;
}

absl::StatusOr<std::unique_ptr<Group>> Group::Join(const GroupOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(options.name, " group: rank ", options.rank,
                                                   " of world size ", options.world_size,
                                                   ": expected 0 <= rank < world size"));
  }
  if (options.rank > 0 && options.port <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.name, " rank ", options.rank, ": the group's port must be given"));
  }
  if (options.backend != "gloo" && options.backend != "nccl") {
    return absl::InvalidArgumentError(absl::StrCat(options.name, " group: backend \"",
                                                   options.backend, "\": expected gloo or nccl"));
  }
  if (options.backend == "nccl") {
    // Every rank checks, so that none waits for a communicator that another cannot join.
    if (transport::Status s = NcclCollectives::Available(options.cuda_device); !s.ok()) {
      return transport::ToAbsl(
          transport::Annotate(s, absl::StrCat(options.name, " rank ", options.rank)));
    }
  }
  const std::string where = absl::StrCat(options.host, ":", options.port);
  try {
    c10d::TCPStoreOptions store_options = StoreOptions();
    store_options.port = static_cast<uint16_t>(options.port);
    store_options.isServer = options.rank == 0;
    store_options.numWorkers = options.world_size;
    store_options.waitWorkers = false;
    store_options.timeout = Millis(options.timeout_s);
    auto store = c10::make_intrusive<c10d::TCPStore>(options.host, store_options);
    const int port = store->getPort();
    if (options.rank == 0 && options.listening) options.listening(port);
    // Rank 0 hosts one heartbeat server per rank and publishes their ports.
    std::vector<c10::intrusive_ptr<c10d::Store>> heartbeat_servers;
    if (options.rank == 0) {
      for (int r = 0; r < options.world_size; ++r) {
        c10d::TCPStoreOptions server_options = store_options;
        server_options.port = 0;
        server_options.numWorkers.reset();  // c10::optional in LibTorch 1.x, std:: in 2.x
        auto server = c10::make_intrusive<c10d::TCPStore>(options.host, server_options);
        store->set(absl::StrCat(kHeartbeatPortKey, r), Bytes(std::to_string(server->getPort())));
        heartbeat_servers.push_back(std::move(server));
      }
    }
    std::vector<int> heartbeat_ports;
    for (int r = 0; r < options.world_size; ++r) {
      heartbeat_ports.push_back(std::stoi(Text(store->get(absl::StrCat(kHeartbeatPortKey, r)))));
    }
    c10d::TCPStoreOptions client_options = store_options;
    client_options.port = static_cast<uint16_t>(heartbeat_ports[options.rank]);
    client_options.isServer = false;
    client_options.numWorkers.reset();
    auto heartbeat_store = c10::make_intrusive<c10d::TCPStore>(options.host, client_options);

    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(
        store, options.rank, options.world_size, GlooOptions(options));
    auto joined =
        std::unique_ptr<Group>(new Group(options, std::move(store), std::move(heartbeat_servers),
                                         std::move(heartbeat_store), std::move(group), port));
    joined->heartbeat_ports_ = std::move(heartbeat_ports);
    if (options.backend == "nccl") {
      auto nccl =
          JoinNccl(*joined->store_, "rlmesh/nccl/world", options.rank, options.world_size, options);
      if (!nccl.ok()) return nccl.status();
      joined->nccl_ = std::move(nccl).value();
    }
    return joined;
  } catch (const std::exception& e) {
    const std::string text = ErrorText(e);
    const bool timed_out = absl::StrContains(text, "imeout") || absl::StrContains(text, "imed out");
    const std::string message = absl::StrCat(
        options.name, " rank ", options.rank, " of ", options.world_size,
        ": cannot join the group at ", where,
        timed_out ? absl::StrCat(" within ", options.timeout_s, " s (are all ranks started?)")
                  : std::string(),
        ": ", text);
    return timed_out ? absl::DeadlineExceededError(message) : absl::UnavailableError(message);
  }
}

Group::Group(const GroupOptions& options, c10::intrusive_ptr<c10d::Store> store,
             std::vector<c10::intrusive_ptr<c10d::Store>> heartbeat_servers,
             c10::intrusive_ptr<c10d::Store> heartbeat_store,
             c10::intrusive_ptr<c10d::ProcessGroupGloo> group, int port)
    : options_(options),
      store_(std::move(store)),
      heartbeat_servers_(std::move(heartbeat_servers)),
      heartbeat_store_(std::move(heartbeat_store)),
      group_(std::move(group)),
      shard_size_(options.world_size),
      port_(port) {
  heartbeat_ = std::thread([this] {
    const std::string key = absl::StrCat(kHeartbeatKey, options_.rank);
    while (!stop_.load()) {
      try {
        heartbeat_store_->add(key, 1);
      } catch (const std::exception&) {
        return;  // the store (rank 0) is gone; the next command says so
      }
      for (int i = 0; i < 5 && !stop_.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  });
}

Group::~Group() {
  stop_.store(true);
  if (heartbeat_.joinable()) heartbeat_.join();
  nccl_replicate_.reset();
  nccl_shard_.reset();
  nccl_.reset();
  shard_group_.reset();
  replicate_group_.reset();
  group_.reset();
  heartbeat_store_.reset();
  store_.reset();
  heartbeat_servers_.clear();
}

std::optional<int64_t> Group::ReadHeartbeat(int r) {
  // c10d's store client has no receive timeout, so a read from a wedged server would block
  // for good: the read runs on a thread of its own, which is left behind when it is late
  // (it ends when the server answers or closes).
  auto result = std::make_shared<std::promise<std::optional<int64_t>>>();
  std::future<std::optional<int64_t>> answer = result->get_future();
  const std::string host = options_.host;
  const int port = heartbeat_ports_[static_cast<size_t>(r)];
  const std::string key = absl::StrCat(kHeartbeatKey, r);
  std::thread([host, port, key, result] {
    try {
      c10d::TCPStoreOptions o = StoreOptions();
      o.port = static_cast<uint16_t>(port);
      o.isServer = false;
      o.waitWorkers = false;
      o.timeout = std::chrono::milliseconds(2000);
      c10d::TCPStore client(host, o);
      result->set_value(client.add(key, 0));
    } catch (const std::exception&) {
      result->set_value(std::nullopt);
    }
  }).detach();
  if (answer.wait_for(std::chrono::milliseconds(2000)) != std::future_status::ready) {
    return std::nullopt;
  }
  return answer.get();
}

std::vector<int> Group::SilentRanks() {
  const int w = options_.world_size;
  std::vector<std::optional<int64_t>> before(static_cast<size_t>(w));
  for (int r = 0; r < w; ++r) before[r] = ReadHeartbeat(r);
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  std::vector<int> silent;
  for (int r = 0; r < w; ++r) {
    if (r == options_.rank) continue;  // this one is answering
    const std::optional<int64_t> after = ReadHeartbeat(r);
    if (!before[r] || !after || *after == *before[r]) silent.push_back(r);
  }
  // Every heartbeat server lives in rank 0: when it is gone, so are they all.
  if (!silent.empty() && silent.front() == 0 && options_.rank != 0) return {0};
  return silent;
}

absl::Status Group::Break(absl::string_view what, absl::string_view error) {
  const std::vector<int> silent = SilentRanks();
  const bool timed_out = absl::StrContains(error, "imed out") || absl::StrContains(error, "imeout");
  std::string who;
  if (silent.empty()) {
    who = "every rank's heartbeat continues (see the other ranks' logs)";
  } else {
    std::vector<std::string> names;
    for (int r : silent) names.push_back(absl::StrCat(options_.name, " rank ", r));
    who = absl::StrCat(absl::StrJoin(names, ", "), silent.size() == 1 ? " is" : " are",
                       " not responding (dead or stalled)");
  }
  const std::string message = absl::StrCat(
      options_.name, " group (rank ", options_.rank, " of ", options_.world_size, "): ", what,
      " failed", timed_out ? absl::StrCat(" after ", options_.timeout_s, " s") : "", ": ", who,
      "; ", error);
  broken_ = timed_out ? absl::DeadlineExceededError(message) : absl::UnavailableError(message);
  std::fprintf(stderr, "%s\n", message.c_str());
  return broken_;
}

absl::Status Group::FormMesh(int shard_size) {
  if (!broken_.ok()) return broken_;
  const int w = options_.world_size;
  if (shard_size < 1 || shard_size > w || w % shard_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(options_.name, " group: shard groups of ",
                                                   shard_size, " ranks do not divide a group of ",
                                                   w, " ranks"));
  }
  if (shard_group_ || replicate_group_ || shard_size_ != w) {
    if (shard_size == shard_size_) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        options_.name, " group: the mesh is already formed with shard groups of ", shard_size_));
  }
  shard_size_ = shard_size;
  if (shard_size == 1 || shard_size == w) return absl::OkStatus();
  try {
    // Every rank forms its shard group, then its replica set: each formation waits only for
    // that group's own members, who form them in the same order.
    shard_group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("rlmesh/mesh/shard/", replica()),
                                               store_),
        shard_rank(), shard_size, GlooOptions(options_));
    replicate_group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("rlmesh/mesh/replicate/", shard_rank()),
                                               store_),
        replica(), replicas(), GlooOptions(options_));
  } catch (const std::exception& e) {
    return Break(absl::StrCat("forming shard groups of ", shard_size), ErrorText(e));
  }
  if (nccl_ != nullptr) {
    // The same two groups' NCCL communicators, formed in the same order.
    auto shard = JoinNccl(*store_, absl::StrCat("rlmesh/nccl/shard/", replica()), shard_rank(),
                          shard_size, options_);
    if (!shard.ok()) return broken_ = shard.status();
    nccl_shard_ = std::move(shard).value();
    auto replicate = JoinNccl(*store_, absl::StrCat("rlmesh/nccl/replicate/", shard_rank()),
                              replica(), replicas(), options_);
    if (!replicate.ok()) return broken_ = replicate.status();
    nccl_replicate_ = std::move(replicate).value();
  }
  return absl::OkStatus();
}

c10d::ProcessGroupGloo& Group::Of(Scope scope) const {
  if (scope == Scope::kShard && shard_group_) return *shard_group_;
  if (scope == Scope::kReplicate && replicate_group_) return *replicate_group_;
  return *group_;
}

NcclCollectives* Group::NcclOf(Scope scope) const {
  if (scope == Scope::kShard && nccl_shard_) return nccl_shard_.get();
  if (scope == Scope::kReplicate && nccl_replicate_) return nccl_replicate_.get();
  return nccl_.get();
}

absl::Status Group::CheckDevice(const torch::Tensor& t, absl::string_view what) const {
  if (t.device().is_cpu()) return absl::OkStatus();
  if (t.device().is_cuda() && (nccl_ == nullptr || t.device().index() == options_.cuda_device)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": a tensor on ", t.device().str(), ", but this group's collectives take CPU tensors",
      nccl_ != nullptr ? absl::StrCat(" and CUDA tensors on cuda:", options_.cuda_device)
                       : std::string(" and CUDA tensors")));
}

bool Group::OverNccl(const torch::Tensor& t) const { return t.is_cuda() && nccl_ != nullptr; }

int Group::SizeOf(Scope scope) const {
  switch (scope) {
    case Scope::kShard:
      return shard_size();
    case Scope::kReplicate:
      return replicas();
    case Scope::kWorld:
      break;
  }
  return options_.world_size;
}

int Group::RankIn(Scope scope) const {
  switch (scope) {
    case Scope::kShard:
      return shard_rank();
    case Scope::kReplicate:
      return replica();
    case Scope::kWorld:
      break;
  }
  return options_.rank;
}

absl::Status Group::AllReduceSum(const std::vector<torch::Tensor>& tensors, absl::string_view what,
                                 Scope scope) {
  if (!broken_.ok()) return broken_;
  if (SizeOf(scope) == 1) return absl::OkStatus();
  // One flat buffer per device (-1: the CPU) and dtype; bfloat16 is summed in float32.
  std::map<std::pair<int, torch::ScalarType>, std::vector<torch::Tensor>> by_dtype;
  for (const auto& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    if (absl::Status s = CheckDevice(t, what); !s.ok()) return s;
    const auto dtype = t.scalar_type() == torch::kBFloat16 ? torch::kFloat32 : t.scalar_type();
    if (dtype != torch::kFloat32 && dtype != torch::kFloat64) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": expected float32, float64 or bfloat16 tensors, got ",
                       c10::toString(t.scalar_type())));
    }
    by_dtype[{t.is_cuda() ? t.device().index() : -1, dtype}].push_back(t);
  }
  try {
    for (auto& [key, list] : by_dtype) {
      const torch::ScalarType dtype = key.second;
      std::vector<torch::Tensor> flat_parts;
      flat_parts.reserve(list.size());
      for (const auto& t : list) flat_parts.push_back(t.detach().reshape({-1}).to(dtype));
      std::vector<at::Tensor> buffer = {torch::cat(flat_parts)};
      if (OverNccl(buffer[0])) {
        const transport::Status s = NcclOf(scope)->AllReduceSum(
            buffer[0].data_ptr(), static_cast<size_t>(buffer[0].numel()), ElementOf(dtype),
            std::string(what));
        if (!s.ok()) return Break(what, s.message());
      } else {
        // Gloo sums host memory: a CUDA buffer goes through a host copy.
        std::vector<at::Tensor> host = {buffer[0].to(torch::kCPU)};
        auto work = Of(scope).allreduce(host);
        work->wait(Millis(options_.timeout_s));
        if (!host[0].is_same(buffer[0])) buffer[0].copy_(host[0]);
      }
      Count(buffer[0].numel() * buffer[0].element_size(), 2, SizeOf(scope));
      int64_t offset = 0;
      torch::NoGradGuard no_grad;
      for (auto& t : list) {
        const int64_t n = t.numel();
        t.copy_(buffer[0].narrow(0, offset, n).view(t.sizes()));
        offset += n;
      }
    }
  } catch (const std::exception& e) {
    return Break(what, ErrorText(e));
  }
  return absl::OkStatus();
}

void Group::Count(int64_t full_bytes, int passes, int size) {
  const int64_t w = size;
  bytes_communicated_ += passes * full_bytes * (w - 1) / w;
}

namespace {

absl::Status CheckShardAndFull(const torch::Tensor& shard, const torch::Tensor& full, int world,
                               absl::string_view what) {
  if (!shard.defined() || !full.defined() || shard.dim() != 1 || full.dim() != 1 ||
      !shard.is_contiguous() || !full.is_contiguous() || shard.device() != full.device() ||
      shard.scalar_type() != full.scalar_type()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected flat contiguous tensors of one dtype on one device"));
  }
  const auto dtype = shard.scalar_type();
  if (dtype != torch::kFloat32 && dtype != torch::kFloat64 && dtype != torch::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected float32, float64 or bfloat16, got ", c10::toString(dtype)));
  }
  if (full.numel() != shard.numel() * world) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", full.numel(), " elements are not ",
                                                   world, " shards of ", shard.numel()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> Group::NeedsPeers(const torch::Tensor& shard, const torch::Tensor& full,
                                       bool gather, absl::string_view what, Scope scope) {
  if (!broken_.ok()) return broken_;
  if (absl::Status s = CheckShardAndFull(shard, full, SizeOf(scope), what); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckDevice(full, what); !s.ok()) return s;
  if (SizeOf(scope) > 1) return true;
  torch::NoGradGuard no_grad;
  (gather ? full : shard).copy_(gather ? shard : full);
  return false;
}

absl::Status Group::AllGather(const torch::Tensor& shard, const torch::Tensor& full,
                              absl::string_view what, Scope scope) {
  absl::StatusOr<bool> peers = NeedsPeers(shard, full, /*gather=*/true, what, scope);
  if (!peers.ok() || !*peers) return peers.status();
  const int w = SizeOf(scope);
  torch::NoGradGuard no_grad;
  if (OverNccl(shard)) {
    const transport::Status s = NcclOf(scope)->AllGather(
        shard.data_ptr(), full.data_ptr(), static_cast<size_t>(shard.numel()),
        ElementOf(shard.scalar_type()), std::string(what));
    if (!s.ok()) return Break(what, s.message());
    Count(full.numel() * full.element_size(), 1, w);
    return absl::OkStatus();
  }
  try {
    // Gloo moves host memory: CUDA tensors go through host copies.
    const bool staged = !full.is_cpu();
    const at::Tensor host_shard = shard.to(torch::kCPU);
    const at::Tensor host_full = staged ? torch::empty(full.sizes(), host_shard.options()) : full;
    // Gloo has no bfloat16: it gathers the raw 16-bit words as float16 (a copy, no arithmetic).
    const bool bf16 = shard.scalar_type() == torch::kBFloat16;
    at::Tensor input = bf16 ? host_shard.view(torch::kHalf) : host_shard;
    at::Tensor output = bf16 ? host_full.view(torch::kHalf) : host_full;
    std::vector<std::vector<at::Tensor>> outputs(1);
    const int64_t n = shard.numel();
    for (int r = 0; r < w; ++r) outputs[0].push_back(output.narrow(0, r * n, n));
    std::vector<at::Tensor> inputs = {input};
    auto work = Of(scope).allgather(outputs, inputs);
    work->wait(Millis(options_.timeout_s));
    if (staged) full.copy_(host_full);
    Count(full.numel() * full.element_size(), 1, w);
  } catch (const std::exception& e) {
    return Break(what, ErrorText(e));
  }
  return absl::OkStatus();
}

absl::Status Group::ReduceScatterSum(const torch::Tensor& full, const torch::Tensor& shard,
                                     absl::string_view what, Scope scope) {
  absl::StatusOr<bool> peers = NeedsPeers(shard, full, /*gather=*/false, what, scope);
  if (!peers.ok() || !*peers) return peers.status();
  const int w = SizeOf(scope);
  torch::NoGradGuard no_grad;
  if (OverNccl(full)) {
    // NCCL's reduce-scatter, summed in float32 (float64 stays float64).
    const auto dtype = full.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    const at::Tensor source = full.to(dtype);
    const at::Tensor mine =
        shard.scalar_type() == dtype ? shard : torch::empty({shard.numel()}, source.options());
    const transport::Status s = NcclOf(scope)->ReduceScatterSum(
        source.data_ptr(), mine.data_ptr(), static_cast<size_t>(shard.numel()), ElementOf(dtype),
        std::string(what));
    if (!s.ok()) return Break(what, s.message());
    if (!mine.is_same(shard)) shard.copy_(mine);
    Count(source.numel() * source.element_size(), 1, w);
    return absl::OkStatus();
  }
  c10d::ProcessGroupGloo& group = Of(scope);
  try {
    // Gloo has no reduce-scatter here: a ring of W - 1 sends and receives. At step s rank r
    // passes its running sum of chunk (r - s - 1) on to rank r + 1 and adds what rank r - 1
    // passes it to its own copy of chunk (r - s - 2); after W - 1 steps chunk r holds the sum
    // of every rank's, each chunk summed in one fixed order.
    const int r = RankIn(scope);
    const int64_t n = shard.numel();
    // In host memory (Gloo's), whatever device `full` is on.
    at::Tensor work = full.to(torch::kCPU, torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
    at::Tensor incoming = torch::empty({n}, torch::kFloat32);
    auto chunk = [&](int i) { return work.narrow(0, ((i % w) + w) % w * n, n); };
    for (int step = 0; step < w - 1; ++step) {
      std::vector<at::Tensor> out = {chunk(r - step - 1).contiguous()};
      std::vector<at::Tensor> in = {incoming};
      const int tag = 1000 + step;
      auto receiving = group.recv(in, (r - 1 + w) % w, tag);
      auto sending = group.send(out, (r + 1) % w, tag);
      sending->wait(Millis(options_.timeout_s));
      receiving->wait(Millis(options_.timeout_s));
      chunk(r - step - 2).add_(incoming);
    }
    shard.copy_(chunk(r));
    Count(work.numel() * work.element_size(), 1, w);
  } catch (const std::exception& e) {
    return Break(what, ErrorText(e));
  }
  return absl::OkStatus();
}

absl::Status Group::Post(absl::string_view op, std::string payload) {
  if (!broken_.ok()) return broken_;
  if (options_.rank != 0) return absl::InternalError("Group::Post: only rank 0 posts commands");
  if (options_.world_size == 1) return absl::OkStatus();
  current_ = next_sequence_++;
  std::string bytes = absl::StrCat(op, std::string(1, '\0'), payload);
  try {
    store_->set(absl::StrCat(kCommandKey, current_), Bytes(bytes));
  } catch (const std::exception& e) {
    return Break(absl::StrCat("sending ", op), ErrorText(e));
  }
  return absl::OkStatus();
}

absl::StatusOr<Command> Group::Next() {
  if (!broken_.ok()) return broken_;
  if (options_.rank == 0) return absl::InternalError("Group::Next: rank 0 posts, it does not take");
  const std::string key = absl::StrCat(kCommandKey, next_sequence_);
  // Poll: TCPStore's blocking wait cannot be abandoned cleanly, and rank 0 may stay idle for
  // longer than any timeout while rollouts run. 1 ms at first, backing off to 20 ms.
  int64_t sleep_us = 1000;
  try {
    while (!store_->check({key})) {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min<int64_t>(20000, sleep_us * 2);
    }
    const std::string bytes = Text(store_->get(key));
    const size_t nul = bytes.find('\0');
    Command command;
    command.sequence = next_sequence_;
    command.op = bytes.substr(0, nul);
    command.payload = nul == std::string::npos ? std::string() : bytes.substr(nul + 1);
    current_ = next_sequence_++;
    return command;
  } catch (const std::exception& e) {
    broken_ = absl::UnavailableError(absl::StrCat(options_.name, " rank ", options_.rank,
                                                  ": lost rank 0 (it hosts the group's store at ",
                                                  options_.host, ":", port_, "): ", ErrorText(e)));
    return broken_;
  }
}

absl::Status Group::Finish(const absl::Status& local) {
  if (!broken_.ok()) return broken_;
  if (options_.world_size == 1) return local;
  const int64_t sequence = current_;
  current_ = 0;
  auto flags = torch::zeros({options_.world_size}, torch::kFloat64);
  try {
    if (!local.ok()) {
      flags[options_.rank] = 1.0 + static_cast<double>(local.code());
      store_->set(absl::StrCat(kErrorKey, sequence, "/", options_.rank), Bytes(local.message()));
    }
  } catch (const std::exception& e) {
    return Break("reporting a failure", ErrorText(e));
  }
  if (absl::Status s = AllReduceSum({flags}, "finishing a command"); !s.ok()) return s;
  absl::Status result;
  const auto* f = flags.data_ptr<double>();
  for (int r = 0; r < options_.world_size; ++r) {
    if (f[r] == 0) continue;
    const auto code = static_cast<absl::StatusCode>(static_cast<int>(f[r]) - 1);
    std::string message;
    try {
      message = r == options_.rank ? std::string(local.message())
                                   : Text(store_->get(absl::StrCat(kErrorKey, sequence, "/", r)));
    } catch (const std::exception& e) {
      message = absl::StrCat("(its message could not be read: ", ErrorText(e), ")");
    }
    result = absl::Status(code, absl::StrCat(options_.name, " rank ", r, ": ", message));
    break;
  }
  if (options_.rank == 0) {
    // Every rank has read this command (it took part in the sum above), and every rank is
    // done reading the previous command's messages; this one's may still be being read.
    try {
      store_->deleteKey(absl::StrCat(kCommandKey, sequence));
      for (const std::string& key : unread_errors_) store_->deleteKey(key);
    } catch (const std::exception&) {
      // Only a leak in the store; the next collective reports a real failure.
    }
    unread_errors_.clear();
    for (int r = 0; r < options_.world_size; ++r) {
      if (f[r] != 0) unread_errors_.push_back(absl::StrCat(kErrorKey, sequence, "/", r));
    }
  }
  return result;
}

}  // namespace rlmesh::dist
