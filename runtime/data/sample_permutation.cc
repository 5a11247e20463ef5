#include "runtime/data/sample_permutation.h"

#include <numeric>
#include <random>

#include "common/seed_mix.h"

namespace dslaunch::runtime {
namespace {

// Uniform in [0, bound]. Draws from the top of the range that would bias the
// modulo are rejected.
uint64_t UniformUpTo(std::mt19937_64& rng, uint64_t bound) {
  if (bound == UINT64_MAX) return rng();
  const uint64_t range = bound + 1;
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % range + 1) % range;  // last accepted value
  uint64_t draw;
  do {
    draw = rng();
  } while (draw > limit);
  return draw % range;
}

}  // namespace

std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n > 0 ? n : 0));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937_64 rng(MixSeed(seed ^ MixSeed(static_cast<uint64_t>(epoch))));
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(UniformUpTo(rng, static_cast<uint64_t>(i)));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace dslaunch::runtime
