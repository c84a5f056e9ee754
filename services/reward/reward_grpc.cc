#include "services/reward/reward_grpc.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/rpc/log.h"
#include "common/status/grpc_status.h"
#include "services/reward/proto_convert.h"

namespace rlmesh::reward {

absl::Status ValidateScoreRequest(const v1::ScoreRequest& request,
                                  const RewardGrpcOptions& options) {
  if (request.items_size() == 0) {
    return absl::InvalidArgumentError("items: expected at least one item, got none");
  }
  if (request.items_size() > options.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat("items: ", request.items_size(),
                                                   " items exceed the limit of ",
                                                   options.max_batch_size, " per request"));
  }
  if (!std::isfinite(request.timeout_seconds()) || request.timeout_seconds() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_seconds: expected a finite number >= 0 (0 = server default), got ",
                     request.timeout_seconds()));
  }
  absl::flat_hash_map<std::string, int> first_index;
  for (int i = 0; i < request.items_size(); ++i) {
    const v1::RewardItem& item = request.items(i);
    if (item.id().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("items[", i, "].id: expected a non-empty id, got \"\""));
    }
    if (item.data_source().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "items[", i, "].data_source: expected the data source naming the scorer, got \"\""));
    }
    auto [it, inserted] = first_index.emplace(item.id(), i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("items[", i, "].id: duplicate id \"",
                                                     item.id(), "\" (also items[", it->second,
                                                     "].id); ids must be unique in a request"));
    }
  }
  return absl::OkStatus();
}

grpc::Status RewardGrpcService::Score(grpc::ServerContext* context, const v1::ScoreRequest* request,
                                      v1::ScoreResponse* response) try {
  const absl::Time start = absl::Now();
  if (absl::Status valid = ValidateScoreRequest(*request, options_); !valid.ok()) {
    metrics_->RecordRejectedItems(request->items_size());
    rpc::Log("reward", "rejected a Score request: %s", std::string(valid.message()).c_str());
    return ToGrpcStatus(valid);
  }
  if (request->use_reward_model() && !service_->has_reward_model()) {
    metrics_->RecordRejectedItems(request->items_size());
    return ToGrpcStatus(absl::InvalidArgumentError(
        "use_reward_model: this reward service has no reward model (start it with "
        "reward_model.enable=true and reward_model.model.path)"));
  }
  std::vector<RewardItem> items;
  items.reserve(request->items_size());
  for (const v1::RewardItem& item : request->items()) items.push_back(FromProto(item));

  const absl::Time deadline = service_->DeadlineFor(absl::Seconds(request->timeout_seconds()),
                                                    absl::FromChrono(context->deadline()));
  const absl::Time scoring_start = absl::Now();
  const std::vector<ItemOutcome> outcomes =
      service_->ScoreBatch(items, deadline, request->use_reward_model());
  response->set_compute_seconds(absl::ToDoubleSeconds(absl::Now() - scoring_start));

  int errors = 0;
  const ItemOutcome* first_error = nullptr;
  for (size_t i = 0; i < items.size(); ++i) {
    const ItemOutcome& outcome = outcomes[i];
    ToProto(items[i].id, outcome, response->add_results());
    const std::string& source = items[i].data_source;
    metrics_->RecordItem(service_->IsKnownDataSource(source) ? source : "other", outcome);
    if (!outcome.status.ok()) {
      ++errors;
      if (first_error == nullptr) first_error = &outcome;
    }
  }
  metrics_->RecordRequest(absl::ToDoubleSeconds(absl::Now() - start));
  if (errors > 0) {
    rpc::Log("reward", "%d of %zu items failed; first: %s", errors, items.size(),
             first_error->status.ToString().c_str());
  }
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("RewardService.Score");
}

}  // namespace rlmesh::reward
