#include "common/dist/local_group.h"

#include <future>

namespace rlmesh::dist {

absl::StatusOr<std::vector<std::unique_ptr<Group>>> JoinLocalGroup(int world_size,
                                                                   double timeout_s) {
  std::promise<int> port;
  std::shared_future<int> port_future = port.get_future().share();
  std::vector<std::future<absl::StatusOr<std::unique_ptr<Group>>>> joins;
  for (int r = 0; r < world_size; ++r) {
    joins.push_back(std::async(std::launch::async, [=, &port] {
      GroupOptions o;
      o.rank = r;
      o.world_size = world_size;
      o.timeout_s = timeout_s;
      if (r == 0) {
        o.listening = [&port](int p) { port.set_value(p); };
      } else {
        o.port = port_future.get();
      }
      return Group::Join(o);
    }));
  }
  std::vector<std::unique_ptr<Group>> groups;
  absl::Status first;
  for (auto& j : joins) {
    auto group = j.get();
    if (!group.ok()) {
      if (first.ok()) first = group.status();
      groups.push_back(nullptr);
    } else {
      groups.push_back(std::move(group).value());
    }
  }
  if (!first.ok()) return first;
  return groups;
}

}  // namespace rlmesh::dist
