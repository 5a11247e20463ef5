#include "launcher/signal_forwarder.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace dslaunch {

sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

SignalForwarder::SignalForwarder(sigset_t signals, std::function<void(const std::string&)> notice)
    : signals_(signals), notice_(std::move(notice)) {
  thread_ = std::thread([this] { Forward(); });
}

SignalForwarder::~SignalForwarder() {
  stopping_.store(true);
  pthread_kill(thread_.native_handle(), SIGUSR2);
  thread_.join();
}

void SignalForwarder::Forward() {
  while (true) {
    int signal_number = 0;
    if (sigwait(&signals_, &signal_number) != 0) continue;
    if (signal_number == SIGUSR2) {
      if (stopping_.load()) return;  // our own shutdown poke
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (planning_) ExitWhilePlanning(signal_number);
    if (controller_ != nullptr) {
      controller_->OnSignal(signal_number);
    } else if (pending_ == 0) {
      pending_ = signal_number;
    }
  }
}

void SignalForwarder::EndPlanning() {
  std::lock_guard<std::mutex> lock(mu_);  // waits out an exit in progress
  planning_ = false;
}

void SignalForwarder::Attach(JobController* controller) {
  std::lock_guard<std::mutex> lock(mu_);
  controller_ = controller;
  if (controller_ != nullptr && pending_ != 0) controller_->OnSignal(pending_);
}

int SignalForwarder::pending() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

void SignalForwarder::ExitWhilePlanning(int signal_number) {
  notice_(absl::StrCat("received SIG", sigabbrev_np(signal_number), " while planning the job; nothing was started"));
  ::_exit(128 + signal_number);
}

}  // namespace dslaunch
