// Note [Unit test binaries] (cmake/unit_tests.cmake): the main of the
// LibTorch test binaries, which CTest runs one test suite per process. It is
// GoogleTest's own main, except that a run in which every test was skipped
// (a GPU suite on a host without one) exits 77, CTest's SKIP_RETURN_CODE,
// so the suite shows as not run rather than passed. A failure still exits 1.
#include "gtest/gtest.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  constexpr int kEveryTestSkipped = 77;
  if (result == 0 && unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count()) {
    return kEveryTestSkipped;
  }
  return result;
}
