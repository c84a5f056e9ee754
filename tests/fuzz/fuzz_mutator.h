// The input mutations of the deterministic fuzz driver (fuzz_driver.cc): byte flips, inserts,
// deletes, duplicated and spliced chunks, numbers replaced by extremes (2147483647, -1, 1e308,
// 18446744073709551616, ...), runs of brackets deep enough to pass any nesting bound, syntax
// tokens of JSON, YAML and PCRE2, and truncation. Everything is drawn from Rng, whose output
// depends only on its seed (no std:: distribution, whose results differ between standard
// libraries), so a run is the same on every machine. Not thread-safe; one per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rlmesh::fuzz {

// xoshiro256** seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, n); 0 when n is 0.
  uint64_t Below(uint64_t n);
  bool OneIn(uint64_t n) { return Below(n) == 0; }

 private:
  uint64_t s_[4];
};

// A mutant of `input`: one to six mutations stacked, splicing from `corpus` (may be empty),
// at most `max_len` bytes.
std::string Mutate(const std::string& input, const std::vector<std::string>& corpus, size_t max_len,
                   Rng& rng);

}  // namespace rlmesh::fuzz
