#include "common/dist/local_group.h"

#include <future>

namespace rlmesh::dist {

absl::StatusOr<std::vector<std::unique_ptr<Group>>> JoinLocalGroup(int world_size, double timeout_s,
                                                                   const std::string& backend) {
  std::promise<int> port;
  std::shared_future<int> port_future = port.get_future().share();
  std::vector<std::future<absl::StatusOr<std::unique_ptr<Group>>>> joins;
  for (int r = 0; r < world_size; ++r) {
    joins.push_back(std::async(std::launch::async, [=, &port] {
      GroupOptions o;
      o.rank = r;
      o.world_size = world_size;
      o.timeout_s = timeout_s;
      o.backend = backend;
      o.cuda_device = r;
      if (r > 0) {
        o.port = port_future.get();
        return Group::Join(o);
      }
      bool listened = false;
      o.listening = [&port, &listened](int p) {
        listened = true;
        port.set_value(p);
      };
      auto joined = Group::Join(o);
      // Refused before listening: the others are refused too (no port), instead of waiting.
      if (!listened) port.set_value(0);
      return joined;
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
