// The backend-independent half of a weight sender: the listening control socket, receivers
// joining (hello) and leaving (closed, timed out), the serialization of transfers, and the
// acknowledgements that end each transfer. A backend (shm, NCCL) moves the bytes between
// BeginTransfer and FinishTransfer.
//
// Threads: one accept thread owned by the hub; it hands new receivers to the backend's catch-up
// function (with the transfer lock held) once a version exists, so a late joiner gets the
// current version without waiting for the next Publish. Everything else runs on the caller's
// thread with the lock from LockTransfers() held.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/control_channel.h"
#include "common/transport/layout.h"
#include "common/transport/transport.h"

namespace rlmesh::transport {

struct Peer {
  std::unique_ptr<Connection> connection;
  std::string name;
};

// The receivers taking part in one transfer and what has happened to each.
struct Transfer {
  struct Member {
    Peer* peer = nullptr;
    bool failed = false;  // no longer sent to
    bool drop = false;    // the connection is unusable: remove the receiver afterwards
    bool acked = false;
    std::string error;
  };
  uint64_t version = 0;
  // A Publish (BeginTransfer), not a joiner's catch-up: only a Publish honours Abandon, so a
  // receiver given up on in version v and re-joining is still caught up to v.
  bool publish = false;
  std::vector<Member> members;
  Clock::time_point deadline;

  // Members still being served.
  int Alive() const;
  void Fail(Member& m, std::string error, bool drop);
};

class SenderHub {
 public:
  // Runs with the transfer lock held: brings `joiners` to the current version.
  using CatchUpFn = std::function<void(Transfer& transfer)>;

  static StatusOr<std::unique_ptr<SenderHub>> Create(const SenderOptions& options);
  ~SenderHub();  // stops the accept thread, closes every connection
  SenderHub(const SenderHub&) = delete;
  SenderHub& operator=(const SenderHub&) = delete;

  // Starts accepting receivers; `catch_up` is called for joiners once HaveCurrent() was set.
  void Start(CatchUpFn catch_up);
  const std::string& endpoint() const { return listener_->endpoint(); }
  int NumReceivers() const { return receivers_.load(); }
  const SenderOptions& options() const { return options_; }

  // Every transfer (Publish or catch-up) runs with this lock held.
  std::unique_lock<std::mutex> LockTransfers() {
    return std::unique_lock<std::mutex>(transfer_mu_);
  }
  // A transfer of `version` to every receiver (joiners included); transfer lock held.
  Transfer BeginTransfer(uint64_t version);
  // From now on joiners are caught up as soon as they say hello.
  void SetHaveCurrent() { have_current_ = true; }

  // Sends one message to every live member; a member whose send fails is dropped.
  void SendToAll(Transfer& transfer, MessageType type, const std::string& payload);
  // Waits for every live member's acknowledgement of transfer.version until the deadline;
  // members that close, time out or answer out of protocol are dropped; members that report an
  // error in their ack fail this version but stay subscribed.
  void CollectAcks(Transfer& transfer);
  // Fails (and marks for dropping) the live members given up on by Abandon() for this
  // transfer's version; only for a Publish's transfer.
  void ApplyAbandoned(Transfer& transfer);
  // Drops receivers marked `drop` and writes one outcome per member into `outcomes`.
  void FinishTransfer(Transfer& transfer, std::vector<ReceiverOutcome>* outcomes);
  // FinishTransfer, then the report of a Publish of `layout` that began at `start`.
  PublishReport FinishPublish(Transfer& transfer, const Layout& layout, Clock::time_point start);
  // WeightSender::Abandon: recorded here, applied by a Publish's CollectAcks (no transfer lock
  // needed), forgotten when the Publish of that version finishes.
  void Abandon(const std::string& name, uint64_t version, const std::string& why);
  // Closes and forgets every member and joiner whose name is in `names`; takes the transfer
  // lock itself. Returns how many.
  int Disconnect(const std::vector<std::string>& names);
  // Checks live members' connections without blocking; a closed one is dropped. Returns true
  // when a member was dropped by this call.
  bool DropClosed(Transfer& transfer);

 private:
  SenderHub(const SenderOptions& options, std::unique_ptr<Listener> listener)
      : options_(options), listener_(std::move(listener)) {}
  void AcceptLoop();

  const SenderOptions options_;
  std::unique_ptr<Listener> listener_;
  CatchUpFn catch_up_;
  std::thread accept_thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> have_current_{false};
  std::atomic<int> receivers_{0};

  std::mutex transfer_mu_;
  std::vector<std::unique_ptr<Peer>> members_;  // guarded by transfer_mu_

  struct Abandoned {
    std::string name;
    uint64_t version;
    std::string why;
  };
  std::mutex abandoned_mu_;
  std::vector<Abandoned> abandoned_;  // guarded by abandoned_mu_

  std::mutex joiners_mu_;
  std::vector<std::unique_ptr<Peer>>
      joiners_;  // guarded by joiners_mu_: said hello, not yet served
};

// A WeightSender whose membership is a SenderHub: what every backend forwards to its hub.
// The backend starts the hub in its constructor (with its catch-up) and resets hub_ first in
// its destructor, before the memory receivers read goes.
class HubSender : public WeightSender {
 public:
  std::string endpoint() const override { return hub_->endpoint(); }
  int NumReceivers() const override { return hub_->NumReceivers(); }
  int Disconnect(const std::vector<std::string>& names) override { return hub_->Disconnect(names); }
  void Abandon(const std::string& name, uint64_t version, const std::string& why) override {
    hub_->Abandon(name, version, why);
  }

 protected:
  explicit HubSender(std::unique_ptr<SenderHub> hub) : hub_(std::move(hub)) {}
  std::unique_ptr<SenderHub> hub_;
};

// Publish's precondition: InvalidArgument unless `version` is above the current one.
Status CheckNewVersion(uint64_t version, const std::optional<Manifest>& current);

// A receiver's side of the control channel: connects to options.endpoint and says hello.
StatusOr<std::unique_ptr<Connection>> DialSender(const ReceiverOptions& options);

// What ReceiveNext returns for `manifest`, received since `start`.
ReceivedVersion Received(const Manifest& manifest, Clock::time_point start);

}  // namespace rlmesh::transport
