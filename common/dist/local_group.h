// A whole group of W ranks inside one process, as threads over loopback: for tests and
// benchmarks that compare W ranks against one. Rank 0 starts first and hands its store's port
// to the others.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dist/group.h"

namespace rlmesh::dist {

// The W joined groups, index = rank; the first failure's status if any rank cannot join.
// With backend "nccl" rank r takes CUDA device r.
absl::StatusOr<std::vector<std::unique_ptr<Group>>> JoinLocalGroup(
    int world_size, double timeout_s = 60, const std::string& backend = "gloo");

// Runs f(rank) on one thread per rank at once and waits for them all.
template <typename F>
void OnEveryRank(int world_size, F f) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) threads.emplace_back([&f, r] { f(r); });
  for (auto& t : threads) t.join();
}

}  // namespace rlmesh::dist
