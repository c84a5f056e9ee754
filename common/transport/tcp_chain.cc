#include "common/transport/tcp_chain.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

namespace rlmesh::transport {

namespace {

constexpr uint64_t kNoNext = std::numeric_limits<uint64_t>::max();
constexpr size_t kMaxIov = 512;
// A write to a data connection hands the kernel at most this much at once, so the sender
// between two writes can notice a receiver that stopped reading.
constexpr size_t kWriteChunk = 4 << 20;
// A receiver wakes for its upstream once this much has arrived (SO_RCVLOWAT), not for every
// segment: fewer, larger copies.
constexpr int kLowWater = 1 << 20;

Clock::time_point After(Duration d) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(d);
}

int MillisUntil(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 1000));
}

std::string Seconds(Duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", d.count());
  return text;
}

std::string DataHeader(uint64_t version, uint64_t round) {
  std::string header;
  AppendU64(&header, version);
  AppendU64(&header, round);
  return header;
}

// sendmsg/recvmsg of an iovec list without blocking: bytes moved, 0 on EOF (recv), -1 with
// errno (EAGAIN when nothing could move now).
ssize_t SendIov(int fd, std::vector<iovec>& iov) {
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = iov.size();
  ssize_t n;
  do {
    n = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

ssize_t RecvIov(int fd, std::vector<iovec>& iov) {
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = iov.size();
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  return n;
}

bool WouldBlock() { return errno == EAGAIN || errno == EWOULDBLOCK; }

}  // namespace

WireMap::WireMap(const Layout& layout) : layout_(layout) {
  start_.reserve(layout.tensors.size());
  for (const auto& t : layout.tensors) {
    start_.push_back(total_);
    total_ += t.NumBytes();
  }
}

size_t WireMap::WireEnd(size_t flat_end) const {
  const auto& offsets = layout_.offsets;
  auto it = std::upper_bound(offsets.begin(), offsets.end(), flat_end);
  if (it == offsets.begin()) return 0;
  const size_t i = static_cast<size_t>(it - offsets.begin()) - 1;
  return start_[i] + std::min(flat_end - offsets[i], layout_.tensors[i].NumBytes());
}

void WireMap::Iov(size_t begin, size_t end, const std::vector<char*>& ptrs,
                  std::vector<iovec>* out) const {
  out->clear();
  auto it = std::upper_bound(start_.begin(), start_.end(), begin);
  size_t i = it == start_.begin() ? 0 : static_cast<size_t>(it - start_.begin()) - 1;
  for (; i < start_.size() && begin < end && out->size() < kMaxIov; ++i) {
    const size_t t_end = start_[i] + layout_.tensors[i].NumBytes();
    if (t_end <= begin) continue;
    const size_t hi = std::min(end, t_end);
    out->push_back(iovec{ptrs[i] + (begin - start_[i]), hi - begin});
    begin = hi;
  }
}

ChainDistributor::ChainDistributor(SenderHub& hub, Transfer& transfer, const Layout& layout,
                                   std::vector<char*> ptrs, Duration stall)
    : hub_(hub),
      transfer_(transfer),
      layout_(layout),
      wire_(layout),
      ptrs_(std::move(ptrs)),
      stall_(stall),
      states_(transfer.members.size()) {}

ChainDistributor::~ChainDistributor() = default;

bool ChainDistributor::Done() const {
  for (const auto& m : transfer_.members)
    if (!m.failed && !m.acked) return false;
  return true;
}

void ChainDistributor::Fail(size_t i, std::string error, bool drop) {
  Transfer::Member& m = transfer_.members[i];
  if (m.failed || m.acked) return;
  transfer_.Fail(m, std::move(error), drop);
  Rechain(i);
}

void ChainDistributor::Rechain(size_t i) {
  // The members after it in its round starve: they are chained again from the sender's copy.
  const uint64_t r = states_[i].round;
  states_[i].round = 0;
  if (r == 0) return;
  const auto& chain = rounds_[r - 1].chain;
  auto at = std::find(chain.begin(), chain.end(), i);
  for (auto next = at == chain.end() ? at : at + 1; next != chain.end(); ++next) {
    const size_t j = *next;
    if (states_[j].round != r || transfer_.members[j].failed || transfer_.members[j].acked)
      continue;
    states_[j].round = 0;
    queue_.push_back(j);
  }
  if (!chain.empty() && chain.front() == i) rounds_[r - 1].head.reset();
}

void ChainDistributor::Handle(size_t i, const Message& message) {
  const std::string v = std::to_string(transfer_.version);
  switch (message.type) {
    case MessageType::kReady:
      if (states_[i].reported) return Fail(i, "said READY twice for version " + v, true);
      states_[i].reported = true;
      states_[i].endpoint = message.payload;
      if (!message.payload.empty()) queue_.push_back(i);
      return;
    case MessageType::kDownstreamLost: {
      uint64_t round = 0, next = 0;
      if (!ReadU64(message.payload, 0, &round) || !ReadU64(message.payload, 8, &next))
        return Fail(i, "a malformed DOWNSTREAM_LOST message", true);
      if (next >= states_.size() || states_[next].round != round) return;  // an older round's
      return Fail(next,
                  "stopped taking the bytes of version " + v + " from \"" +
                      transfer_.members[i].peer->name + "\": " + message.payload.substr(16),
                  true);
    }
    case MessageType::kAck: {
      auto ack = DecodeAck(message.payload);
      if (!ack.ok()) return Fail(i, ack.status().message(), true);
      if (ack->first != transfer_.version) {
        return Fail(i, "acknowledged version " + std::to_string(ack->first) + ", expected " + v,
                    true);
      }
      if (!ack->second.ok()) return Fail(i, "receiver error: " + ack->second.message(), false);
      transfer_.members[i].acked = true;
      states_[i].round = 0;
      return;
    }
    default:
      return Fail(i,
                  "expected READY, DOWNSTREAM_LOST or an acknowledgement, got message type " +
                      std::to_string(static_cast<uint32_t>(message.type)),
                  true);
  }
}

void ChainDistributor::Poll(int timeout_ms) {
  {
    // Members the caller gave up on (WeightSender::Abandon) leave their round like dead ones.
    std::vector<bool> before;
    for (const auto& m : transfer_.members) before.push_back(m.failed);
    hub_.ApplyAbandoned(transfer_);
    for (size_t i = 0; i < before.size(); ++i)
      if (!before[i] && transfer_.members[i].failed) Rechain(i);
  }
  std::vector<pollfd> fds;
  std::vector<size_t> who;
  for (size_t i = 0; i < transfer_.members.size(); ++i) {
    const auto& m = transfer_.members[i];
    if (m.failed || m.acked) continue;
    fds.push_back({m.peer->connection->fd(), POLLIN, 0});
    who.push_back(i);
  }
  if (fds.empty()) return;
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  for (size_t k = 0; k < fds.size(); ++k) {
    if (fds[k].revents == 0) continue;
    const size_t i = who[k];
    if (transfer_.members[i].failed) continue;
    auto message = transfer_.members[i].peer->connection->Receive(After(stall_));
    if (!message.ok()) {
      const bool closed = message.status().code() == Code::kUnavailable;
      Fail(i,
           closed ? "connection closed during the transfer of version " +
                        std::to_string(transfer_.version) + " (receiver process gone?)"
                  : message.status().message(),
           true);
      continue;
    }
    Handle(i, *message);
  }
}

void ChainDistributor::StartRound() {
  Round round;
  round.id = rounds_.size() + 1;
  // In the order the receivers joined: a stable chain from version to version.
  std::sort(queue_.begin(), queue_.end());
  queue_.erase(std::unique(queue_.begin(), queue_.end()), queue_.end());
  for (size_t i : queue_) {
    if (!transfer_.members[i].failed && !transfer_.members[i].acked) round.chain.push_back(i);
  }
  queue_.clear();
  if (round.chain.empty()) return;
  for (size_t i : round.chain) states_[i].round = round.id;
  rounds_.push_back(std::move(round));
  Round& r = rounds_.back();
  const std::vector<size_t> chain = r.chain;
  for (size_t k = 0; k < chain.size(); ++k) {
    std::string payload;
    AppendU64(&payload, r.id);
    AppendU64(&payload, k + 1 < chain.size() ? chain[k + 1] : kNoNext);
    if (k + 1 < chain.size()) payload += states_[chain[k + 1]].endpoint;
    Status sent = transfer_.members[chain[k]].peer->connection->Send(MessageType::kChain, payload,
                                                                     After(stall_));
    if (!sent.ok()) {
      Fail(chain[k],
           "connection closed during the transfer of version " + std::to_string(transfer_.version) +
               " (receiver process gone?): " + sent.message(),
           true);
    }
  }
  const size_t head = chain.front();
  if (states_[head].round != r.id) return;  // failed above; the rest were queued again
  auto dialed = Connection::Dial(states_[head].endpoint, stall_);
  Status status = dialed.status();
  if (status.ok()) {
    status = (*dialed)->WriteAll(DataHeader(transfer_.version, r.id).data(), 16, After(stall_));
  }
  if (!status.ok()) {
    return Fail(head,
                "its data endpoint " + states_[head].endpoint +
                    " cannot be reached from the sender: " + status.message(),
                false);
  }
  r.head = std::move(*dialed);
}

void ChainDistributor::Pump() {
  if (rounds_.empty()) return;
  Round& r = rounds_.back();
  std::vector<iovec> iov;
  while (r.head && r.sent < available_) {
    wire_.Iov(r.sent, std::min(available_, r.sent + kWriteChunk), ptrs_, &iov);
    const ssize_t n = SendIov(r.head->fd(), iov);
    if (n > 0) {
      r.sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && WouldBlock()) {
      pollfd p{r.head->fd(), POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(stall_.count() * 1000) + 1) > 0) continue;
      Fail(r.chain.front(),
           "took no bytes of version " + std::to_string(transfer_.version) + " for " +
               Seconds(stall_) + " (receiver stalled?)",
           true);
      return;
    }
    Fail(r.chain.front(),
         "connection closed during the transfer of version " + std::to_string(transfer_.version) +
             " (receiver process gone?): " + std::strerror(errno),
         true);
    return;
  }
  if (r.head && r.sent == wire_.total()) r.head.reset();  // all written: EOF after the bytes
}

void ChainDistributor::Advance(size_t flat_end) {
  available_ = wire_.WireEnd(flat_end);
  Poll(0);
  if (rounds_.empty()) {
    // The first round waits until every member has said how it receives, so that one round
    // carries them all; a member that stays silent is served at Finish().
    for (size_t i = 0; i < transfer_.members.size(); ++i) {
      const auto& m = transfer_.members[i];
      if (!m.failed && !m.acked && !states_[i].reported) return;
    }
    if (queue_.empty()) return;
    StartRound();
  }
  Pump();
}

void ChainDistributor::FailRemainingAtDeadline() {
  for (size_t i = 0; i < transfer_.members.size(); ++i) {
    const auto& m = transfer_.members[i];
    if (m.failed || m.acked) continue;
    Fail(i,
         states_[i].reported
             ? "version " + std::to_string(transfer_.version) + " not finished by the deadline (" +
                   Seconds(hub_.options().transfer_timeout) + ")"
             : "no acknowledgement of version " + std::to_string(transfer_.version) + " within " +
                   Seconds(hub_.options().transfer_timeout) + " (receiver stalled?)",
         true);
  }
}

void ChainDistributor::Finish() {
  available_ = wire_.total();
  Pump();
  while (!Done()) {
    if (Clock::now() >= transfer_.deadline) return FailRemainingAtDeadline();
    if (!queue_.empty()) {
      StartRound();
      Pump();
      continue;
    }
    Poll(MillisUntil(transfer_.deadline));
  }
}

StatusOr<std::unique_ptr<Listener>> ListenForChain(const Connection& control) {
  return Listener::Listen(control.LocalHost(), 0);
}

namespace {

// The receiving end of one version through the chain.
class ChainReceiver {
 public:
  ChainReceiver(Connection& control, Listener& listener, const Manifest& manifest,
                const std::vector<char*>& ptrs, Clock::time_point deadline, Duration stall)
      : control_(control),
        listener_(listener),
        manifest_(manifest),
        wire_(manifest.layout),
        ptrs_(ptrs),
        deadline_(deadline),
        stall_(stall) {}

  Status Run() {
    TRANSPORT_RETURN_IF_ERROR(control_.Send(MessageType::kReady, listener_.endpoint(), deadline_));
    std::vector<iovec> iov;
    auto progress = Clock::now();  // of the downstream, while it has bytes to take
    while (!(round_ != 0 && received_ == wire_.total() && (!down_ || forwarded_ == received_))) {
      if (!down_ || forwarded_ == received_) progress = Clock::now();
      if (Clock::now() >= deadline_) {
        return DeadlineExceededError("version " + std::to_string(manifest_.version) +
                                     " not complete by the deadline through the TCP chain");
      }
      std::vector<pollfd> fds;
      fds.push_back({control_.fd(), POLLIN, 0});
      const bool accepting = round_ != 0 && !up_;
      if (accepting) fds.push_back({listener_.fd(), POLLIN, 0});
      if (up_ && received_ < wire_.total()) fds.push_back({up_->fd(), POLLIN, 0});
      if (down_ && forwarded_ < received_) fds.push_back({down_->fd(), POLLOUT, 0});
      auto wake = deadline_;
      if (down_ && forwarded_ < received_)
        wake = std::min(wake, progress + std::chrono::duration_cast<Clock::duration>(stall_));
      ::poll(fds.data(), fds.size(), MillisUntil(wake));

      if (fds[0].revents != 0) TRANSPORT_RETURN_IF_ERROR(OnControl());
      if (accepting && fds[1].revents != 0) Accept();
      if (up_ && received_ < wire_.total()) {
        if (low_water_ != 0 && wire_.total() - received_ < static_cast<size_t>(low_water_))
          SetLowWater(1);  // the tail of the version: wake for every byte
        wire_.Iov(received_, wire_.total(), ptrs_, &iov);
        const ssize_t n = RecvIov(up_->fd(), iov);
        if (n > 0) {
          received_ += static_cast<size_t>(n);
        } else if (n == 0 || !WouldBlock()) {
          up_.reset();  // the upstream is gone: the sender will chain this receiver again
        }
      }
      if (down_ && forwarded_ < received_) {
        wire_.Iov(forwarded_, received_, ptrs_, &iov);
        const ssize_t n = SendIov(down_->fd(), iov);
        if (n > 0) {
          forwarded_ += static_cast<size_t>(n);
          progress = Clock::now();
        } else if (n < 0 && !WouldBlock()) {
          TRANSPORT_RETURN_IF_ERROR(
              LoseDownstream(std::string("its connection broke: ") + std::strerror(errno)));
        } else if (Clock::now() - progress >= stall_) {
          TRANSPORT_RETURN_IF_ERROR(
              LoseDownstream("took no bytes for " + Seconds(stall_) + " (receiver stalled?)"));
        }
      }
    }
    return OkStatus();
  }

 private:
  Status OnControl() {
    TRANSPORT_ASSIGN_OR_RETURN(Message message, control_.Receive(deadline_));
    switch (message.type) {
      case MessageType::kBucketsReady:
        return OkStatus();  // for receivers of the shared memory
      case MessageType::kAbort:
        return AbortedError("the sender abandoned version " + std::to_string(manifest_.version));
      case MessageType::kChain:
        break;
      default:
        return InvalidArgumentError("expected CHAIN, got message type " +
                                    std::to_string(static_cast<uint32_t>(message.type)));
    }
    uint64_t round = 0, next = 0;
    if (!ReadU64(message.payload, 0, &round) || !ReadU64(message.payload, 8, &next))
      return InvalidArgumentError("a malformed CHAIN message");
    // A new round starts the version over, from a new upstream to a new downstream.
    round_ = round;
    next_ = next;
    up_.reset();
    down_.reset();
    received_ = forwarded_ = 0;
    if (pending_ && pending_round_ == round) Upstream(std::move(pending_));
    pending_.reset();
    if (next == kNoNext) return OkStatus();
    const std::string endpoint = message.payload.substr(16);
    auto dialed = Connection::Dial(endpoint, stall_);
    Status status = dialed.status();
    if (status.ok()) {
      status = (*dialed)->WriteAll(DataHeader(manifest_.version, round).data(), 16,
                                   Clock::now() + std::chrono::seconds(1) +
                                       std::chrono::duration_cast<Clock::duration>(stall_));
    }
    if (!status.ok()) return LoseDownstream("cannot reach " + endpoint + ": " + status.message());
    down_ = std::move(*dialed);
    return OkStatus();
  }

  // Sets SO_RCVLOWAT of the upstream connection (0 = unset).
  void SetLowWater(int bytes) {
    ::setsockopt(up_->fd(), SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof(bytes));
    low_water_ = bytes == 1 ? 0 : bytes;
  }
  void Upstream(std::unique_ptr<Connection> connection) {
    up_ = std::move(connection);
    SetLowWater(kLowWater);
  }

  void Accept() {
    auto connection = listener_.Accept(Duration(0));
    if (!connection.ok()) return;
    char header[16];
    if (!(*connection)->ReadAll(header, sizeof(header), After(stall_)).ok()) return;
    const std::string h(header, sizeof(header));
    uint64_t version = 0, round = 0;
    ReadU64(h, 0, &version);
    ReadU64(h, 8, &round);
    if (version != manifest_.version || round < round_) return;  // an older transfer's
    if (round == round_) {
      Upstream(std::move(*connection));
    } else {
      pending_ = std::move(*connection);  // its CHAIN has not been read yet
      pending_round_ = round;
    }
  }

  Status LoseDownstream(const std::string& why) {
    down_.reset();
    std::string payload;
    AppendU64(&payload, round_);
    AppendU64(&payload, next_);
    payload += why;
    return control_.Send(MessageType::kDownstreamLost, payload, deadline_);
  }

  Connection& control_;
  Listener& listener_;
  const Manifest& manifest_;
  WireMap wire_;
  const std::vector<char*>& ptrs_;
  const Clock::time_point deadline_;
  const Duration stall_;
  uint64_t round_ = 0;
  uint64_t next_ = kNoNext;
  std::unique_ptr<Connection> up_, down_, pending_;
  uint64_t pending_round_ = 0;
  int low_water_ = 0;
  size_t received_ = 0;
  size_t forwarded_ = 0;
};

}  // namespace

Status ReceiveThroughChain(Connection& control, Listener& listener, const Manifest& manifest,
                           const std::vector<char*>& ptrs, Clock::time_point deadline,
                           Duration stall) {
  return ChainReceiver(control, listener, manifest, ptrs, deadline, stall).Run();
}

}  // namespace rlmesh::transport
