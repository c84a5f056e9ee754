// The behaviour every weight-transport backend must show (common/transport/transport.h):
// bit-exact delivery of odd-sized float32/bfloat16 tensors across bucket boundaries, many small
// and a few large tensors, versions in order, a receiver killed mid-transfer (a child process,
// SIGKILL) or stalled that is dropped and reported while the others complete, and a late joiner
// that gets the current version before any new one. Each test uses its own ports (0) and shm
// names (pid-based), so ctest may run them in parallel; nothing asserts on time.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "common/transport/transport_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/transport/conformance_support.h"
#ifdef RLMESH_HAVE_NCCL
#include "common/transport/nccl_transport.h"
#endif

namespace rlmesh::transport::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSeed = 20240611;

// Buffers in the memory space of `backend` for rank `rank` (CUDA device `rank` for NCCL; device
// 0 for every rank of CUDA IPC, whose receivers share the sender's GPU).
std::unique_ptr<Memory> MemoryOf(const std::string& backend, int rank) {
#ifdef RLMESH_HAVE_NCCL
  if (backend == "nccl") return CudaMemory(rank);
  if (backend == "cuda_ipc") return CudaMemory(0);
#else
  (void)backend;
  (void)rank;
#endif
  return HostMemory();
}

struct BackendParam {
  std::string name;
  // Whether a stalled receiver is dropped while the others still get the version. A collective
  // (NCCL) cannot tell which member stalls: the whole attempt times out.
  bool isolates_stalled = true;
};

void PrintTo(const BackendParam& param, std::ostream* os) { *os << param.name; }

class TransportConformanceTest : public ::testing::TestWithParam<BackendParam> {
 protected:
  // Skips (with the reason) unless the backend can run `receivers` receivers here. The GPUs are
  // counted by a child, so that a test can still fork receivers that use CUDA.
  void Require(int receivers) {
    if (GetParam().name == "cuda_ipc") {
#ifdef RLMESH_HAVE_NCCL
      auto devices = VisibleCudaDevicesCountedInAChild();
      if (!devices.ok() || *devices < 1) {
        GTEST_SKIP() << "CUDA IPC backend: no GPU visible"
                     << (devices.ok() ? "" : " (" + devices.status().message() + ")");
      }
#endif
      return;
    }
    if (GetParam().name != "nccl") return;
#ifdef RLMESH_HAVE_NCCL
    auto devices = VisibleCudaDevicesCountedInAChild();
    if (!devices.ok())
      GTEST_SKIP() << "NCCL backend: no GPU visible (" << devices.status().message() << ")";
    if (*devices < receivers + 1) {
      GTEST_SKIP() << "NCCL backend: needs " << receivers + 1 << " GPUs (one per rank), "
                   << *devices << " visible";
    }
#endif
  }

  std::unique_ptr<Memory> MemoryFor(int rank) { return MemoryOf(GetParam().name, rank); }

  std::unique_ptr<WeightSender> Sender(size_t bucket_bytes, Duration timeout = Duration(120)) {
    SenderOptions options;
    options.bucket_bytes = bucket_bytes;
    options.transfer_timeout = timeout;
    options.device = 0;
    auto sender = CreateSender(GetParam().name, options);
    EXPECT_TRUE(sender.ok()) << sender.status().ToString();
    return sender.ok() ? std::move(*sender) : nullptr;
  }

  std::unique_ptr<WeightReceiver> Receiver(const WeightSender& sender, const std::string& name,
                                           int rank, Duration transfer_timeout = Duration(120)) {
    ReceiverOptions options;
    options.endpoint = sender.endpoint();
    options.name = name;
    options.device = GetParam().name == "cuda_ipc" ? 0 : rank;
    options.transfer_timeout = transfer_timeout;
    auto receiver = CreateReceiver(GetParam().name, options);
    EXPECT_TRUE(receiver.ok()) << receiver.status().ToString();
    return receiver.ok() ? std::move(*receiver) : nullptr;
  }

  // Waits until `n` receivers have said hello (the sender counts them on its accept thread).
  static void AwaitReceivers(const WeightSender& sender, int n) {
    while (sender.NumReceivers() < n) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
};

// Receives `versions` on a thread and checks each against the pattern.
class ReceiverThread {
 public:
  ReceiverThread(std::unique_ptr<WeightReceiver> receiver, std::unique_ptr<Memory> memory,
                 const std::vector<TensorMeta>& metas, std::vector<uint64_t> versions)
      : receiver_(std::move(receiver)), memory_(std::move(memory)), sink_(*memory_, metas) {
    thread_ = std::thread([this, versions] {
      for (uint64_t v : versions) {
        auto got = receiver_->ReceiveNext(sink_.Destination(), Duration(120));
        if (!got.ok()) {
          errors_.push_back("version " + std::to_string(v) + ": " + got.status().ToString());
          return;
        }
        received_.push_back(got->version);
        if (got->version != v) continue;
        if (std::string e = sink_.Check(kSeed, v); !e.empty()) errors_.push_back(e);
      }
    });
  }
  ~ReceiverThread() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  const std::vector<std::string>& errors() const { return errors_; }
  const std::vector<uint64_t>& received() const { return received_; }

 private:
  std::unique_ptr<WeightReceiver> receiver_;
  std::unique_ptr<Memory> memory_;
  Sink sink_;
  std::vector<std::string> errors_;
  std::vector<uint64_t> received_;
  std::thread thread_;
};

void ExpectAllOk(const PublishReport& report, int receivers) {
  ASSERT_EQ(report.receivers.size(), static_cast<size_t>(receivers));
  for (const auto& r : report.receivers) EXPECT_TRUE(r.ok) << r.name << ": " << r.error;
}

TEST_P(TransportConformanceTest, OddSizedFloat32AndBfloat16ArriveBitExactAcrossBuckets) {
  Require(2);
  if (IsSkipped()) return;
  auto memory = MemoryFor(0);
  const auto metas = OddTensors();
  // 1000 bytes: not a multiple of any element size or of the layout alignment, so tensors and
  // even single elements straddle bucket edges.
  auto sender = Sender(1000);
  ASSERT_NE(sender, nullptr);
  ReceiverThread a(Receiver(*sender, "a", 1), MemoryFor(1), metas, {1});
  ReceiverThread b(Receiver(*sender, "b", 2), MemoryFor(2), metas, {1});
  AwaitReceivers(*sender, 2);
  SourceVersion source(*memory, metas, kSeed, 1);
  auto report = sender->Publish(1, source.views());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ExpectAllOk(*report, 2);
  size_t payload = 0;
  for (const auto& m : metas) payload += m.NumBytes();
  EXPECT_EQ(report->bytes, payload);
  EXPECT_GT(report->buckets, 10u);
  a.Join();
  b.Join();
  EXPECT_THAT(a.errors(), ::testing::IsEmpty());
  EXPECT_THAT(b.errors(), ::testing::IsEmpty());
}

TEST_P(TransportConformanceTest, ManySmallAndAFewLargeTensors) {
  Require(3);
  if (IsSkipped()) return;
  auto memory = MemoryFor(0);
  const auto metas = ManyTensors(/*small=*/600, /*large=*/3, /*large_bytes=*/3 << 20);
  auto sender = Sender(1 << 20);
  ASSERT_NE(sender, nullptr);
  std::vector<std::unique_ptr<ReceiverThread>> receivers;
  for (int i = 0; i < 3; ++i) {
    receivers.push_back(
        std::make_unique<ReceiverThread>(Receiver(*sender, "r" + std::to_string(i), i + 1),
                                         MemoryFor(i + 1), metas, std::vector<uint64_t>{7}));
  }
  AwaitReceivers(*sender, 3);
  SourceVersion source(*memory, metas, kSeed, 7);
  auto report = sender->Publish(7, source.views());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ExpectAllOk(*report, 3);
  for (auto& r : receivers) {
    r->Join();
    EXPECT_THAT(r->errors(), ::testing::IsEmpty());
  }
}

TEST_P(TransportConformanceTest, VersionsArriveInOrderAndOlderVersionsAreRefused) {
  Require(1);
  if (IsSkipped()) return;
  auto memory = MemoryFor(0);
  const auto metas = OddTensors();
  auto sender = Sender(4096);
  ASSERT_NE(sender, nullptr);
  ReceiverThread r(Receiver(*sender, "r", 1), MemoryFor(1), metas, {1, 2, 5, 9});
  AwaitReceivers(*sender, 1);
  for (uint64_t v : {1, 2, 5, 9}) {
    SourceVersion source(*memory, metas, kSeed, v);
    auto report = sender->Publish(v, source.views());
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    ExpectAllOk(*report, 1);
  }
  SourceVersion stale(*memory, metas, kSeed, 9);
  auto refused = sender->Publish(9, stale.views());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("expected greater than the current 9"));
  r.Join();
  EXPECT_THAT(r.errors(), ::testing::IsEmpty());
  EXPECT_THAT(r.received(), ::testing::ElementsAre(1, 2, 5, 9));
}

TEST_P(TransportConformanceTest, LateJoinerReceivesTheCurrentVersionFirst) {
  Require(2);
  if (IsSkipped()) return;
  auto memory = MemoryFor(0);
  const auto metas = OddTensors();
  auto sender = Sender(2048);
  ASSERT_NE(sender, nullptr);
  ReceiverThread early(Receiver(*sender, "early", 1), MemoryFor(1), metas, {3, 4});
  AwaitReceivers(*sender, 1);
  SourceVersion v3(*memory, metas, kSeed, 3);
  auto first = sender->Publish(3, v3.views());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ExpectAllOk(*first, 1);

  // Joins after version 3 was published: its first version must be 3, without a new Publish.
  auto late_memory = MemoryFor(2);
  Sink late_sink(*late_memory, metas);
  auto late = Receiver(*sender, "late", 2);
  ASSERT_NE(late, nullptr);
  auto caught_up = late->ReceiveNext(late_sink.Destination(), Duration(120));
  ASSERT_TRUE(caught_up.ok()) << caught_up.status().ToString();
  EXPECT_EQ(caught_up->version, 3u);
  EXPECT_EQ(late_sink.Check(kSeed, 3), "");

  SourceVersion v4(*memory, metas, kSeed, 4);
  std::thread publish([&] {
    auto second = sender->Publish(4, v4.views());
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    ExpectAllOk(*second, 2);
  });
  auto next = late->ReceiveNext(late_sink.Destination(), Duration(120));
  publish.join();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->version, 4u);
  EXPECT_EQ(late_sink.Check(kSeed, 4), "");
  early.Join();
  EXPECT_THAT(early.errors(), ::testing::IsEmpty());
}

// A child process that receives versions and checks them itself; it gets the sender's endpoint
// through a pipe because it is forked before the sender exists (no threads at fork time).
class ChildReceiver {
 public:
  enum class Role { kHealthy, kDieMidTransfer };

  ChildReceiver(const BackendParam& backend, Role role, int rank, std::vector<TensorMeta> metas,
                std::vector<uint64_t> versions) {
    int to_child[2], from_child[2];
    if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(to_child[1]);
      ::close(from_child[0]);
      _exit(Run(backend, role, rank, metas, versions, to_child[0], from_child[1]));
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    to_child_ = to_child[1];
    from_child_ = from_child[0];
  }
  ~ChildReceiver() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      Wait();
    }
    ::close(to_child_);
    ::close(from_child_);
  }
  void Start(const std::string& endpoint) {
    const std::string line = endpoint + "\n";
    ASSERT_EQ(::write(to_child_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  }
  // Blocks until the child says it is inside a transfer.
  void AwaitMidTransfer() {
    char c = 0;
    ASSERT_EQ(::read(from_child_, &c, 1), 1);
  }
  void Kill() { ::kill(pid_, SIGKILL); }
  // The exit code (0: every version arrived intact), or 128+signal.
  int Wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  static int Run(const BackendParam& backend, Role role, int rank,
                 const std::vector<TensorMeta>& metas, const std::vector<uint64_t>& versions,
                 int in, int out) {
    std::string endpoint;
    char c;
    while (::read(in, &c, 1) == 1 && c != '\n') endpoint += c;
    ReceiverOptions options;
    options.endpoint = endpoint;
    options.name = role == Role::kHealthy ? "healthy-child" : "doomed-child";
    options.device = backend.name == "cuda_ipc" ? 0 : rank;
    auto receiver = CreateReceiver(backend.name, options);
    if (!receiver.ok()) {
      std::fprintf(stderr, "child: %s\n", receiver.status().ToString().c_str());
      return 2;
    }
    std::unique_ptr<Memory> memory = MemoryOf(backend.name, rank);
    Sink sink(*memory, metas);
    if (role == Role::kDieMidTransfer) {
      // Tell the parent we are inside the transfer, then wait for its SIGKILL.
      auto stall = [&](const TensorMeta&) -> StatusOr<void*> {
        if (::write(out, "x", 1) != 1) _exit(3);
        while (true) ::pause();
      };
      auto never = (*receiver)->ReceiveNext(stall, Duration(120));
      return 4;
    }
    for (uint64_t v : versions) {
      auto got = (*receiver)->ReceiveNext(sink.Destination(), Duration(120));
      if (!got.ok() || got->version != v) {
        std::fprintf(
            stderr, "child: expected version %llu, got %s\n", static_cast<unsigned long long>(v),
            got.ok() ? std::to_string(got->version).c_str() : got.status().ToString().c_str());
        return 5;
      }
      if (std::string e = sink.Check(kSeed, v); !e.empty()) {
        std::fprintf(stderr, "child: %s\n", e.c_str());
        return 6;
      }
    }
    return 0;
  }

  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  bool reaped_ = false;
};

TEST_P(TransportConformanceTest, ReceiverKilledMidTransferIsDroppedAndOthersComplete) {
  Require(2);
  if (IsSkipped()) return;
  const auto metas = ManyTensors(/*small=*/50, /*large=*/2, /*large_bytes=*/1 << 20);
  // Children first: the fork must happen before this process starts any thread.
  ChildReceiver healthy(GetParam(), ChildReceiver::Role::kHealthy, 1, metas, {1, 2});
  ChildReceiver doomed(GetParam(), ChildReceiver::Role::kDieMidTransfer, 2, metas, {});
  auto memory = MemoryFor(0);
  auto sender = Sender(64 << 10);
  ASSERT_NE(sender, nullptr);
  healthy.Start(sender->endpoint());
  doomed.Start(sender->endpoint());
  AwaitReceivers(*sender, 2);

  SourceVersion v1(*memory, metas, kSeed, 1);
  StatusOr<PublishReport> report = InternalError("not run");
  std::thread publish([&] { report = sender->Publish(1, v1.views()); });
  doomed.AwaitMidTransfer();
  doomed.Kill();
  publish.join();
  EXPECT_EQ(doomed.Wait(), 128 + SIGKILL);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->receivers.size(), 2u);
  int dropped = 0;
  for (const auto& r : report->receivers) {
    if (r.name == "doomed-child") {
      EXPECT_FALSE(r.ok);
      EXPECT_THAT(r.error, HasSubstr("connection closed during the transfer of version 1"));
      ++dropped;
    } else {
      EXPECT_TRUE(r.ok) << r.name << ": " << r.error;
    }
  }
  EXPECT_EQ(dropped, 1);
  EXPECT_EQ(sender->NumReceivers(), 1);

  SourceVersion v2(*memory, metas, kSeed, 2);
  auto second = sender->Publish(2, v2.views());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ExpectAllOk(*second, 1);
  EXPECT_EQ(healthy.Wait(), 0);
}

TEST_P(TransportConformanceTest, StalledReceiverIsDroppedAfterTheTimeout) {
  Require(2);
  if (IsSkipped()) return;
  auto memory = MemoryFor(0);
  const auto metas = OddTensors();
  // A short transfer timeout: the stalled receiver never reads, so the publish ends at it.
  auto sender = Sender(1024, Duration(1.0));
  ASSERT_NE(sender, nullptr);
  // Bounded: where the backend cannot isolate the stall (NCCL), this receiver's attempt is
  // abandoned too and it must give up on its own rather than outlive the test.
  ReceiverThread healthy(Receiver(*sender, "healthy", 1, Duration(20)), MemoryFor(1), metas, {1});
  auto stalled = Receiver(*sender, "stalled", 2);  // connected, never calls ReceiveNext
  AwaitReceivers(*sender, 2);
  SourceVersion v1(*memory, metas, kSeed, 1);
  auto report = sender->Publish(1, v1.views());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->receivers.size(), 2u);
  for (const auto& r : report->receivers) {
    if (r.name == "stalled") {
      EXPECT_FALSE(r.ok);
      EXPECT_THAT(r.error, ::testing::AnyOf(HasSubstr("no acknowledgement of version 1"),
                                            HasSubstr("not finished by the deadline")));
    } else if (GetParam().isolates_stalled) {
      EXPECT_TRUE(r.ok) << r.error;
    }
  }
  healthy.Join();
  if (GetParam().isolates_stalled) {
    EXPECT_THAT(healthy.errors(), ::testing::IsEmpty());
    EXPECT_EQ(sender->NumReceivers(), 1);
  }
}

// A receiver the coordinator suspended (it stopped answering) is disconnected before the next
// version: the publish goes to the others at once instead of waiting out the transfer timeout.
TEST_P(TransportConformanceTest, ADisconnectedReceiverDoesNotHoldThePublishUp) {
  Require(2);
  if (IsSkipped()) return;
  auto memory = MemoryFor(0);
  const auto metas = OddTensors();
  // A transfer timeout far beyond the test's: were the stalled receiver still a member, the
  // publish would wait for it.
  auto sender = Sender(1024, Duration(600));
  ASSERT_NE(sender, nullptr);
  ReceiverThread healthy(Receiver(*sender, "healthy", 1), MemoryFor(1), metas, {1});
  auto stalled = Receiver(*sender, "stalled", 2);  // connected, never calls ReceiveNext
  AwaitReceivers(*sender, 2);
  EXPECT_EQ(sender->Disconnect({"stalled", "unknown"}), 1);
  EXPECT_EQ(sender->NumReceivers(), 1);
  SourceVersion v1(*memory, metas, kSeed, 1);
  auto report = sender->Publish(1, v1.views());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ExpectAllOk(*report, 1);
  EXPECT_EQ(report->receivers[0].name, "healthy");
  healthy.Join();
  EXPECT_THAT(healthy.errors(), ::testing::IsEmpty());
  // The disconnected receiver finds its subscription closed.
  auto stalled_memory = MemoryFor(2);
  Sink sink(*stalled_memory, metas);
  auto got = stalled->ReceiveNext(sink.Destination(), Duration(5));
  EXPECT_FALSE(got.ok());
}

// A receiver given up on for the version in transfer (the trainer's BEGIN call to it failed)
// is dropped from that transfer at once rather than after the transfer timeout; a request for
// an older version is void.
TEST_P(TransportConformanceTest, AnAbandonedReceiverIsDroppedFromTheTransferInProgress) {
  Require(2);
  if (IsSkipped()) return;
  if (!GetParam().isolates_stalled) return;  // NCCL's broadcast waits for every rank
  auto memory = MemoryFor(0);
  const auto metas = OddTensors();
  auto sender = Sender(1024, Duration(600));
  ASSERT_NE(sender, nullptr);
  ReceiverThread healthy(Receiver(*sender, "healthy", 1), MemoryFor(1), metas, {1, 2});
  auto stalled = Receiver(*sender, "stalled", 2);  // connected, never calls ReceiveNext
  AwaitReceivers(*sender, 2);
  sender->Abandon("stalled", 0, "void: an older version");
  sender->Abandon("stalled", 1, "its BEGIN call failed");
  SourceVersion v1(*memory, metas, kSeed, 1);
  auto report = sender->Publish(1, v1.views());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->receivers.size(), 2u);
  for (const auto& r : report->receivers) {
    if (r.name == "stalled") {
      EXPECT_FALSE(r.ok);
      EXPECT_THAT(r.error, HasSubstr("given up on: its BEGIN call failed"));
    } else {
      EXPECT_TRUE(r.ok) << r.error;
    }
  }
  EXPECT_EQ(sender->NumReceivers(), 1);
  // Given up on in version 1, the replica comes back under the same name: it is caught up to
  // version 1 like any joiner and stays subscribed (the abandon applied to that Publish only).
  stalled.reset();
  auto back_memory = MemoryFor(2);
  Sink back_sink(*back_memory, metas);
  auto back = Receiver(*sender, "stalled", 2);
  ASSERT_NE(back, nullptr);
  auto caught_up = back->ReceiveNext(back_sink.Destination(), Duration(120));
  ASSERT_TRUE(caught_up.ok()) << caught_up.status().ToString();
  EXPECT_EQ(caught_up->version, 1u);
  SourceVersion v2(*memory, metas, kSeed, 2);
  StatusOr<PublishReport> second = InternalError("not run");
  std::thread publish([&] { second = sender->Publish(2, v2.views()); });
  auto next = back->ReceiveNext(back_sink.Destination(), Duration(120));
  publish.join();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->version, 2u);
  EXPECT_EQ(back_sink.Check(kSeed, 2), "");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ExpectAllOk(*second, 2);
  healthy.Join();
  EXPECT_THAT(healthy.errors(), ::testing::IsEmpty());
}

TEST_P(TransportConformanceTest, UnknownTensorFailsOnlyThatReceiverAndItStaysSubscribed) {
  Require(1);
  if (IsSkipped()) return;
  auto memory = MemoryFor(0);
  const auto metas = OddTensors();
  auto sender = Sender(4096);
  ASSERT_NE(sender, nullptr);
  // This receiver expects one tensor fewer, so the version's last tensor is unknown to it.
  std::vector<TensorMeta> fewer(metas.begin(), metas.end() - 1);
  auto rmem = MemoryFor(1);
  Sink sink(*rmem, fewer);
  auto receiver = Receiver(*sender, "picky", 1);
  ASSERT_NE(receiver, nullptr);
  AwaitReceivers(*sender, 1);
  SourceVersion v1(*memory, metas, kSeed, 1);
  StatusOr<PublishReport> report = InternalError("not run");
  std::thread publish([&] { report = sender->Publish(1, v1.views()); });
  auto got = receiver->ReceiveNext(sink.Destination(), Duration(120));
  publish.join();
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("tensor \"lm_head.weight\": not expected here"));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->receivers.size(), 1u);
  EXPECT_FALSE(report->receivers[0].ok);
  EXPECT_THAT(report->receivers[0].error, HasSubstr("lm_head.weight"));
  EXPECT_EQ(sender->NumReceivers(), 1);
}

std::vector<BackendParam> Backends() {
  std::vector<BackendParam> backends = {{"shm", true}, {"tcp", true}};
#ifdef RLMESH_HAVE_NCCL
  backends.push_back({"nccl", false});
#endif
#ifdef RLMESH_HAVE_CUDA_IPC
  // Receivers in the test's own process copy from the sender's pointers (CUDA cannot open an
  // IPC handle in the process that made it); cuda_ipc_gpu_test maps them across processes.
  backends.push_back({"cuda_ipc", true});
#endif
  return backends;
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportConformanceTest, ::testing::ValuesIn(Backends()),
                         [](const ::testing::TestParamInfo<BackendParam>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace rlmesh::transport::testing
