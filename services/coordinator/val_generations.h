// Which validation samples trainer.log_val_generations logs, chosen as verl chooses them
// (ray_trainer.py, _maybe_log_val_generations): the samples stably sorted by their input
// text, shuffled by numpy's RandomState(42), and the first n taken; so the same prompts are
// logged at every validation of a run. Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rlmesh::coordinator {

// numpy's legacy RandomState(seed).shuffle of [0, n): MT19937 seeded with init_genrand, and
// for i = n-1 down to 1 a draw j in [0, i] by masked rejection, then a swap. RandomState(42)'s
// permutation(10) is [8, 1, 5, 0, 7, 2, 9, 4, 3, 6].
std::vector<size_t> NumpyLegacyPermutation(size_t n, uint32_t seed);

// Indices into `inputs` of the (at most) n samples to log, in the order to log them.
std::vector<size_t> PickValGenerations(const std::vector<std::string>& inputs, size_t n);

}  // namespace rlmesh::coordinator
