// The TCP chain: how a version reaches receivers that cannot map the sender's memory (another
// host, another pod, another /dev/shm). The sender writes the version's bytes once, to the
// first receiver of a chain; each receiver writes the bytes it reads into its own buffers and
// forwards them at once to the next, so the sender's cost does not grow with the number of
// receivers and a chain moves at the speed of its slowest link.
//
// Protocol, over the control connection of each receiver (control_channel.h):
//   sender -> all       MANIFEST (and BUCKETS_READY notices, which chained receivers skip)
//   receiver -> sender  READY(data endpoint) once it has its buffers; "" = it copies from the
//                       sender's shared memory instead and is not chained
//   sender -> receiver  CHAIN(round, next receiver's index and data endpoint, or none)
//   upstream -> receiver  a data connection to its data endpoint: a 16-byte header (version,
//                       round), then the payload bytes of every tensor in order (no padding)
//   receiver -> sender  DOWNSTREAM_LOST(round, index, why) when the next one stops reading
//   receiver -> sender  ACK(version, status) once it has every byte and has forwarded them
// Rounds: the receivers that said READY form a round in the order they joined; the sender dials
// the first. A receiver that dies or stalls is dropped, and the receivers after it that have
// not acknowledged are chained again in a new round from the sender's copy, within the same
// deadline; a receiver given a new CHAIN starts the version over. Nothing is sent per
// receiver by the sender except the few-byte control messages.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/transport/control_channel.h"
#include "common/transport/layout.h"
#include "common/transport/sender_hub.h"
#include "common/transport/transport.h"

namespace rlmesh::transport {

// A version's payload as one byte stream ("wire" offsets): the tensors' bytes in order, without
// the layout's alignment padding.
class WireMap {
 public:
  explicit WireMap(const Layout& layout);
  size_t total() const { return total_; }
  // Wire bytes lying in the flat range [0, flat_end).
  size_t WireEnd(size_t flat_end) const;
  // Up to 512 iovecs covering wire bytes [begin, end); tensor i's bytes start at ptrs[i].
  void Iov(size_t begin, size_t end, const std::vector<char*>& ptrs, std::vector<iovec>* out) const;

 private:
  const Layout& layout_;
  std::vector<size_t> start_;  // wire offset of each tensor
  size_t total_ = 0;
};

// The sender's side of one transfer (a Publish or a late joiners' catch-up): reads what the
// members say, forms rounds of the members that asked to be chained, and writes the bytes to
// each round's first member. Transfer lock held throughout.
class ChainDistributor {
 public:
  // `ptrs[i]` is where tensor i lies in the sender's copy; `stall` bounds how long a receiver
  // may take no bytes before it is dropped as stalled.
  ChainDistributor(SenderHub& hub, Transfer& transfer, const Layout& layout,
                   std::vector<char*> ptrs, Duration stall);
  ~ChainDistributor();

  // The flat range [0, flat_end) of the sender's copy is now complete: reads the members'
  // messages without waiting, starts the first round once every member has said how it
  // receives, and writes the new bytes to the round in progress.
  void Advance(size_t flat_end);
  // The whole version is in the sender's copy: runs rounds until every member acknowledged or
  // was dropped, or the transfer's deadline passed.
  void Finish();

 private:
  struct MemberState {
    bool reported = false;  // sent READY
    std::string endpoint;   // its data endpoint ("" = shared memory)
    uint64_t round = 0;     // the round it is in now (0 = none)
  };
  struct Round {
    uint64_t id = 0;
    std::vector<size_t> chain;  // member indices, in order
    std::unique_ptr<Connection> head;
    size_t sent = 0;  // wire bytes written to the head
  };

  bool Done() const;
  void Poll(int timeout_ms);
  void Handle(size_t i, const Message& message);
  // Fails member i and queues the members after it in its round for a new one.
  void Fail(size_t i, std::string error, bool drop);
  void Rechain(size_t i);
  void StartRound();
  void Pump();
  void FailRemainingAtDeadline();

  SenderHub& hub_;
  Transfer& transfer_;
  const Layout& layout_;
  WireMap wire_;
  std::vector<char*> ptrs_;
  Duration stall_;
  std::vector<MemberState> states_;
  std::vector<size_t> queue_;  // ready for a round, in the order they said so
  std::vector<Round> rounds_;  // rounds_[id - 1]
  size_t available_ = 0;       // wire bytes complete in the sender's copy
};

// A receiver's side: the data listener it advertises in READY, on the address its control
// connection uses (the one the sender reached it through, so its other peers can too).
StatusOr<std::unique_ptr<Listener>> ListenForChain(const Connection& control);

// Receives `manifest`'s version through the chain: sends READY(listener's endpoint), then reads
// the bytes from its upstream into `ptrs` and forwards them to its downstream, following the
// sender's CHAIN messages, until every byte has arrived. Does not acknowledge. `ptrs[i]` must
// hold tensor i's bytes (a scratch buffer where the receiver has no place of its own for it).
// Aborted when the sender abandons the version; Unavailable when the control connection is
// lost; DeadlineExceeded at `deadline`.
Status ReceiveThroughChain(Connection& control, Listener& listener, const Manifest& manifest,
                           const std::vector<char*>& ptrs, Clock::time_point deadline,
                           Duration stall);

}  // namespace rlmesh::transport
