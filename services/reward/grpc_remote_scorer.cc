#include "services/reward/grpc_remote_scorer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/rpc/client.h"
#include "common/status/status_macros.h"
#include "common/status/grpc_status.h"
#include "services/reward/proto_convert.h"

namespace rlmesh::reward {

absl::StatusOr<std::unique_ptr<GrpcRemoteScorer>> GrpcRemoteScorer::Create(
    const std::string& address, const rpc::ChannelOptions& channel) {
  if (address.empty()) {
    return absl::InvalidArgumentError(
        "config key rlmesh.reward.custom_address: expected host:port of a RewardService, got \"\"");
  }
  auto stub = v1::RewardService::NewStub(rpc::CreateChannel(address, channel));
  return std::unique_ptr<GrpcRemoteScorer>(new GrpcRemoteScorer(address, std::move(stub)));
}

absl::StatusOr<std::vector<absl::StatusOr<ScoreResult>>> GrpcRemoteScorer::ScoreBatch(
    const std::vector<RewardItem>& items, absl::Time deadline) {
  const double remaining = absl::ToDoubleSeconds(deadline - absl::Now());
  if (remaining <= 0) {
    return absl::DeadlineExceededError("the request deadline passed before the call");
  }
  v1::ScoreRequest request;
  for (const RewardItem& item : items) ToProto(item, request.add_items());
  request.set_timeout_seconds(remaining);
  v1::ScoreResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  RETURN_IF_ERROR(FromGrpcStatus(stub_->Score(&context, request, &response)));
  if (response.results_size() != static_cast<int>(items.size())) {
    return absl::InternalError(absl::StrCat("sent ", items.size(), " items, got ",
                                            response.results_size(), " results back"));
  }
  std::vector<absl::StatusOr<ScoreResult>> results;
  results.reserve(items.size());
  for (int i = 0; i < response.results_size(); ++i) {
    const v1::RewardResult& r = response.results(i);
    if (r.id() != items[i].id) {
      return absl::InternalError(absl::StrCat("result ", i, " has id \"", r.id(),
                                              "\", expected \"", items[i].id, "\""));
    }
    if (!r.error().empty()) {
      results.push_back(absl::UnknownError(r.error()));
      continue;
    }
    ScoreResult result;
    result.score = r.score();
    result.extra.insert(r.extra_values().begin(), r.extra_values().end());
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace rlmesh::reward
