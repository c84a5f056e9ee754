#include "services/trainer/weight_publisher.h"

#include <chrono>
#include <cstdio>
#include <functional>
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

  size_t next = 0;
  while (next < tensors.size()) {
    v1::UpdateWeightsRequest data;
    data.set_phase(v1::WEIGHT_UPDATE_PHASE_DATA);
    *data.mutable_version() = version;
    data.set_transport("inline");
    int64_t bytes = 0;
    while (next < tensors.size() && (bytes == 0 || bytes < options.bucket_bytes)) {
      const auto& [name, tensor] = tensors[next++];
      auto status = rollout::EncodeTensor(name, tensor, data.add_tensors());
      if (!status.ok()) return std::string(status.message());
      bytes += tensor.numel() * tensor.element_size();
    }
    if (std::string error = call(data); !error.empty()) return error;
  }
  v1::UpdateWeightsRequest commit;
  commit.set_phase(v1::WEIGHT_UPDATE_PHASE_COMMIT);
  *commit.mutable_version() = version;
  commit.set_transport("inline");
  return call(commit);
}

// BEGIN naming the data plane (the replica pulls the version before answering), then COMMIT.
std::string PullFrom(const std::string& transport, const std::string& endpoint, size_t num_tensors,
                     const v1::WeightVersion& version, const v1::WeightTarget& target,
                     const PublishOptions& options) {
  auto call = UpdateWeightsCaller(target, options);
  v1::UpdateWeightsRequest begin;
  begin.set_phase(v1::WEIGHT_UPDATE_PHASE_BEGIN);
  *begin.mutable_version() = version;
  begin.set_transport(transport);
  begin.set_endpoint(endpoint);
  begin.set_expected_tensors(static_cast<int32_t>(num_tensors));
  begin.set_timeout_seconds(options.timeout_seconds);
  (*begin.mutable_transport_options())["receiver_name"] = target.replica_id();
  if (std::string error = call(begin); !error.empty()) return error;
  v1::UpdateWeightsRequest commit;
  commit.set_phase(v1::WEIGHT_UPDATE_PHASE_COMMIT);
  *commit.mutable_version() = version;
  commit.set_transport(transport);
  return call(commit);
}

}  // namespace

v1::PublishWeightsResponse PublishWeights(
    const NamedTensors& tensors, const v1::WeightVersion& version,
    const google::protobuf::RepeatedPtrField<v1::WeightTarget>& targets,
    const PublishOptions& options) {
  const absl::Time start = absl::Now();
  v1::PublishWeightsResponse response;
  *response.mutable_weight_version() = version;
  std::vector<std::string> errors(targets.size());
  std::vector<std::thread> threads;
  for (int i = 0; i < targets.size(); ++i) {
    threads.emplace_back([&, i] { errors[i] = SendTo(tensors, version, targets.Get(i), options); });
  }
  for (auto& t : threads) t.join();
  int64_t bytes = 0;
  for (const auto& [name, tensor] : tensors) bytes += tensor.numel() * tensor.element_size();
  for (int i = 0; i < targets.size(); ++i) {
    auto* result = response.add_results();
    result->set_replica_id(targets.Get(i).replica_id());
    result->set_ok(errors[i].empty());
    result->set_error(errors[i]);
  }
  response.set_bytes(bytes);
  response.set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  return response;
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
  return publisher;
}

absl::StatusOr<v1::PublishWeightsResponse> WeightPublisher::Publish(
    NamedTensors tensors, const v1::WeightVersion& version,
    const google::protobuf::RepeatedPtrField<v1::WeightTarget>& targets,
    const std::string& transport, const PublishOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool inline_requested = transport == "inline" || transport == "grpc";
  if (!sender_ || inline_requested) return PublishWeights(tensors, version, targets, options);
  if (!transport.empty() && transport != options_.transport) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transport: expected \"", options_.transport,
        "\" (rlmesh.weight_sync.transport), \"inline\" or empty, got \"", transport, "\""));
  }
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
  if (published_ && version.version() < last_version_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "version: ", version.version(), " is older than the last published ", last_version_));
  }
  transport::StatusOr<transport::PublishReport> report = transport::InternalError("not sent");
  std::thread sending;
  if (send) sending = std::thread([&] { report = sender_->Publish(version.version(), views); });
  std::vector<std::string> errors(targets.size());
  std::vector<std::thread> threads;
  for (int i = 0; i < targets.size(); ++i) {
    threads.emplace_back([&, i] {
      const auto& target = targets.Get(i);
      if (target.kind() == v1::WEIGHT_TARGET_KIND_REFERENCE) {
        // The reference takes versions inline only (it subscribes to no data plane).
        errors[i] = SendTo(tensors, version, target, options);
        return;
      }
      errors[i] = PullFrom(options_.transport, sender_->endpoint(), tensors.size(), version, target,
                           options);
      if (errors[i].empty()) return;
      ++inline_fallbacks_;
      // The data plane did not reach this replica (another host for shm, a failed pull): this
      // version goes inline, and the next one tries the data plane again.
      std::fprintf(stderr,
                   "trainer: weight version %llu to %s over %s failed (%s); sending it inline\n",
                   static_cast<unsigned long long>(version.version()), target.address().c_str(),
                   options_.transport.c_str(), errors[i].c_str());
      std::string inline_error = SendTo(tensors, version, target, options);
      if (!inline_error.empty())
        errors[i] = absl::StrCat(errors[i], "; inline fallback: ", inline_error);
      else
        errors[i].clear();
    });
  }
  for (auto& t : threads) t.join();
  if (sending.joinable()) sending.join();
  if (send && !report.ok()) return transport::ToAbsl(report.status());
  if (send) {
    published_ = true;
    last_version_ = version.version();
    retained_ = std::move(tensors);
  }
  v1::PublishWeightsResponse response;
  *response.mutable_weight_version() = version;
  for (int i = 0; i < targets.size(); ++i) {
    auto* result = response.add_results();
    result->set_replica_id(targets.Get(i).replica_id());
    result->set_ok(errors[i].empty());
    if (!errors[i].empty() && send) {
      // Say what the sender saw of this replica (closed, timed out) next to the RPC error.
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

}  // namespace rlmesh::trainer
