// A group of W processes (ranks) that run the same steps on the same requests and combine
// their results with collectives: c10d's ProcessGroupGloo over a TCPStore that rank 0 hosts,
// and with backend "nccl" also an NCCL communicator per scope for the CUDA tensors (one GPU
// per rank; nccl_collectives.h). Without it, CUDA tensors go through host copies to Gloo.
// The trainer uses one per run (services/trainer/trainer_group.h); the actor reduces its
// gradients and metrics through it.
//
// Commands: rank 0 posts each request it receives (Post) and the other ranks take them in the
// same order (Next), so every rank runs the same work; each command then ends with Finish,
// where the ranks exchange success or failure, so a request that fails on one rank fails on
// rank 0 with that rank's message. Waiting for a command has no time limit (rank 0 may be
// idle while rollouts run); every collective has `timeout_s`.
//
// Liveness: each rank bumps a heartbeat counter every 250 ms from a thread of its own, in a
// store of its own that rank 0 hosts (one per rank: c10d's store server serves one request
// at a time, so a rank stopped in the middle of a request wedges the server it was talking
// to; with its own heartbeat server that is only its own, and the main store's command
// traffic cannot hide the others' heartbeats). When a collective fails (a peer died, closed
// its socket, or stalled past the timeout), the group names the ranks whose heartbeat stopped
// or cannot be read, and is broken from then on: every later call returns FailedPrecondition
// with the first failure's message.
//
// Thread-compatible: one thread drives a group (the trainer serializes its requests).
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/dist/placement.h"

namespace c10d {
struct TCPStoreOptions;
class Store;
class ProcessGroupGloo;
}  // namespace c10d

namespace rlmesh::dist {

class NcclCollectives;

struct GroupOptions {
  int rank = 0;
  int world_size = 1;
  // Rank 0's address and the store's port there. Rank 0 binds the port; with 0 it picks a
  // free one (port() says which; tests).
  std::string host = "127.0.0.1";
  int port = 0;
  // The address this rank's Gloo connections bind; empty = `host` when it is a loopback
  // address, else the address this machine's hostname resolves to.
  std::string bind_host;
  // Limit of each collective and of the rendezvous (actor_rollout_ref.nccl_timeout).
  double timeout_s = 600;
  // For messages: "<name> rank <r>".
  std::string name = "trainer";
  // "gloo": collectives take CPU tensors only. "nccl": CUDA tensors on `cuda_device` (this
  // rank's GPU; every rank its own) go through NCCL, CPU tensors and the commands still go
  // through Gloo. Join fails with FailedPrecondition in a build without NCCL, Unavailable when
  // the GPU or NCCL fails.
  std::string backend = "gloo";
  int cuda_device = 0;
  // Rank 0: called with the store's port once it listens, before the other ranks are
  // awaited (the launcher starts them with it).
  std::function<void(int port)> listening;
};

// Which ranks a collective spans. Without a mesh (Group::FormMesh) every scope is the world.
// With shard groups of F ranks: kShard = the F consecutive ranks of this rank's shard group
// (ranks [k F, (k + 1) F)), kReplicate = the W / F ranks holding the same shard (ranks r with
// the same r mod F), as verl's hybrid-sharded device mesh (replicate x shard).
enum class Scope { kWorld, kShard, kReplicate };

struct Command {
  int64_t sequence = 0;
  std::string op;
  std::string payload;
};

// The options every c10d::TCPStore of a group starts from, server or client: the classic store
// server. LibTorch 2.4 and later default to a libuv server, which LibTorch builds without libuv
// (Debian's) refuse; LibTorch 1.x has only the classic one, so every LibTorch runs the same.
c10d::TCPStoreOptions StoreOptions();

// Places this rank (placement.h) on the CUDA devices this process sees, and sets `options`'
// backend and cuda_device to match; the caller runs on the placement's device.
absl::StatusOr<RankPlacement> PlaceGroupRank(const std::string& device, int local_rank,
                                             int ranks_per_node, GroupOptions* options);

// The request a command carries (rank 0 posts request.SerializeAsString()); Internal naming
// the command when it does not parse.
template <typename Request>
absl::StatusOr<Request> ParseRequest(const Command& command) {
  Request request;
  if (!request.ParseFromString(command.payload)) {
    return absl::InternalError(absl::StrCat("command ", command.sequence, " (", command.op,
                                            "): the request from rank 0 does not parse"));
  }
  return request;
}

class Group {
 public:
  // Rendezvous: rank 0 starts the store, every rank connects and the Gloo group forms. Fails
  // (DeadlineExceeded or Unavailable, naming host:port and the ranks still missing) when the
  // W ranks have not all arrived within timeout_s.
  static absl::StatusOr<std::unique_ptr<Group>> Join(const GroupOptions& options);
  ~Group();

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }

  // Hybrid sharding: splits the ranks into shard groups of `shard_size` consecutive ranks,
  // replicated across W / shard_size such groups, and forms a Gloo group (and with backend
  // "nccl" an NCCL communicator) for each shard group and each replica set. Every rank calls it
  // with the same size, once, before collectives in those scopes; InvalidArgument unless 1 <=
  // shard_size <= W divides W. A size of W (or 1) forms no new group: kShard (kReplicate) is then
  // the world.
  absl::Status FormMesh(int shard_size);
  // This rank's place in the mesh: shard_size() ranks per shard group, at shard_rank() in
  // its group; replicas() groups, this one replica(). Without a mesh: W, rank, 1, 0.
  int shard_size() const { return shard_size_; }
  int shard_rank() const { return options_.rank % shard_size_; }
  int replicas() const { return options_.world_size / shard_size_; }
  int replica() const { return options_.rank / shard_size_; }
  int port() const { return port_; }
  const GroupOptions& options() const { return options_; }

  // Whether CUDA tensors on options().cuda_device move over NCCL on the device (backend
  // "nccl"); otherwise the collectives run on Gloo, and CUDA tensors, on any device, go
  // through host copies (so ranks that share a GPU can form a group too).
  bool device_collectives() const { return nccl_ != nullptr; }

  // Sums the tensors across ranks in place: afterwards every rank holds the sums. CPU and
  // CUDA tensors (see device_collectives()); any mix of float, double and bfloat16 (bfloat16
  // is summed in float32) and of shapes; one collective per device and dtype. `what` names
  // the operation in errors.
  absl::Status AllReduceSum(const std::vector<torch::Tensor>& tensors, absl::string_view what,
                            Scope scope = Scope::kWorld);

  // Full sharding's two collectives, on flat contiguous tensors of one dtype (float32,
  // float64 or bfloat16) and one device (the CPU or a GPU, see device_collectives()) where
  // full has S x shard elements, S the scope's size: AllGather
  // fills `full` with every rank's `shard` in rank order; ReduceScatterSum sums `full` across
  // the ranks and leaves this rank's slice of the sum (elements [i x n, (i + 1) x n), i its
  // rank in the scope) in `shard`. bfloat16 is reduced in float32.
  absl::Status AllGather(const torch::Tensor& shard, const torch::Tensor& full,
                         absl::string_view what, Scope scope = Scope::kWorld);
  absl::Status ReduceScatterSum(const torch::Tensor& full, const torch::Tensor& shard,
                                absl::string_view what, Scope scope = Scope::kWorld);

  // Bytes this rank has sent through the collectives above, as a ring algorithm sends them:
  // an all-reduce of N bytes 2 (S-1)/S N, an all-gather or a reduce-scatter of N full bytes
  // (S-1)/S N, S the scope's size. The command channel and the heartbeats are not counted.
  int64_t bytes_communicated() const { return bytes_communicated_; }

  // Rank 0: sends a command to the other ranks. Commands are numbered in order.
  absl::Status Post(absl::string_view op, std::string payload);
  // Ranks > 0: the next command, waiting as long as it takes. Unavailable when rank 0 is gone.
  absl::StatusOr<Command> Next();
  // Every rank, after running the current command: exchanges the ranks' results. Returns OK
  // when all succeeded, else the first failing rank's status with "<name> rank <r>: " before
  // its message (on every rank). A collective failure breaks the group.
  absl::Status Finish(const absl::Status& local);

  // The group broke (a collective failed); the status says how. Later calls return it.
  const absl::Status& broken() const { return broken_; }

 private:
  Group(const GroupOptions& options, c10::intrusive_ptr<c10d::Store> store,
        std::vector<c10::intrusive_ptr<c10d::Store>> heartbeat_servers,
        c10::intrusive_ptr<c10d::Store> heartbeat_store,
        c10::intrusive_ptr<c10d::ProcessGroupGloo> group, int port);
  // Turns an exception of a collective into the group's broken status, naming silent ranks.
  absl::Status Break(absl::string_view what, absl::string_view error);
  std::vector<int> SilentRanks();
  // Rank r's heartbeat count, read from r's heartbeat server; nullopt when it cannot be read
  // within 2 s.
  std::optional<int64_t> ReadHeartbeat(int r);
  // OK for a CPU tensor and a CUDA tensor (on this rank's GPU where device_collectives());
  // else InvalidArgument naming the device.
  absl::Status CheckDevice(const torch::Tensor& t, absl::string_view what) const;
  // Whether `t` (checked) moves over NCCL rather than Gloo.
  bool OverNccl(const torch::Tensor& t) const;
  // Checks the tensors of AllGather (`gather`) or ReduceScatterSum; alone in the scope, does
  // its copy and returns false.
  absl::StatusOr<bool> NeedsPeers(const torch::Tensor& shard, const torch::Tensor& full,
                                  bool gather, absl::string_view what, Scope scope);
  // Adds the ring volume of a collective over `full_bytes` among `size` ranks.
  void Count(int64_t full_bytes, int passes, int size);
  // The Gloo group, the NCCL communicator (null without), size and this rank's rank of a
  // scope.
  c10d::ProcessGroupGloo& Of(Scope scope) const;
  NcclCollectives* NcclOf(Scope scope) const;
  int SizeOf(Scope scope) const;
  int RankIn(Scope scope) const;

  const GroupOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  // Rank 0: the W heartbeat servers (rank r's at port heartbeat_ports_[r]).
  std::vector<c10::intrusive_ptr<c10d::Store>> heartbeat_servers_;
  c10::intrusive_ptr<c10d::Store> heartbeat_store_;  // this rank's, for the thread
  std::vector<int> heartbeat_ports_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  // FormMesh's groups; null where the scope is the world.
  c10::intrusive_ptr<c10d::ProcessGroupGloo> shard_group_, replicate_group_;
  // Backend "nccl": the world's communicator, and FormMesh's (null where the scope is the
  // world).
  std::unique_ptr<NcclCollectives> nccl_, nccl_shard_, nccl_replicate_;
  int shard_size_;
  const int port_;
  int64_t next_sequence_ = 1;  // of the next command posted or taken
  int64_t current_ = 0;        // the command being run, 0 when none
  // Rank 0: the failure messages of the last command, deleted once every rank has moved on.
  std::vector<std::string> unread_errors_;
  absl::Status broken_;
  int64_t bytes_communicated_ = 0;
  std::atomic<bool> stop_{false};
  std::thread heartbeat_;
};

}  // namespace rlmesh::dist
