// A small, fully specified random source for data order and synthetic data. The standard
// library's distributions and std::shuffle are implementation-defined, so the same seed could
// give another order with another C++ library; a run's data order must be reproducible
// anywhere, so the algorithms here are spelled out: SplitMix64 for seeding, xoshiro256**
// for the stream, rejection sampling for bounded integers, Fisher-Yates for permutations.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace rlmesh::data {

// SplitMix64 step: a good 64-bit mix of `x` (Steele, Lea and Flood, 2014).
inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class Random {
 public:
  // The stream for (seed, stream): e.g. (data.seed, epoch).
  explicit Random(uint64_t seed, uint64_t stream = 0) {
    uint64_t state = seed ^ (stream * 0xD1B54A32D192ED03ULL);
    for (uint64_t& word : s_) word = SplitMix64(state);
  }

  // xoshiro256** (Blackman and Vigna, 2018).
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n) for n >= 1, without modulo bias.
  uint64_t Below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
      x = Next();
    } while (x >= limit);
    return x % n;
  }

  // Uniform in [lo, hi].
  int64_t Between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo) + 1));
  }

  // Fisher-Yates shuffle, from the back.
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[Below(i)]);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace rlmesh::data
