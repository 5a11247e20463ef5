// SplitMix64's finaliser, for deriving seeds: neighbouring inputs (seed + 1,
// an epoch, a step) give unrelated outputs.
#pragma once

#include <cstdint>

namespace dslaunch {

inline uint64_t MixSeed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace dslaunch
