#include "services/trainer/weight_publisher.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc/client.h"
#include "rlmesh/v1/rollout.grpc.pb.h"
#include "services/rollout/tensor_codec.h"

namespace rlmesh::trainer {

namespace {

std::string SendTo(const NamedTensors& tensors, const v1::WeightVersion& version,
                   const v1::WeightTarget& target, const PublishOptions& options) {
  auto stub = v1::RolloutService::NewStub(rpc::CreateChannel(target.address(), options.channel));
  const auto deadline = std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000));
  auto call = [&](const v1::UpdateWeightsRequest& request) -> std::string {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    v1::UpdateWeightsResponse response;
    grpc::Status status = stub->UpdateWeights(&context, request, &response);
    if (!status.ok()) {
      return absl::StrCat("UpdateWeights (phase ", v1::WeightUpdatePhase_Name(request.phase()),
                          ") on ", target.address(), ": ", status.error_message());
    }
    return "";
  };
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

}  // namespace rlmesh::trainer
