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
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <ucontext.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"

namespace {

void Write(const char* text) {
  if (text != nullptr) (void)!write(STDERR_FILENO, text, strlen(text));
}

void WriteHex(const char* label, uintptr_t value) {
  char text[2 + 16 + 1];
  text[0] = '0';
  text[1] = 'x';
  for (int i = 0; i < 16; ++i) text[2 + i] = "0123456789abcdef"[(value >> (60 - 4 * i)) & 0xf];
  text[18] = '\0';
  Write(label);
  Write(text);
}

void PrintStackAndDie(int signal_number, siginfo_t* info, void* context) {
  Write("\n*** ");
  Write(strsignal(signal_number));
  const testing::TestInfo* test = testing::UnitTest::GetInstance()->current_test_info();
  if (test != nullptr) {
    Write(" in ");
    Write(test->test_suite_name());
    Write(".");
    Write(test->name());
  }
  // Where it faulted: a jump to a bad address leaves no frame to unwind, so
  // the address and the instruction pointer are the only trace of it.
  if (info != nullptr) WriteHex("; address ", reinterpret_cast<uintptr_t>(info->si_addr));
#if defined(__x86_64__)
  if (context != nullptr) {
    const auto* registers = &static_cast<ucontext_t*>(context)->uc_mcontext;
    WriteHex(", rip ", static_cast<uintptr_t>(registers->gregs[REG_RIP]));
    WriteHex(", rsp ", static_cast<uintptr_t>(registers->gregs[REG_RSP]));
    // After a call to address 0 the word at rsp is where the call came from.
    if (registers->gregs[REG_RIP] == 0 && registers->gregs[REG_RSP] != 0) {
      WriteHex(", returning to ", *reinterpret_cast<const uintptr_t*>(registers->gregs[REG_RSP]));
    }
  }
#endif
  Write("; the stack:\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  // The executable mappings, to place rip in a library.
  static char maps[1 << 18];
  const int fd = open("/proc/self/maps", O_RDONLY);
  if (fd >= 0) {
    Write("executable mappings:\n");
    ssize_t length = 0, got = 0;
    while (length < static_cast<ssize_t>(sizeof(maps)) - 1 &&
           (got = read(fd, maps + length, sizeof(maps) - 1 - length)) > 0) {
      length += got;
    }
    close(fd);
    maps[length] = '\0';
    for (char* line = maps; *line != '\0';) {
      char* end = strchr(line, '\n');
      if (end != nullptr) *end = '\0';
      if (strstr(line, " r-xp ") != nullptr) {
        Write(line);
        Write("\n");
      }
      if (end == nullptr) break;
      line = end + 1;
    }
  }
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

void InstallCrashReporter() {
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder now, not inside the handler
  for (int signal_number : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
    struct sigaction action = {};
    action.sa_sigaction = PrintStackAndDie;
    action.sa_flags = SA_RESETHAND | SA_SIGINFO;
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
