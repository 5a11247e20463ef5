#include "kernels/range_thread_pool.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace dslaunch::kernels {
namespace {

// Runs ParallelFor and returns the pieces it made, sorted.
std::vector<std::pair<int64_t, int64_t>> Pieces(RangeThreadPool& pool, int64_t n,
                                                int64_t min_piece, int64_t align) {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> pieces;
  pool.ParallelFor(n, min_piece, align, [&](int64_t begin, int64_t end) {
    std::lock_guard<std::mutex> lock(mu);
    pieces.emplace_back(begin, end);
  });
  std::sort(pieces.begin(), pieces.end());
  return pieces;
}

TEST(RangeThreadPoolTest, PiecesCoverTheRangeOnceAligned) {
  RangeThreadPool pool(4);
  for (int64_t n : {1, 15, 16, 100, 1000, 1001, 65536 * 4 + 3}) {
    const auto pieces = Pieces(pool, n, /*min_piece=*/16, /*align=*/16);
    ASSERT_FALSE(pieces.empty());
    EXPECT_LE(pieces.size(), 4u);
    int64_t next = 0;
    for (const auto& [begin, end] : pieces) {
      EXPECT_EQ(begin, next) << "n=" << n;
      EXPECT_EQ(begin % 16, 0) << "n=" << n;
      EXPECT_LT(begin, end) << "n=" << n;
      if (end != n) {
        EXPECT_GE(end - begin, 16) << "n=" << n;
      }
      next = end;
    }
    EXPECT_EQ(next, n);
  }
}

TEST(RangeThreadPoolTest, SmallRangesRunInlineInOnePiece) {
  RangeThreadPool pool(4);
  std::thread::id ran_on;
  pool.ParallelFor(1000, /*min_piece=*/4096, /*align=*/16, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 1000);
    ran_on = std::this_thread::get_id();
  });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(RangeThreadPoolTest, ConcurrentCallersTakeTurns) {
  RangeThreadPool pool(3);
  constexpr int64_t kN = 1 << 16;
  std::vector<std::atomic<int>> hits(kN);
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        pool.ParallelFor(kN, 1024, 16, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
        });
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(hits[i].load(), 4 * 50) << i;
}

TEST(RangeThreadPoolTest, OneThreadPoolRunsEverythingOnTheCaller) {
  RangeThreadPool pool(1);
  EXPECT_EQ(pool.num_threads(), 1);
  EXPECT_EQ(Pieces(pool, 1 << 20, 16, 16).size(), 1u);
}

}  // namespace
}  // namespace dslaunch::kernels
