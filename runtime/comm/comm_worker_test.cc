#include "runtime/comm/comm_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <string>
#include <memory>
#include <vector>

namespace dslaunch::runtime {
namespace {

TEST(CommWorkerTest, RunsTasksInOrderAndDrainReturnsTheFirstError) {
  CommWorker worker;
  std::vector<int> order;  // written by the worker thread only, read after Drain
  std::vector<CommTicket> tickets;
  for (int i = 0; i < 5; ++i) {
    tickets.push_back(worker.Submit([&order, i]() -> absl::Status {
      order.push_back(i);
      if (i == 2) return absl::InternalError("task 2");
      if (i == 3) return absl::InternalError("task 3");
      return absl::OkStatus();
    }));
  }
  absl::Status drained = worker.Drain();
  EXPECT_EQ(drained.message(), "task 2");
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(tickets[1].Wait().ok());
  EXPECT_EQ(tickets[3].Wait().message(), "task 3");
  EXPECT_TRUE(worker.Drain().ok()) << "an error is reported once";
}

// After an error the peers may never join the queued collectives: the
// destructor finishes the task in progress and cancels the others instead
// of running them.
// The threads of this process (Linux's /proc/self/status).
int ThreadsOfThisProcess() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// A worker nobody submits to (a GPU tensor group's) starts no thread; the
// first task starts it; a drain and the destructor need none.
TEST(CommWorkerTest, TheThreadStartsWithTheFirstTask) {
  const int before = ThreadsOfThisProcess();
  ASSERT_GT(before, 0);
  {
    CommWorker idle;
    EXPECT_EQ(ThreadsOfThisProcess(), before);
    EXPECT_TRUE(idle.Drain().ok());
  }
  CommWorker worker;
  EXPECT_EQ(ThreadsOfThisProcess(), before);
  EXPECT_TRUE(worker.Submit([] { return absl::OkStatus(); }).Wait().ok());
  EXPECT_EQ(ThreadsOfThisProcess(), before + 1);
}

TEST(CommWorkerTest, DestructionCancelsTasksNotStarted) {
  std::promise<void> started, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> ran{0};
  std::vector<CommTicket> tickets;
  auto worker = std::make_unique<CommWorker>();
  tickets.push_back(worker->Submit([&]() -> absl::Status {
    started.set_value();
    released.wait();
    ++ran;
    return absl::OkStatus();
  }));
  for (int i = 0; i < 3; ++i) {
    tickets.push_back(worker->Submit([&]() -> absl::Status {
      ++ran;
      return absl::OkStatus();
    }));
  }
  started.get_future().wait();  // the first task is in progress
  std::thread destroy([&] { worker.reset(); });
  // The queue is dropped before the destructor joins; release the first
  // task only then, so none of the others can have been started.
  for (size_t i = 1; i < tickets.size(); ++i) EXPECT_TRUE(absl::IsCancelled(tickets[i].Wait())) << "task " << i;
  release.set_value();
  destroy.join();
  EXPECT_TRUE(tickets[0].Wait().ok());
  EXPECT_EQ(ran.load(), 1);
}

}  // namespace
}  // namespace dslaunch::runtime
