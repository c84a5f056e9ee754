#include "services/reward/proto_convert.h"

#include <string>

namespace rlmesh::reward {

RewardItem FromProto(const v1::RewardItem& proto) {
  RewardItem item;
  item.id = proto.id();
  item.data_source = proto.data_source();
  item.prompt = proto.prompt();
  item.response = proto.response();
  item.ground_truth = proto.ground_truth();
  item.extra_info.insert(proto.extra_info().begin(), proto.extra_info().end());
  item.extra_info_json = proto.extra_info_json();
  return item;
}

void ToProto(const RewardItem& item, v1::RewardItem* proto) {
  proto->set_id(item.id);
  proto->set_data_source(item.data_source);
  proto->set_prompt(item.prompt);
  proto->set_response(item.response);
  proto->set_ground_truth(item.ground_truth);
  proto->mutable_extra_info()->insert(item.extra_info.begin(), item.extra_info.end());
  proto->set_extra_info_json(item.extra_info_json);
}

void ToProto(const std::string& id, const ItemOutcome& outcome, v1::RewardResult* proto) {
  proto->set_id(id);
  if (!outcome.status.ok()) {
    proto->set_score(0.0);
    proto->set_error(outcome.status.ToString());
    proto->set_error_kind(ItemErrorKindName(outcome.error_kind));
    return;
  }
  proto->set_score(outcome.result.score);
  proto->mutable_extra_values()->insert(outcome.result.extra.begin(), outcome.result.extra.end());
}

}  // namespace rlmesh::reward
