// Note [Unit test binaries] (cmake/unit_tests.cmake): the main of the
// LibTorch test binaries, which CTest runs one test suite per process. It is
// GoogleTest's own main, except that under CTest (which sets
// DSLAUNCH_ALL_SKIPPED_EXIT_CODE, cmake/list_gtest_suites.cmake) a run in
// which every test was skipped (a GPU suite on a host without one) exits
// with that code, the test's SKIP_RETURN_CODE, so the suite shows as not run
// rather than passed. Run by hand or by a script, the binary exits as
// GoogleTest's main does; a failure exits 1 either way.
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  const char* all_skipped_variable = std::getenv("DSLAUNCH_ALL_SKIPPED_EXIT_CODE");
  int all_skipped_code = 0;
  if (result == 0 && all_skipped_variable != nullptr && absl::SimpleAtoi(all_skipped_variable, &all_skipped_code) &&
      unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count()) {
    return all_skipped_code;
  }
  return result;
}
