#include "common/transport/sender_hub.h"

#include <poll.h>

#include <algorithm>
#include <cstdio>

namespace rlmesh::transport {

namespace {

std::string Seconds(Duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", d.count());
  return text;
}

}  // namespace

int Transfer::Alive() const {
  int n = 0;
  for (const auto& m : members) n += !m.failed;
  return n;
}

void Transfer::Fail(Member& m, std::string error, bool drop) {
  if (m.failed) return;
  m.failed = true;
  m.drop = drop;
  m.error = std::move(error);
}

StatusOr<std::unique_ptr<SenderHub>> SenderHub::Create(const SenderOptions& options) {
  if (options.bucket_bytes == 0) return InvalidArgumentError("bucket_bytes: expected > 0, got 0");
  TRANSPORT_ASSIGN_OR_RETURN(auto listener, Listener::Listen(options.bind_host, options.port));
  return std::unique_ptr<SenderHub>(new SenderHub(options, std::move(listener)));
}

SenderHub::~SenderHub() {
  stop_ = true;
  if (accept_thread_.joinable()) accept_thread_.join();
}

void SenderHub::Start(CatchUpFn catch_up) {
  catch_up_ = std::move(catch_up);
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

void SenderHub::AcceptLoop() {
  while (!stop_) {
    // A short accept timeout bounds how long the destructor waits for this thread.
    auto connection = listener_->Accept(std::chrono::milliseconds(100));
    if (connection.ok()) {
      auto peer = std::make_unique<Peer>();
      peer->connection = std::move(*connection);
      auto hello = peer->connection->Receive(
          Clock::now() + std::chrono::duration_cast<Clock::duration>(options_.handshake_timeout));
      if (!hello.ok() || hello->type != MessageType::kHello) {
        std::fprintf(stderr,
                     "weight sender %s: dropped a connection from %s that sent no hello: %s\n",
                     endpoint().c_str(), peer->connection->peer().c_str(),
                     hello.ok() ? "wrong message type" : hello.status().message().c_str());
        continue;
      }
      peer->name = hello->payload;
      std::lock_guard<std::mutex> lock(joiners_mu_);
      joiners_.push_back(std::move(peer));
      ++receivers_;
    }
    bool pending = false;
    {
      std::lock_guard<std::mutex> lock(joiners_mu_);
      pending = !joiners_.empty();
    }
    if (pending && have_current_ && !stop_) {
      auto lock = LockTransfers();
      // A Publish that ran while we waited for the lock may have served the joiners already.
      std::vector<std::unique_ptr<Peer>> joiners;
      {
        std::lock_guard<std::mutex> jl(joiners_mu_);
        joiners.swap(joiners_);
      }
      if (joiners.empty()) continue;
      Transfer transfer;
      transfer.deadline =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(options_.transfer_timeout);
      for (auto& p : joiners)
        transfer.members.push_back(Transfer::Member{p.get(), false, false, false, ""});
      catch_up_(transfer);
      std::vector<ReceiverOutcome> outcomes;
      // Joiners become members first so that FinishTransfer can drop the failed ones.
      for (auto& p : joiners) members_.push_back(std::move(p));
      FinishTransfer(transfer, &outcomes);
      for (const auto& o : outcomes) {
        if (!o.ok) {
          std::fprintf(
              stderr,
              "weight sender %s: late joiner \"%s\" did not receive the current version: %s\n",
              endpoint().c_str(), o.name.c_str(), o.error.c_str());
        }
      }
    }
  }
}

void SenderHub::Abandon(const std::string& name, uint64_t version, const std::string& why) {
  std::lock_guard<std::mutex> lock(abandoned_mu_);
  abandoned_.push_back({name, version, why});
}

Transfer SenderHub::BeginTransfer(uint64_t version) {
  {
    // Only the transfer in progress is given up on; older requests are void.
    std::lock_guard<std::mutex> lock(abandoned_mu_);
    abandoned_.erase(std::remove_if(abandoned_.begin(), abandoned_.end(),
                                    [&](const Abandoned& a) { return a.version < version; }),
                     abandoned_.end());
  }
  {
    std::lock_guard<std::mutex> lock(joiners_mu_);
    for (auto& p : joiners_) members_.push_back(std::move(p));
    joiners_.clear();
  }
  Transfer transfer;
  transfer.version = version;
  transfer.publish = true;
  transfer.deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(options_.transfer_timeout);
  for (auto& p : members_)
    transfer.members.push_back(Transfer::Member{p.get(), false, false, false, ""});
  return transfer;
}

void SenderHub::SendToAll(Transfer& transfer, MessageType type, const std::string& payload) {
  for (auto& m : transfer.members) {
    if (m.failed) continue;
    Status status = m.peer->connection->Send(type, payload, transfer.deadline);
    if (status.ok()) continue;
    transfer.Fail(m,
                  status.code() == Code::kUnavailable
                      ? "connection closed during the transfer of version " +
                            std::to_string(transfer.version) +
                            " (receiver process gone?): " + status.message()
                      : status.message(),
                  /*drop=*/true);
  }
}

bool SenderHub::DropClosed(Transfer& transfer) {
  bool dropped = false;
  for (auto& m : transfer.members) {
    if (m.failed || m.acked) continue;
    if (m.peer->connection->PeerClosed()) {
      transfer.Fail(m,
                    "connection closed during the transfer of version " +
                        std::to_string(transfer.version) + " (receiver process gone?)",
                    /*drop=*/true);
      dropped = true;
    }
  }
  return dropped;
}

void SenderHub::ApplyAbandoned(Transfer& transfer) {
  if (!transfer.publish) return;
  std::lock_guard<std::mutex> lock(abandoned_mu_);
  for (const Abandoned& a : abandoned_) {
    if (a.version != transfer.version) continue;
    for (auto& m : transfer.members) {
      if (!m.failed && !m.acked && m.peer->name == a.name) {
        transfer.Fail(m, "given up on: " + a.why, /*drop=*/true);
      }
    }
  }
}

void SenderHub::CollectAcks(Transfer& transfer) {
  while (true) {
    ApplyAbandoned(transfer);
    std::vector<pollfd> fds;
    std::vector<Transfer::Member*> waiting;
    for (auto& m : transfer.members) {
      if (m.failed || m.acked) continue;
      fds.push_back({m.peer->connection->fd(), POLLIN, 0});
      waiting.push_back(&m);
    }
    if (waiting.empty()) return;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(transfer.deadline - Clock::now());
    if (left.count() <= 0) {
      for (auto* m : waiting) {
        transfer.Fail(*m,
                      "no acknowledgement of version " + std::to_string(transfer.version) +
                          " within " + Seconds(options_.transfer_timeout) + " (receiver stalled?)",
                      /*drop=*/true);
      }
      return;
    }
    ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left.count() + 1, 1000)));
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Transfer::Member& m = *waiting[i];
      auto message = m.peer->connection->Receive(transfer.deadline);
      if (!message.ok()) {
        const bool closed = message.status().code() == Code::kUnavailable;
        transfer.Fail(m,
                      closed ? "connection closed during the transfer of version " +
                                   std::to_string(transfer.version) + " (receiver process gone?)"
                             : message.status().message(),
                      /*drop=*/true);
        continue;
      }
      if (message->type != MessageType::kAck) {
        transfer.Fail(m,
                      "expected an acknowledgement, got message type " +
                          std::to_string(static_cast<uint32_t>(message->type)),
                      /*drop=*/true);
        continue;
      }
      auto ack = DecodeAck(message->payload);
      if (!ack.ok()) {
        transfer.Fail(m, ack.status().message(), /*drop=*/true);
      } else if (ack->first != transfer.version) {
        transfer.Fail(m,
                      "acknowledged version " + std::to_string(ack->first) + ", expected " +
                          std::to_string(transfer.version),
                      /*drop=*/true);
      } else if (!ack->second.ok()) {
        transfer.Fail(m, "receiver error: " + ack->second.message(), /*drop=*/false);
      } else {
        m.acked = true;
      }
    }
  }
}

int SenderHub::Disconnect(const std::vector<std::string>& names) {
  if (names.empty()) return 0;
  auto named = [&](const std::unique_ptr<Peer>& p) {
    return std::find(names.begin(), names.end(), p->name) != names.end();
  };
  auto lock = LockTransfers();
  std::lock_guard<std::mutex> joiners_lock(joiners_mu_);
  const size_t before = members_.size() + joiners_.size();
  members_.erase(std::remove_if(members_.begin(), members_.end(), named), members_.end());
  joiners_.erase(std::remove_if(joiners_.begin(), joiners_.end(), named), joiners_.end());
  const int closed = static_cast<int>(before - members_.size() - joiners_.size());
  receivers_ -= closed;
  return closed;
}

void SenderHub::FinishTransfer(Transfer& transfer, std::vector<ReceiverOutcome>* outcomes) {
  if (transfer.publish) {
    std::lock_guard<std::mutex> lock(abandoned_mu_);
    abandoned_.erase(
        std::remove_if(abandoned_.begin(), abandoned_.end(),
                       [&](const Abandoned& a) { return a.version <= transfer.version; }),
        abandoned_.end());
  }
  for (auto& m : transfer.members) {
    ReceiverOutcome outcome;
    outcome.name = m.peer->name;
    outcome.ok = m.acked && !m.failed;
    if (!outcome.ok && m.error.empty()) m.error = "no acknowledgement";
    outcome.error = outcome.ok ? "" : m.error;
    outcomes->push_back(std::move(outcome));
    if (m.drop) {
      Peer* gone = m.peer;
      members_.erase(
          std::remove_if(members_.begin(), members_.end(),
                         [gone](const std::unique_ptr<Peer>& p) { return p.get() == gone; }),
          members_.end());
      --receivers_;
    }
  }
}

PublishReport SenderHub::FinishPublish(Transfer& transfer, const Layout& layout,
                                       Clock::time_point start) {
  PublishReport report;
  report.version = transfer.version;
  report.bytes = layout.PayloadBytes();
  report.buckets = layout.NumBuckets();
  FinishTransfer(transfer, &report.receivers);
  report.seconds = Duration(Clock::now() - start).count();
  return report;
}

Status CheckNewVersion(uint64_t version, const std::optional<Manifest>& current) {
  if (current && version <= current->version) {
    return InvalidArgumentError("version: expected greater than the current " +
                                std::to_string(current->version) + ", got " +
                                std::to_string(version));
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<Connection>> DialSender(const ReceiverOptions& options) {
  TRANSPORT_ASSIGN_OR_RETURN(auto connection,
                             Connection::Dial(options.endpoint, options.connect_timeout));
  Status hello = connection->Send(
      MessageType::kHello, options.name,
      Clock::now() + std::chrono::duration_cast<Clock::duration>(options.connect_timeout));
  if (!hello.ok()) return Annotate(hello, "saying hello to weight sender " + options.endpoint);
  return connection;
}

ReceivedVersion Received(const Manifest& manifest, Clock::time_point start) {
  ReceivedVersion received;
  received.version = manifest.version;
  received.tensors = manifest.layout.tensors.size();
  received.bytes = manifest.layout.PayloadBytes();
  received.seconds = Duration(Clock::now() - start).count();
  return received;
}

}  // namespace rlmesh::transport
