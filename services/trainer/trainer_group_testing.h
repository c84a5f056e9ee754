// For tests: W trainers in one process forming one group over a local store, as the W
// processes of `rlmesh run` do (common/dist/local_group.h).
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "common/dist/local_group.h"
#include "gtest/gtest.h"
#include "services/trainer/trainer.h"

namespace rlmesh::trainer {

// W trainers forming one group: rank 0 takes the requests, the others serve it on threads.
class TrainerGroup {
 public:
  TrainerGroup(int world_size, const config::TrainerSettings& settings) {
    auto groups = dist::JoinLocalGroup(world_size);
    EXPECT_TRUE(groups.ok()) << groups.status();
    if (!groups.ok()) return;
    groups_ = std::move(groups).value();
    // At once, as the processes of a group start: hybrid sharding forms its shard groups.
    std::vector<std::unique_ptr<Trainer>> created(static_cast<size_t>(world_size));
    dist::OnEveryRank(world_size, [&](int r) {
      auto trainer = Trainer::Create(settings, {}, groups_[r].get());
      EXPECT_TRUE(trainer.ok()) << trainer.status();
      if (trainer.ok()) created[r] = std::move(trainer).value();
    });
    for (auto& trainer : created) {
      if (trainer == nullptr) return;
      trainers_.push_back(std::move(trainer));
    }
    for (int r = 1; r < world_size; ++r) {
      serving_.emplace_back([this, r] { EXPECT_TRUE(trainers_[r]->ServeRank().ok()) << r; });
    }
  }
  ~TrainerGroup() {
    if (!trainers_.empty()) trainers_[0]->StopRanks();
    for (auto& t : serving_) t.join();
  }
  Trainer& rank0() { return *trainers_.at(0); }
  bool ok() const { return !trainers_.empty(); }

 private:
  std::vector<std::unique_ptr<dist::Group>> groups_;
  std::vector<std::unique_ptr<Trainer>> trainers_;
  std::vector<std::thread> serving_;
};

}  // namespace rlmesh::trainer
