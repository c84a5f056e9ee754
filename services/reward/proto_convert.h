// Conversions between the rlmesh.v1 reward messages and the reward domain types, shared by
// the gRPC handler (server side) and GrpcRemoteScorer (client side).
#pragma once

#include "rlmesh/v1/reward.pb.h"
#include "services/reward/reward_service.h"
#include "services/reward/scorers/scorer.h"

namespace rlmesh::reward {

RewardItem FromProto(const v1::RewardItem& proto);
void ToProto(const RewardItem& item, v1::RewardItem* proto);

// A result message for `id`: score and extra values, or the error as "CODE: message".
void ToProto(const std::string& id, const ItemOutcome& outcome, v1::RewardResult* proto);

}  // namespace rlmesh::reward
