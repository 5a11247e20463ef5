// The order samples are read in during one epoch.
//
// Note [Portable shuffling]
// std::shuffle and std::uniform_int_distribution are implementation-defined:
// libstdc++ and libc++ give different orders from the same engine. A resumed
// or re-sharded run must read the same samples on every build, so the
// permutation is our own Fisher-Yates over std::mt19937_64 (whose output the
// standard fixes) with rejection sampling for unbiased bounded draws.
#pragma once

#include <cstdint>
#include <vector>

namespace dslaunch::runtime {

// A permutation of [0, n), a pure function of (n, seed, epoch).
std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace dslaunch::runtime
