#include "services/coordinator/val_generations.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace rlmesh::coordinator {

std::vector<size_t> NumpyLegacyPermutation(size_t n, uint32_t seed) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 mt(seed);  // the same init_genrand and tempering as numpy's mt19937
  for (size_t i = n; i-- > 1;) {
    // numpy's random_interval(i): draws of 32 bits masked to i's bit width until one is <= i.
    uint32_t mask = static_cast<uint32_t>(i);
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    uint32_t j;
    do {
      j = static_cast<uint32_t>(mt()) & mask;
    } while (j > i);
    std::swap(order[i], order[j]);
  }
  return order;
}

std::vector<size_t> PickValGenerations(const std::vector<std::string>& inputs, size_t n) {
  std::vector<size_t> sorted(inputs.size());
  std::iota(sorted.begin(), sorted.end(), 0);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](size_t a, size_t b) { return inputs[a] < inputs[b]; });
  std::vector<size_t> picked;
  for (size_t k : NumpyLegacyPermutation(sorted.size(), 42)) {
    if (picked.size() == n) break;
    picked.push_back(sorted[k]);
  }
  return picked;
}

}  // namespace rlmesh::coordinator
