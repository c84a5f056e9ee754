// The TCP chain's own failure cases (common/transport/tcp_chain.h), which the conformance
// suite cannot reach because there a receiver fails before it is chained: a receiver in the
// middle of a chain that stops reading, or vanishes, after the bytes started flowing; and the
// "shm" backend's receivers choosing the chain by themselves when they cannot map the
// sender's segment (a child process with its own /dev/shm, as in another pod). The receivers
// in the middle are played by a fake member that speaks the protocol by hand, so where it
// stops is certain, not a matter of timing.
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "common/transport/control_channel.h"
#include "common/transport/transport_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/transport/conformance_support.h"

namespace rlmesh::transport::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSeed = 20261206;

Clock::time_point In(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(Duration(seconds));
}

// A chain member that says READY and then misbehaves in a chosen way.
class FakeMember {
 public:
  enum class Role {
    kNeverReads,    // its data connection is never accepted: the bytes pile up, then stop
    kVanishesAfter  // reads `bytes` of its data connection, then closes every connection
  };
  FakeMember(const std::string& endpoint, const std::string& name, Role role, size_t bytes)
      : role_(role), bytes_(bytes) {
    auto control = Connection::Dial(endpoint, Duration(10));
    EXPECT_TRUE(control.ok()) << control.status().ToString();
    control_ = std::move(*control);
    EXPECT_TRUE(control_->Send(MessageType::kHello, name, In(10)).ok());
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeMember() {
    if (thread_.joinable()) thread_.join();
  }
  void Join() { thread_.join(); }
  const std::string& error() const { return error_; }

 private:
  void Run() {
    auto manifest = control_->Receive(In(60));
    if (!manifest.ok() || manifest->type != MessageType::kManifest) {
      error_ = "no manifest";
      return;
    }
    auto listener = Listener::Listen("127.0.0.1", 0);
    if (!listener.ok()) {
      error_ = listener.status().ToString();
      return;
    }
    listener_ = std::move(*listener);
    if (!control_->Send(MessageType::kReady, listener_->endpoint(), In(10)).ok()) {
      error_ = "READY not sent";
      return;
    }
    if (role_ == Role::kNeverReads) {
      // Keep the control connection open (not dead, just stuck) until the sender drops it.
      while (true) {
        auto message = control_->Receive(In(60));
        if (!message.ok()) return;
      }
    }
    auto data = listener_->Accept(Duration(60));
    if (!data.ok()) {
      error_ = "no data connection: " + data.status().ToString();
      return;
    }
    std::vector<char> bytes(16 + bytes_);
    if (!(*data)->ReadAll(bytes.data(), bytes.size(), In(60)).ok()) error_ = "short read";
    data->reset();
    listener_.reset();
    control_.reset();  // vanishes mid-transfer, as a killed process would
  }

  Role role_;
  size_t bytes_;
  std::unique_ptr<Connection> control_;
  std::unique_ptr<Listener> listener_;
  std::string error_;
  std::thread thread_;
};

std::unique_ptr<WeightSender> TcpSender(Duration stall) {
  SenderOptions options;
  options.bucket_bytes = 1 << 20;
  options.transfer_timeout = Duration(120);
  options.handshake_timeout = stall;
  auto sender = CreateSender("tcp", options);
  EXPECT_TRUE(sender.ok()) << sender.status().ToString();
  return sender.ok() ? std::move(*sender) : nullptr;
}

std::unique_ptr<WeightReceiver> TcpReceiver(const WeightSender& sender, const std::string& name,
                                            Duration stall) {
  ReceiverOptions options;
  options.endpoint = sender.endpoint();
  options.name = name;
  options.connect_timeout = stall;  // also bounds how long it waits on a stuck next receiver
  auto receiver = CreateReceiver("tcp", options);
  EXPECT_TRUE(receiver.ok()) << receiver.status().ToString();
  return receiver.ok() ? std::move(*receiver) : nullptr;
}

void AwaitReceivers(const WeightSender& sender, int n) {
  while (sender.NumReceivers() < n) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// Receives one version on a thread.
struct Received {
  std::unique_ptr<Memory> memory = HostMemory();
  std::unique_ptr<Sink> sink;
  StatusOr<ReceivedVersion> got = InternalError("not run");
  std::thread thread;
  Received(WeightReceiver* receiver, const std::vector<TensorMeta>& metas)
      : sink(std::make_unique<Sink>(*memory, metas)) {
    thread = std::thread(
        [this, receiver] { got = receiver->ReceiveNext(sink->Destination(), Duration(120)); });
  }
  ~Received() {
    if (thread.joinable()) thread.join();
  }
};

// 64 MiB: more than loopback sockets buffer, so a member that stops reading stops the bytes.
std::vector<TensorMeta> BigVersion() { return ManyTensors(/*small=*/5, /*large=*/4, 16 << 20); }

const ReceiverOutcome& Outcome(const PublishReport& report, const std::string& name) {
  for (const auto& r : report.receivers)
    if (r.name == name) return r;
  static const ReceiverOutcome none{"<missing>", false, "not in the report"};
  return none;
}

TEST(TcpChainTest, AMemberThatStopsReadingIsDroppedAndTheOnesAfterItAreChainedAgain) {
  const auto metas = BigVersion();
  auto sender = TcpSender(Duration(1));
  ASSERT_NE(sender, nullptr);
  // Join order is chain order: first -> stuck -> last.
  auto first = TcpReceiver(*sender, "first", Duration(1));
  AwaitReceivers(*sender, 1);
  FakeMember stuck(sender->endpoint(), "stuck", FakeMember::Role::kNeverReads, 0);
  AwaitReceivers(*sender, 2);
  auto last = TcpReceiver(*sender, "last", Duration(1));
  AwaitReceivers(*sender, 3);
  Received a(first.get(), metas), c(last.get(), metas);
  auto source_memory = HostMemory();
  SourceVersion source(*source_memory, metas, kSeed, 1);
  auto report = sender->Publish(1, source.views());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_THAT(Outcome(*report, "stuck").error,
              HasSubstr("stopped taking the bytes of version 1 from \"first\""));
  EXPECT_FALSE(Outcome(*report, "stuck").ok);
  EXPECT_TRUE(Outcome(*report, "first").ok) << Outcome(*report, "first").error;
  EXPECT_TRUE(Outcome(*report, "last").ok) << Outcome(*report, "last").error;
  a.thread.join();
  c.thread.join();
  ASSERT_TRUE(a.got.ok()) << a.got.status().ToString();
  ASSERT_TRUE(c.got.ok()) << c.got.status().ToString();
  EXPECT_EQ(a.got->path, "tcp");
  EXPECT_EQ(a.sink->Check(kSeed, 1), "");
  EXPECT_EQ(c.sink->Check(kSeed, 1), "");
  EXPECT_EQ(sender->NumReceivers(), 2);
  stuck.Join();
}

TEST(TcpChainTest, AMemberThatVanishesMidTransferIsDroppedAndTheOnesAfterItAreChainedAgain) {
  const auto metas = BigVersion();
  auto sender = TcpSender(Duration(10));
  ASSERT_NE(sender, nullptr);
  auto first = TcpReceiver(*sender, "first", Duration(10));
  AwaitReceivers(*sender, 1);
  FakeMember gone(sender->endpoint(), "gone", FakeMember::Role::kVanishesAfter, 3 << 20);
  AwaitReceivers(*sender, 2);
  auto last = TcpReceiver(*sender, "last", Duration(10));
  AwaitReceivers(*sender, 3);
  Received a(first.get(), metas), c(last.get(), metas);
  auto source_memory = HostMemory();
  SourceVersion source(*source_memory, metas, kSeed, 2);
  auto report = sender->Publish(2, source.views());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_FALSE(Outcome(*report, "gone").ok);
  // Whichever the sender hears first: the closed control connection or the upstream's report.
  EXPECT_THAT(Outcome(*report, "gone").error,
              ::testing::AnyOf(HasSubstr("connection closed during the transfer of version 2"),
                               HasSubstr("stopped taking the bytes of version 2 from \"first\"")));
  EXPECT_TRUE(Outcome(*report, "first").ok) << Outcome(*report, "first").error;
  EXPECT_TRUE(Outcome(*report, "last").ok) << Outcome(*report, "last").error;
  a.thread.join();
  c.thread.join();
  ASSERT_TRUE(a.got.ok()) << a.got.status().ToString();
  ASSERT_TRUE(c.got.ok()) << c.got.status().ToString();
  EXPECT_EQ(a.sink->Check(kSeed, 2), "");
  EXPECT_EQ(c.sink->Check(kSeed, 2), "");
  gone.Join();
  EXPECT_EQ(gone.error(), "");

  // The next version goes down the shorter chain.
  Received a3(first.get(), metas), c3(last.get(), metas);
  auto v3_memory = HostMemory();
  SourceVersion v3(*v3_memory, metas, kSeed, 3);
  auto next = sender->Publish(3, v3.views());
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  ASSERT_EQ(next->receivers.size(), 2u);
  EXPECT_EQ(next->dropped(), 0);
  a3.thread.join();
  c3.thread.join();
  EXPECT_EQ(a3.sink->Check(kSeed, 3), "");
  EXPECT_EQ(c3.sink->Check(kSeed, 3), "");
}

// A "shm" receiver that cannot map the sender's segment (here: a child with its own /dev/shm,
// as a pod on the same node has) takes the version over the chain by itself; one that can
// keeps copying from shared memory. Exit codes: 0 = arrived intact over "tcp".
int ChildWithItsOwnDevShm(int in, const std::vector<TensorMeta>& metas) {
  if (::unshare(CLONE_NEWNS) != 0 ||
      ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
    return 10;
  }
  std::string endpoint;
  char ch;
  while (::read(in, &ch, 1) == 1 && ch != '\n') endpoint += ch;
  ReceiverOptions options;
  options.endpoint = endpoint;
  options.name = "other-pod";
  auto receiver = CreateReceiver("shm", options);
  if (!receiver.ok()) return 2;
  auto memory = HostMemory();
  Sink sink(*memory, metas);
  // Two versions: whatever the first leaves on the control connection must not upset the next.
  for (uint64_t v : {4, 5}) {
    auto got = (*receiver)->ReceiveNext(sink.Destination(), Duration(120));
    if (!got.ok()) {
      std::fprintf(stderr, "child: %s\n", got.status().ToString().c_str());
      return 3;
    }
    if (std::string e = sink.Check(kSeed, v); !e.empty()) {
      std::fprintf(stderr, "child: %s\n", e.c_str());
      return 4;
    }
    if (got->path != "tcp") return 5;
  }
  return 0;
}

// Whether this process may give a child its own /dev/shm (asked in a throwaway child).
bool CanMountPrivateDevShm() {
  const pid_t probe = ::fork();
  if (probe == 0) {
    _exit(::unshare(CLONE_NEWNS) == 0 &&
                  ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
                  ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") == 0
              ? 0
              : 1);
  }
  int status = 0;
  ::waitpid(probe, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(TcpChainTest, AShmReceiverThatCannotMapTheSegmentTakesTheChain) {
  if (!CanMountPrivateDevShm()) {
    GTEST_SKIP() << "needs a private mount namespace (unshare(CLONE_NEWNS) and a tmpfs mount: "
                    "root or CAP_SYS_ADMIN)";
  }
  const auto metas = ManyTensors(/*small=*/20, /*large=*/2, 1 << 20);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  // Forked before any thread of this test starts.
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[1]);
    _exit(ChildWithItsOwnDevShm(pipe_fds[0], metas));
  }
  ::close(pipe_fds[0]);
  SenderOptions options;
  options.bucket_bytes = 256 << 10;
  auto sender = CreateSender("shm", options);
  ASSERT_TRUE(sender.ok()) << sender.status().ToString();
  ReceiverOptions local_options;
  local_options.endpoint = (*sender)->endpoint();
  local_options.name = "same-host";
  auto local = CreateReceiver("shm", local_options);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  const std::string line = (*sender)->endpoint() + "\n";
  ASSERT_EQ(::write(pipe_fds[1], line.data(), line.size()), static_cast<ssize_t>(line.size()));
  ::close(pipe_fds[1]);
  AwaitReceivers(**sender, 2);
  auto source_memory = HostMemory();
  for (uint64_t v : {4, 5}) {
    Received here(local->get(), metas);
    SourceVersion source(*source_memory, metas, kSeed, v);
    auto report = (*sender)->Publish(v, source.views());
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(report->dropped(), 0) << "version " << v;
    here.thread.join();
    ASSERT_TRUE(here.got.ok()) << here.got.status().ToString();
    EXPECT_EQ(here.got->path, "shm");
    EXPECT_EQ(here.sink->Check(kSeed, v), "");
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  EXPECT_EQ(code, 0) << "see the child's message above";
}

TEST(ReachableEndpointTest, AWildcardHostBecomesTheCallersAddress) {
  EXPECT_EQ(ReachableEndpoint("0.0.0.0:4000", "ipv4:10.1.2.3:5555"), "10.1.2.3:4000");
  EXPECT_EQ(ReachableEndpoint("[::]:4000", "ipv6:%5Bfd00::7%5D:5555"), "[fd00::7]:4000");
  EXPECT_EQ(ReachableEndpoint(":4000", "ipv4:10.1.2.3:5555"), "10.1.2.3:4000");
  // Named hosts and non-IP callers stay as they are.
  EXPECT_EQ(ReachableEndpoint("trainer-0.rlmesh:4000", "ipv4:10.1.2.3:5555"),
            "trainer-0.rlmesh:4000");
  EXPECT_EQ(ReachableEndpoint("10.0.0.9:4000", "ipv4:10.1.2.3:5555"), "10.0.0.9:4000");
  EXPECT_EQ(ReachableEndpoint("0.0.0.0:4000", "unix:/tmp/s"), "0.0.0.0:4000");
}

}  // namespace
}  // namespace rlmesh::transport::testing
