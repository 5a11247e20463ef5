// DeepSpeed's comms logger (ds_config `comms_logger`): every collective a
// rank makes, timed, by op and message size, with its algorithmic and bus
// bandwidth; each call printed with `verbose`, and a summary table.
//
// Note [Comms logger]
// The flight recorder (flight_recorder.h) already sees every call of every
// process group; with a logger attached, RecordingCommunicator also times
// each call it is asked to profile (`prof_all`, or the ops in `prof_ops`):
// it waits for the device before and after the call, as DeepSpeed's logger
// does, so the time is the collective's and not the launch's. That wait
// costs speed, which is why the logger is off by default; off, the cost is
// one atomic load per call.
//
// Bandwidth as DeepSpeed's calc_bw_log (after nccl-tests), in Gbit/s, where
// S is the message size and n the size of the call's own process group
// (DeepSpeed takes the world size; the group's is what the call moved):
//   all_reduce        algbw = 2S/t  busbw = S/t · 2(n-1)/n
//   all_gather        algbw = S/t   busbw = S/t · (n-1)/n   (S: the gathered output)
//   reduce_scatter    algbw = S/t   busbw = S/t · (n-1)/n   (S: the whole input)
//   all_to_all        algbw = S/t   busbw = S/t · (n-1)/n
//   broadcast, send, recv, send_recv, barrier: algbw = busbw = S/t
// The summary's averages are means with the top and bottom 10% of latencies
// trimmed (DeepSpeed's trim_mean(·, 0.1)).
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dslaunch::runtime {

struct CommsLoggerOptions {
  bool verbose = false;
  bool prof_all = true;
  std::vector<std::string> prof_ops;  // this runtime's op names (common/collective_op_names.h)
};

class CommsLogger {
 public:
  // `print` receives each call's line with `verbose` (rank 0's, say).
  CommsLogger(CommsLoggerOptions options, std::function<void(const std::string&)> print);

  // Whether calls of `op` are to be timed.
  bool Wants(const char* op) const;
  void Record(const char* op, const std::string& group, int group_size, int64_t bytes, double seconds);

  // One row per op and message size, ops in name order, sizes ascending:
  // count, total and average latency, average algbw and busbw. "" before
  // any call.
  std::string Summary() const;

  // algbw and busbw in Gbit/s of one call (see the note).
  static std::pair<double, double> Bandwidth(const std::string& op, int group_size, int64_t bytes, double seconds);

 private:
  struct Calls {
    std::vector<double> seconds;
    std::vector<double> algbw;
    std::vector<double> busbw;
  };

  const CommsLoggerOptions options_;
  const std::function<void(const std::string&)> print_;
  mutable std::mutex mu_;
  std::map<std::string, std::map<int64_t, Calls>> calls_;  // op → bytes → calls; guarded by mu_
};

}  // namespace dslaunch::runtime
