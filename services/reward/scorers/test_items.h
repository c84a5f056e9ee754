// Test helper: a RewardItem from its response and ground truth (designated initializers
// would trip -Wmissing-field-initializers).
#pragma once

#include <string>

#include "services/reward/scorers/scorer.h"

namespace rlmesh::reward {

inline RewardItem Item(std::string response, std::string ground_truth,
                       std::string data_source = "", std::string id = "0") {
  RewardItem item;
  item.id = std::move(id);
  item.data_source = std::move(data_source);
  item.response = std::move(response);
  item.ground_truth = std::move(ground_truth);
  return item;
}

}  // namespace rlmesh::reward
