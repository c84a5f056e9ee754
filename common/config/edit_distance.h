// Levenshtein distance, for "did you mean" suggestions.
#pragma once

#include <cstddef>
#include <string_view>

namespace rlmesh::config {

// The minimum number of single-character insertions, deletions and substitutions that turn
// `a` into `b`.
size_t EditDistance(std::string_view a, std::string_view b);

}  // namespace rlmesh::config
