#include "launcher/freeze_watch.h"

#include <algorithm>

namespace dslaunch {
namespace {

// Enough for any report; a process frozen and thawed all day keeps the newest.
constexpr size_t kKeptFreezes = 64;

}  // namespace

FreezeWatch::FreezeWatch(std::chrono::milliseconds tick, std::chrono::milliseconds threshold)
    : tick_(tick), threshold_(threshold), last_look_(Clock::now()), taken_until_(Clock::time_point::min()) {
  if (tick_.count() > 0) thread_ = std::thread([this] { Run(); });
}

FreezeWatch::~FreezeWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void FreezeWatch::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    stop_cv_.wait_for(lock, tick_, [&] { return stopping_; });
    const Clock::time_point now = Clock::now();
    if (std::optional<Freeze> freeze = OngoingLocked(now)) AddLocked(*freeze);
    last_look_ = now;
  }
}

std::optional<FreezeWatch::Freeze> FreezeWatch::OngoingLocked(Clock::time_point now) const {
  if (tick_.count() <= 0 || now - last_look_ < threshold_) return std::nullopt;
  return Freeze{last_look_, now};
}

void FreezeWatch::AddLocked(Freeze freeze) {
  // The same gap seen twice (first by TakeNew while the thread had not woken
  // up, then by the thread): one freeze, ending at the later look.
  for (Freeze& known : freezes_) {
    if (known.start == freeze.start) {
      known.end = std::max(known.end, freeze.end);
      return;
    }
  }
  freezes_.push_back(freeze);
  if (freezes_.size() > kKeptFreezes) freezes_.erase(freezes_.begin());
}

void FreezeWatch::Record(Freeze freeze) {
  std::lock_guard<std::mutex> lock(mu_);
  AddLocked(freeze);
}

std::vector<FreezeWatch::Freeze> FreezeWatch::TakeNew() {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::optional<Freeze> ongoing = OngoingLocked(Clock::now())) AddLocked(*ongoing);
  std::vector<Freeze> fresh;
  for (const Freeze& freeze : freezes_) {
    if (freeze.start > taken_until_) fresh.push_back(freeze);
  }
  for (const Freeze& freeze : fresh) taken_until_ = std::max(taken_until_, freeze.start);
  return fresh;
}

std::optional<FreezeWatch::Freeze> FreezeWatch::LongestSince(Clock::time_point since) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::optional<Freeze> ongoing = OngoingLocked(Clock::now())) AddLocked(*ongoing);
  std::optional<Freeze> longest;
  for (const Freeze& freeze : freezes_) {
    if (freeze.end < since) continue;
    if (!longest || freeze.duration() > longest->duration()) longest = freeze;
  }
  return longest;
}

}  // namespace dslaunch
