// Note [Unit test binaries] (cmake/unit_tests.cmake): the main of the
// LibTorch test binaries, which CTest runs one test suite per process. It is
// GoogleTest's own main, except that under CTest (which sets
// DSLAUNCH_ALL_SKIPPED_EXIT_CODE, cmake/list_gtest_suites.cmake) a run in
// which every test was skipped (a GPU suite on a host without one) exits
// with that code, the test's SKIP_RETURN_CODE, so the suite shows as not run
// rather than passed. Run by hand or by a script, the binary exits as
// GoogleTest's main does; a failure exits 1 either way. A crash (SIGSEGV,
// SIGBUS, SIGFPE, SIGILL, SIGABRT) prints the test it happened in and the
// stack, then dies of the same signal: a crash on a host we cannot log into
// (the GPU machine) says where it was.
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"

namespace {

void Write(const char* text) {
  if (text != nullptr) (void)!write(STDERR_FILENO, text, strlen(text));
}

void PrintStackAndDie(int signal_number) {
  Write("\n*** ");
  Write(strsignal(signal_number));
  const testing::TestInfo* test = testing::UnitTest::GetInstance()->current_test_info();
  if (test != nullptr) {
    Write(" in ");
    Write(test->test_suite_name());
    Write(".");
    Write(test->name());
  }
  Write("; the stack:\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

void InstallCrashReporter() {
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder now, not inside the handler
  for (int signal_number : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
    struct sigaction action = {};
    action.sa_handler = PrintStackAndDie;
    action.sa_flags = SA_RESETHAND;
    sigaction(signal_number, &action, nullptr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  InstallCrashReporter();
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
