#include "services/trainer/weight_publisher.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc/client.h"
#include "common/status/status_macros.h"
#include "common/transport/absl_status.h"
#include "common/transport/transport_factory.h"
#include "rlmesh/v1/reference.grpc.pb.h"
#include "rlmesh/v1/rollout.grpc.pb.h"
#include "services/rollout/tensor_codec.h"

namespace rlmesh::trainer {

namespace {

// UpdateWeights calls to one replica, all under one deadline; each returns "" or the error.
std::function<std::string(const v1::UpdateWeightsRequest&)> UpdateWeightsCaller(
    const v1::WeightTarget& target, const PublishOptions& options) {
  auto channel = rpc::CreateChannel(target.address(), options.channel);
  // Rollout replicas and the reference take a version through the same UpdateWeights phases.
  std::shared_ptr<v1::RolloutService::Stub> rollout;
  std::shared_ptr<v1::ReferenceService::Stub> reference;
  if (target.kind() == v1::WEIGHT_TARGET_KIND_REFERENCE) {
    reference = v1::ReferenceService::NewStub(channel);
  } else {
    rollout = v1::RolloutService::NewStub(channel);
  }
  const auto deadline =
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000));
  return [rollout, reference, deadline,
          address = target.address()](const v1::UpdateWeightsRequest& request) -> std::string {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    v1::UpdateWeightsResponse response;
    grpc::Status status = rollout ? rollout->UpdateWeights(&context, request, &response)
                                  : reference->UpdateWeights(&context, request, &response);
    if (!status.ok()) {
      return absl::StrCat("UpdateWeights (phase ", v1::WeightUpdatePhase_Name(request.phase()),
                          ") on ", address, ": ", status.error_message());
    }
    return "";
  };
}

std::string SendTo(const NamedTensors& tensors, const v1::WeightVersion& version,
                   const v1::WeightTarget& target, const PublishOptions& options) {
  auto call = UpdateWeightsCaller(target, options);
  v1::UpdateWeightsRequest request;
  request.set_phase(v1::WEIGHT_UPDATE_PHASE_BEGIN);
  *request.mutable_version() = version;
  request.set_transport("inline");
  request.set_expected_tensors(static_cast<int32_t>(tensors.size()));
  request.set_timeout_seconds(options.timeout_seconds);
  if (std::string error = call(request); !error.empty()) return error;

  // DATA calls of up to bucket_bytes of tensors; a tensor larger than that goes in parts of
  // bucket_bytes, one per call, so no message grows with the model.
  auto new_data = [&] {
    v1::UpdateWeightsRequest data;
    data.set_phase(v1::WEIGHT_UPDATE_PHASE_DATA);
    *data.mutable_version() = version;
    data.set_transport("inline");
    return data;
  };
  v1::UpdateWeightsRequest data = new_data();
  int64_t bytes = 0;
  auto flush = [&]() -> absl::Status {
    if (data.tensors_size() == 0) return absl::OkStatus();
    std::string error = call(data);
    data = new_data();
    bytes = 0;
    return error.empty() ? absl::OkStatus() : absl::UnavailableError(error);
  };
  for (const auto& [name, tensor] : tensors) {
    const int64_t tensor_bytes = tensor.numel() * tensor.element_size();
    if (bytes > 0 && bytes + tensor_bytes > options.bucket_bytes) {
      if (absl::Status s = flush(); !s.ok()) return std::string(s.message());
    }
    absl::Status status = rollout::EncodeTensorParts(
        name, tensor, options.bucket_bytes, [&](v1::Tensor&& part) -> absl::Status {
          *data.add_tensors() = std::move(part);
          bytes += static_cast<int64_t>(data.tensors(data.tensors_size() - 1).data().size());
          return bytes >= options.bucket_bytes ? flush() : absl::OkStatus();
        });
    if (!status.ok()) return std::string(status.message());
  }
  if (absl::Status s = flush(); !s.ok()) return std::string(s.message());
  v1::UpdateWeightsRequest commit;
  commit.set_phase(v1::WEIGHT_UPDATE_PHASE_COMMIT);
  *commit.mutable_version() = version;
  commit.set_transport("inline");
  return call(commit);
}

// BEGIN naming the data plane, and the same-node one when `same_node.backend` is set (the
// replica pulls the version from the one it takes before answering), then COMMIT.
std::string PullFrom(const transport::Offer& primary, const transport::Offer& same_node,
                     size_t num_tensors, const v1::WeightVersion& version,
                     const v1::WeightTarget& target, const PublishOptions& options) {
  auto call = UpdateWeightsCaller(target, options);
  v1::UpdateWeightsRequest begin;
  begin.set_phase(v1::WEIGHT_UPDATE_PHASE_BEGIN);
  *begin.mutable_version() = version;
  begin.set_transport(primary.backend);
  begin.set_endpoint(primary.endpoint);
  begin.set_expected_tensors(static_cast<int32_t>(num_tensors));
  begin.set_timeout_seconds(options.timeout_seconds);
  auto& transport_options = *begin.mutable_transport_options();
  transport_options["receiver_name"] = target.replica_id();
  if (!same_node.backend.empty()) {
    transport_options[transport::kSameNodeTransportOption] = same_node.backend;
    transport_options[transport::kSameNodeEndpointOption] = same_node.endpoint;
    transport_options[transport::kSenderNodeOption] = transport::NodeId();
  }
  if (std::string error = call(begin); !error.empty()) return error;
  v1::UpdateWeightsRequest commit;
  commit.set_phase(v1::WEIGHT_UPDATE_PHASE_COMMIT);
  *commit.mutable_version() = version;
  commit.set_transport(primary.backend);
  return call(commit);
}

// One report of a version published by two senders: their receivers together.
transport::PublishReport Merged(transport::PublishReport report,
                                const transport::PublishReport& other) {
  for (const auto& r : other.receivers) report.receivers.push_back(r);
  report.seconds = std::max(report.seconds, other.seconds);
  return report;
}

// Sends one pass of a feed inline to some of the targets: BEGIN, then each unit as it is
// handed over in DATA calls of at most bucket_bytes, then COMMIT. A target that fails is left
// out from then on, its error kept; the feed's own failure is returned.
class InlinePass {
 public:
  InlinePass(UnitFeed& feed, const v1::WeightVersion& version,
             const google::protobuf::RepeatedPtrField<v1::WeightTarget>& targets,
             std::vector<int> which, const PublishOptions& options,
             std::vector<std::string>* errors)
      : feed_(feed),
        version_(version),
        which_(std::move(which)),
        options_(options),
        errors_(*errors) {
    for (int i : which_) calls_[i] = UpdateWeightsCaller(targets.Get(i), options);
  }

  void Begin() {
    v1::UpdateWeightsRequest begin;
    begin.set_phase(v1::WEIGHT_UPDATE_PHASE_BEGIN);
    *begin.mutable_version() = version_;
    begin.set_transport("inline");
    begin.set_expected_tensors(static_cast<int32_t>(feed_.entries().size()));
    begin.set_timeout_seconds(options_.timeout_seconds);
    Each([&](int i) { return calls_[i](begin); });
  }

  // Fetches the units up to `unit` not fetched yet; each unit's tensors are encoded before the
  // next is asked for, and sent whenever a bucket is full.
  absl::Status AdvanceTo(int unit) {
    while (next_ <= unit) {
      ASSIGN_OR_RETURN(current_, feed_.Fetch(next_));
      ++next_;
      if (which_.empty()) continue;
      for (const auto& [name, tensor] : current_) {
        // A tensor that would overflow the bucket starts a new call; one larger than a
        // bucket goes in parts, one per call (Tensor.offset).
        if (pending_ &&
            pending_bytes_ + tensor.numel() * tensor.element_size() > options_.bucket_bytes) {
          Flush();
        }
        RETURN_IF_ERROR(
            rollout::EncodeTensorParts(name, tensor, options_.bucket_bytes, [&](v1::Tensor&& part) {
              if (!pending_) {
                pending_.emplace();
                pending_->set_phase(v1::WEIGHT_UPDATE_PHASE_DATA);
                *pending_->mutable_version() = version_;
                pending_->set_transport("inline");
                pending_bytes_ = 0;
              }
              pending_bytes_ += static_cast<int64_t>(part.data().size());
              *pending_->add_tensors() = std::move(part);
              if (pending_bytes_ >= options_.bucket_bytes) Flush();
              return absl::OkStatus();
            }));
      }
    }
    return absl::OkStatus();
  }

  const NamedTensors& current() const { return current_; }

  void Commit() {
    Flush();
    v1::UpdateWeightsRequest commit;
    commit.set_phase(v1::WEIGHT_UPDATE_PHASE_COMMIT);
    *commit.mutable_version() = version_;
    commit.set_transport("inline");
    Each([&](int i) { return calls_[i](commit); });
  }

 private:
  // Sends the DATA call being filled, if any.
  void Flush() {
    if (!pending_) return;
    Each([&](int i) { return calls_[i](*pending_); });
    pending_.reset();
  }

  // Runs `send(i)` for every target still in, in parallel; a non-empty result is its error.
  template <typename F>
  void Each(F send) {
    std::vector<std::thread> threads;
    for (int i : which_) {
      if (errors_[i].empty()) threads.emplace_back([&, i] { errors_[i] = send(i); });
    }
    for (auto& t : threads) t.join();
  }

  UnitFeed& feed_;
  const v1::WeightVersion version_;
  const std::vector<int> which_;
  const PublishOptions& options_;
  std::vector<std::string>& errors_;
  std::map<int, std::function<std::string(const v1::UpdateWeightsRequest&)>> calls_;
  int next_ = 0;
  NamedTensors current_;
  std::optional<v1::UpdateWeightsRequest> pending_;
  int64_t pending_bytes_ = 0;
};

// Tensors held whole, handed over one per unit.
class HeldFeed : public UnitFeed {
 public:
  explicit HeldFeed(const NamedTensors& tensors) : tensors_(tensors) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      const torch::Tensor& t = tensors[i].second;
      entries_.push_back({tensors[i].first, t.scalar_type(), t.sizes().vec(), static_cast<int>(i)});
      bytes_ += t.numel() * t.element_size();
    }
  }
  int64_t peak_held_bytes() const override { return bytes_; }
  const std::vector<FeedEntry>& entries() const override { return entries_; }
  int num_units() const override { return static_cast<int>(entries_.size()); }
  absl::StatusOr<NamedTensors> Fetch(int unit) override {
    const auto& [name, tensor] = tensors_[static_cast<size_t>(unit)];
    return NamedTensors{{name, tensor.contiguous()}};
  }
  absl::Status EndPass(bool) override { return absl::OkStatus(); }

 private:
  const NamedTensors& tensors_;
  std::vector<FeedEntry> entries_;
  int64_t bytes_ = 0;  // all of them: a copy made for the publish
};

}  // namespace

std::string SameNodeTransportFor(const std::string& transport) {
  if (transport != "nccl") return "";
  for (const auto& backend : transport::AvailableBackends()) {
    if (backend == "cuda_ipc") return backend;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<WeightPublisher>> WeightPublisher::Create(
    const WeightPublisherOptions& options) {
  auto publisher = std::make_unique<WeightPublisher>();
  publisher->options_ = options;
  if (options.transport == "grpc" || options.transport == "inline") return publisher;
  transport::SenderOptions sender_options;
  sender_options.bind_host = options.bind_host;
  sender_options.bucket_bytes = static_cast<size_t>(options.bucket_bytes);
  sender_options.device = options.device;
  sender_options.transfer_timeout = transport::Duration(options.transfer_timeout_seconds);
  auto sender = transport::CreateSender(options.transport, sender_options);
  if (!sender.ok()) {
    return absl::Status(transport::ToAbsl(sender.status()).code(),
                        absl::StrCat("rlmesh.weight_sync.transport = ", options.transport, ": ",
                                     sender.status().message()));
  }
  publisher->sender_ = std::move(*sender);
  const std::string& same_node = options.same_node_transport;
  if (same_node.empty() || same_node == options.transport) return publisher;
  if (transport::MovesDeviceMemory(same_node) != transport::MovesDeviceMemory(options.transport)) {
    return absl::InvalidArgumentError(
        absl::StrCat("same-node weight transport ", same_node, " beside ", options.transport,
                     ": both must move host memory or both device memory"));
  }
  auto offered = transport::CreateSender(same_node, sender_options);
  if (!offered.ok()) {
    // Only a shortcut for some receivers: without it they all take the configured backend.
    std::fprintf(stderr,
                 "trainer: receivers on this node take %s like the others: the %s sender did not "
                 "start (%s)\n",
                 options.transport.c_str(), same_node.c_str(), offered.status().message().c_str());
    return publisher;
  }
  publisher->same_node_ = std::move(*offered);
  std::fprintf(stderr, "trainer: weights go out over %s, and over %s to receivers on this node\n",
               options.transport.c_str(), same_node.c_str());
  return publisher;
}

absl::StatusOr<v1::PublishWeightsResponse> WeightPublisher::Publish(
    NamedTensors tensors, const v1::WeightVersion& version,
    const google::protobuf::RepeatedPtrField<v1::WeightTarget>& targets,
    const std::string& transport, const PublishOptions& options) {
  if (FeedsFrom(transport)) {
    HeldFeed feed(tensors);
    return PublishFeed(feed, version, targets, transport, options);
  }
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(CheckTransport(transport));
  const absl::Time start = absl::Now();
  std::vector<transport::ConstTensorView> views;
  int64_t bytes = 0;
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.is_contiguous())
      return absl::InvalidArgumentError(absl::StrCat(name, ": not contiguous"));
    ASSIGN_OR_RETURN(transport::DType dtype, rollout::ToTransportDType(tensor.scalar_type()));
    transport::ConstTensorView view;
    view.meta.name = name;
    view.meta.dtype = dtype;
    view.meta.shape = tensor.sizes().vec();
    view.data = tensor.data_ptr();
    views.push_back(std::move(view));
    bytes += tensor.numel() * tensor.element_size();
  }
  // The same version again (a replica added since) needs no new send: subscribers already
  // have it and a new one is caught up from the sender's current version.
  const bool send = !published_ || version.version() > last_version_;
  RETURN_IF_ERROR(CheckVersion(version));
  transport::StatusOr<transport::PublishReport> report = transport::InternalError("not sent");
  transport::StatusOr<transport::PublishReport> same_node_report = transport::PublishReport{};
  std::thread sending, same_node_sending;
  if (send) sending = std::thread([&] { report = sender_->Publish(version.version(), views); });
  if (send && same_node_ != nullptr) {
    same_node_sending =
        std::thread([&] { same_node_report = same_node_->Publish(version.version(), views); });
  }
  const transport::Offer primary{options_.transport, sender_->endpoint()};
  const transport::Offer same_node =
      same_node_ == nullptr
          ? transport::Offer{}
          : transport::Offer{options_.same_node_transport, same_node_->endpoint()};
  std::vector<std::string> errors(targets.size());
  std::vector<std::thread> threads;
  for (int i = 0; i < targets.size(); ++i) {
    threads.emplace_back([&, i] {
      const auto& target = targets.Get(i);
      errors[i] = PullFrom(primary, same_node, tensors.size(), version, target, options);
      if (errors[i].empty()) return;
      // Its BEGIN failed (the replica is gone or frozen): the transfer need not wait for it.
      Abandon(target, version, errors[i]);
      NoteFallback(version, target, errors[i]);
      std::string inline_error = SendTo(tensors, version, target, options);
      if (!inline_error.empty())
        errors[i] = absl::StrCat(errors[i], "; inline fallback: ", inline_error);
      else
        errors[i].clear();
    });
  }
  for (auto& t : threads) t.join();
  if (sending.joinable()) sending.join();
  if (same_node_sending.joinable()) same_node_sending.join();
  if (send && !report.ok()) return transport::ToAbsl(report.status());
  if (send && !same_node_report.ok()) {
    const absl::Status failed = transport::ToAbsl(same_node_report.status());
    return absl::Status(failed.code(), absl::StrCat(options_.same_node_transport,
                                                    " (same-node) sender: ", failed.message()));
  }
  if (send) {
    published_ = true;
    last_version_ = version.version();
    retained_ = std::move(tensors);
    *report = Merged(*report, *same_node_report);
  }
  auto response =
      Response(version, targets, std::move(errors), send ? &*report : nullptr, bytes, start);
  response.set_peak_held_bytes(bytes);
  return response;
}

int WeightPublisher::Disconnect(const std::vector<std::string>& replica_ids) {
  if (sender_ == nullptr) return 0;
  return sender_->Disconnect(replica_ids) +
         (same_node_ == nullptr ? 0 : same_node_->Disconnect(replica_ids));
}

void WeightPublisher::Abandon(const v1::WeightTarget& target, const v1::WeightVersion& version,
                              const std::string& error) {
  sender_->Abandon(target.replica_id(), version.version(), error);
  if (same_node_ != nullptr) same_node_->Abandon(target.replica_id(), version.version(), error);
}

absl::Status WeightPublisher::CheckTransport(const std::string& transport) const {
  if (!transport.empty() && transport != "inline" && transport != "grpc" &&
      transport != options_.transport) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transport: expected \"", options_.transport,
        "\" (rlmesh.weight_sync.transport), \"inline\" or empty, got \"", transport, "\""));
  }
  return absl::OkStatus();
}

absl::Status WeightPublisher::CheckVersion(const v1::WeightVersion& version) const {
  if (published_ && version.version() < last_version_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "version: ", version.version(), " is older than the last published ", last_version_));
  }
  return absl::OkStatus();
}

bool WeightPublisher::FeedsFrom(const std::string& transport) const {
  return sender_ == nullptr || transport == "inline" || transport == "grpc" || Streams();
}

void WeightPublisher::NoteFallback(const v1::WeightVersion& version, const v1::WeightTarget& target,
                                   const std::string& error) {
  ++inline_fallbacks_;
  // The data plane did not reach this target (another host for shm, a failed pull): this
  // version goes inline, and the next one tries the data plane again.
  std::fprintf(stderr,
               "trainer: weight version %llu to %s over %s failed (%s); sending it inline\n",
               static_cast<unsigned long long>(version.version()), target.address().c_str(),
               options_.transport.c_str(), error.c_str());
}

v1::PublishWeightsResponse WeightPublisher::Response(
    const v1::WeightVersion& version,
    const google::protobuf::RepeatedPtrField<v1::WeightTarget>& targets,
    std::vector<std::string> errors, const transport::PublishReport* report, int64_t bytes,
    absl::Time start) {
  v1::PublishWeightsResponse response;
  *response.mutable_weight_version() = version;
  for (int i = 0; i < targets.size(); ++i) {
    auto* result = response.add_results();
    result->set_replica_id(targets.Get(i).replica_id());
    result->set_ok(errors[i].empty());
    if (!errors[i].empty() && report != nullptr) {
      // Say what the sender saw of this target (closed, timed out) next to the RPC error.
      for (const auto& r : report->receivers) {
        if (!r.ok && r.name == targets.Get(i).replica_id())
          errors[i] += absl::StrCat(" (data plane: ", r.error, ")");
      }
    }
    result->set_error(errors[i]);
  }
  response.set_bytes(bytes);
  response.set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  return response;
}

absl::StatusOr<v1::PublishWeightsResponse> WeightPublisher::PublishFeed(
    UnitFeed& feed, const v1::WeightVersion& version,
    const google::protobuf::RepeatedPtrField<v1::WeightTarget>& targets,
    const std::string& transport, const PublishOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Time start = absl::Now();
  const auto& entries = feed.entries();
  const bool plane = sender_ != nullptr && transport != "inline" && transport != "grpc";
  // Refusals before the first unit still end the pass: the group's ranks are in it.
  absl::Status refused = CheckTransport(transport);
  if (refused.ok() && plane && !Streams()) {
    refused = absl::FailedPreconditionError(absl::StrCat(
        "rlmesh.weight_sync.transport = ", options_.transport,
        same_node_ == nullptr ? "" : absl::StrCat(" with ", options_.same_node_transport),
        " cannot publish unit by unit"));
  }
  if (refused.ok() && plane) refused = CheckVersion(version);
  std::vector<transport::TensorMeta> metas;
  std::vector<size_t> unit_start(static_cast<size_t>(feed.num_units()) + 1, entries.size());
  int64_t bytes = 0;
  for (size_t i = 0; refused.ok() && i < entries.size(); ++i) {
    const FeedEntry& e = entries[i];
    auto dtype = rollout::ToTransportDType(e.dtype);
    if (!dtype.ok()) {
      refused = absl::InvalidArgumentError(absl::StrCat(e.name, ": ", dtype.status().message()));
      break;
    }
    metas.push_back({e.name, *dtype, e.shape});
    bytes += static_cast<int64_t>(metas.back().NumBytes());
    unit_start[e.unit] = std::min(unit_start[e.unit], i);
  }
  if (!refused.ok()) {
    feed.EndPass(false).IgnoreError();
    return refused;
  }

  std::vector<std::string> errors(targets.size());
  std::vector<int> inline_now, pulled;
  for (int i = 0; i < targets.size(); ++i) (plane ? pulled : inline_now).push_back(i);
  InlinePass pass(feed, version, targets, inline_now, options, &errors);
  pass.Begin();
  std::vector<std::thread> pulls;
  for (int i : pulled) {
    pulls.emplace_back([&, i] {
      // Streams() holds: one sender, nothing offered beside it.
      errors[i] = PullFrom({options_.transport, sender_->endpoint()}, {}, entries.size(), version,
                           targets.Get(i), options);
      if (!errors[i].empty()) Abandon(targets.Get(i), version, errors[i]);
    });
  }
  // The same version again (a target added since) needs no new send: subscribers already
  // have it, and a new one is caught up from the segment.
  const bool send = plane && (!published_ || version.version() > last_version_);
  transport::StatusOr<transport::PublishReport> report = transport::InternalError("not sent");
  absl::Status fed;  // the feed's own failure (a gather that failed)
  if (send) {
    report = sender_->PublishStream(
        version.version(), metas, [&](size_t i) -> transport::StatusOr<const void*> {
          fed = pass.AdvanceTo(entries[i].unit);
          if (!fed.ok()) return transport::InternalError(std::string(fed.message()));
          return pass.current()[i - unit_start[entries[i].unit]].second.data_ptr();
        });
  }
  if (fed.ok() && !inline_now.empty()) fed = pass.AdvanceTo(feed.num_units() - 1);
  if (fed.ok()) pass.Commit();
  for (auto& t : pulls) t.join();

  std::vector<int> fallback;
  if (fed.ok() && (!send || report.ok())) {
    for (int i : pulled) {
      if (!errors[i].empty()) fallback.push_back(i);
    }
  }
  absl::Status ended = feed.EndPass(!fallback.empty());
  if (ended.ok() && !fallback.empty()) {
    std::vector<std::string> inline_errors(targets.size());
    for (int i : fallback) NoteFallback(version, targets.Get(i), errors[i]);
    InlinePass again(feed, version, targets, fallback, options, &inline_errors);
    again.Begin();
    fed = again.AdvanceTo(feed.num_units() - 1);
    if (fed.ok()) again.Commit();
    for (int i : fallback) {
      if (!inline_errors[i].empty()) {
        errors[i] = absl::StrCat(errors[i], "; inline fallback: ", inline_errors[i]);
      } else {
        errors[i].clear();
      }
    }
    ended = feed.EndPass(false);
  }
  RETURN_IF_ERROR(fed);
  RETURN_IF_ERROR(ended);
  if (send && !report.ok()) return transport::ToAbsl(report.status());
  if (send) {
    published_ = true;
    last_version_ = version.version();
    retained_.clear();
  }
  auto response =
      Response(version, targets, std::move(errors), send ? &*report : nullptr, bytes, start);
  response.set_peak_held_bytes(feed.peak_held_bytes());
  return response;
}

}  // namespace rlmesh::trainer
