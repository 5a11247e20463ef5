// dscomm_bench: bus bandwidth of the runtime's collectives through its own
// Communicator (Gloo on CPUs, NCCL on GPUs), as nccl-tests defines it, so the
// figures sit next to nccl-tests' and PyTorch's (scripts/bench/pytorch_collectives.py).
//
//   dslaunch --num_gpus G dscomm_bench [--device auto|cpu|cuda] [--dtype float|bfloat16]
//       [--min_bytes 1048576] [--max_bytes 1073741824] [--iters 20] [--warmup 5]
//
// For each of all_reduce, reduce_scatter and all_gather and each size S (bytes
// of the whole buffer, doubling from min to max): the slowest rank's mean
// time per call, algbw = S / time, and busbw = algbw · 2(n-1)/n for
// all_reduce, · (n-1)/n for the other two. The first call of every size is
// checked: every rank contributes rank + 1, so each reduced element must be
// n(n+1)/2 and gathered chunk i must hold i + 1 (exact in float and bf16 for
// n ≤ 8 and beyond). Rank 0 prints one line per size; the exit status is 1 if
// any check failed.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/flag_table.h"
#include "common/rank_contract.h"
#include "common/store_client.h"
#include "runtime/comm/communicator.h"
#include "runtime/torch_compat.h"

namespace {

using dslaunch::runtime::Communicator;
using dslaunch::runtime::ReduceOp;

int Fail(const std::string& message) {
  std::fprintf(stderr, "dscomm_bench: %s\n", message.c_str());
  return 1;
}

enum class Op { kAllReduce, kReduceScatter, kAllGather };

const char* Name(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "all_reduce";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kAllGather:
      return "all_gather";
  }
  return "?";
}

// Buffers for one size: `input` is what a rank contributes, `output` where
// the result lands (all_reduce works in place on `input`).
struct Buffers {
  torch::Tensor input, output;
};

Buffers Make(Op op, int64_t elements, int n, int rank, const torch::TensorOptions& options) {
  const double mine = rank + 1;
  switch (op) {
    case Op::kAllReduce:
      return {torch::full({elements}, mine, options), {}};
    case Op::kReduceScatter:
      return {torch::full({elements}, mine, options), torch::empty({elements / n}, options)};
    case Op::kAllGather:
      return {torch::full({elements / n}, mine, options), torch::empty({elements}, options)};
  }
  return {};
}

absl::Status Run(Op op, Communicator& comm, Buffers& b) {
  switch (op) {
    case Op::kAllReduce:
      return comm.AllReduce(b.input, ReduceOp::kSum);
    case Op::kReduceScatter:
      return comm.ReduceScatter(b.input, b.output, ReduceOp::kSum);
    case Op::kAllGather:
      return comm.AllGather(b.input, b.output);
  }
  return absl::InternalError("unknown op");
}

bool Correct(Op op, const Buffers& b, int n) {
  const double reduced = n * (n + 1) / 2.0;
  switch (op) {
    case Op::kAllReduce:
      return torch::all(b.input.to(torch::kDouble) == reduced).item<bool>();
    case Op::kReduceScatter:
      return torch::all(b.output.to(torch::kDouble) == reduced).item<bool>();
    case Op::kAllGather: {
      auto expected = torch::arange(1, n + 1, torch::kDouble).repeat_interleave(b.input.numel());
      return torch::equal(b.output.to(torch::kDouble).cpu(), expected);
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dslaunch;
  using namespace dslaunch::runtime;
  std::string device_choice = "auto", dtype = "float";
  int64_t min_bytes = int64_t{1} << 20, max_bytes = int64_t{1} << 30, iters = 20, warmup = 5;
  int64_t ignored_local_rank = -1;
  FlagTable flags("dscomm_bench", "dslaunch --num_gpus G dscomm_bench [flags]");
  flags.String("--device", &device_choice, "", "where the buffers live", {"auto", "cpu", "cuda"})
      .String("--dtype", &dtype, "", "element type", {"float", "bfloat16"})
      .Int("--min_bytes", &min_bytes, "N", "smallest message", {1, INT64_MAX})
      .Int("--max_bytes", &max_bytes, "N", "largest message (sizes double up to it)", {1, INT64_MAX})
      .Int("--iters", &iters, "N", "timed iterations per size", {1, INT64_MAX})
      .Int("--warmup", &warmup, "N", "untimed iterations per size", {1, INT64_MAX})
      .Int("--local_rank", &ignored_local_rank, "N", "ignored: LOCAL_RANK is in the environment");
  if (absl::Status parsed = flags.Parse(std::vector<std::string>(argv + 1, argv + argc)); !parsed.ok()) {
    return Fail(absl::StrCat(parsed.message(), " (dscomm_bench --help lists the flags)"));
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (flags.version_requested()) {
    std::printf("%s\n", flags.Version().c_str());
    return 0;
  }
  if (!flags.positionals().empty()) return Fail("unexpected argument '" + flags.positionals().front() + "'");
  if (min_bytes > max_bytes) return Fail("--min_bytes is larger than --max_bytes");
  auto env = ReadRankEnvironment();
  if (!env.ok()) return Fail(std::string(env.status().message()));
  const int rank = env->rank, n = env->world_size, local_rank = env->local_rank;
  if (!env->has_store()) {
    return Fail("run it under dslaunch (it needs the job's store): dslaunch --num_gpus G dscomm_bench");
  }
  const bool cuda = device_choice == "cuda" || (device_choice == "auto" && torch::cuda::is_available());
  if (cuda && !torch::cuda::is_available()) return Fail("--device cuda: no CUDA device");
  const torch::Device device =
      cuda ? torch::Device(torch::kCUDA, local_rank % std::max<int>(1, torch::cuda::device_count())) : torch::kCPU;
  compat::SetCurrentCudaDevice(device);  // NCCL joins on the current device
  const auto options = torch::TensorOptions().device(device).dtype(dtype == "float" ? torch::kFloat : torch::kBFloat16);
  const int64_t element_bytes = dtype == "float" ? 4 : 2;

  auto store = StoreClient::FromContract(*env);
  if (!store.ok()) return Fail(std::string(store.status().message()));
  GroupSpec group{"comm-bench", {}, rank};
  for (int r = 0; r < n; ++r) group.members.push_back(r);
  auto comm = CreateCommunicator(cuda ? CommBackend::kNccl : CommBackend::kGloo, **store, group);
  if (!comm.ok()) return Fail(std::string(comm.status().message()));
  if (rank == 0) {
    std::printf("dscomm_bench: %d rank(s), %s, %s\n", n, (*comm)->backend().c_str(), dtype.c_str());
    std::printf("%-15s %14s %12s %12s %12s %6s\n", "op", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s", "check");
  }
  bool all_correct = true;
  try {
    for (Op op : {Op::kAllReduce, Op::kReduceScatter, Op::kAllGather}) {
      for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
        // Whole elements, a whole number of them per rank.
        const int64_t elements = std::max<int64_t>(n, bytes / element_bytes / n * n);
        Buffers buffers = Make(op, elements, n, rank, options);
        absl::Status status = Run(op, **comm, buffers);
        if (!status.ok()) return Fail(absl::StrCat(Name(op), ": ", status.message()));
        const bool correct = Correct(op, buffers, n);
        all_correct = all_correct && correct;
        for (int64_t i = 0; i < warmup; ++i) {
          if (auto s = Run(op, **comm, buffers); !s.ok()) return Fail(std::string(s.message()));
        }
        compat::SynchronizeDevice(device);
        if (auto s = (*comm)->Barrier(); !s.ok()) return Fail(std::string(s.message()));
        const auto start = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < iters; ++i) {
          if (auto s = Run(op, **comm, buffers); !s.ok()) return Fail(std::string(s.message()));
        }
        compat::SynchronizeDevice(device);
        double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
        // The slowest rank's time is the collective's.
        torch::Tensor slowest = torch::full({1}, seconds, torch::TensorOptions().dtype(torch::kFloat).device(device));
        if (auto s = (*comm)->AllReduce(slowest, ReduceOp::kMax); !s.ok()) return Fail(std::string(s.message()));
        seconds = slowest.item<double>();
        const double total = static_cast<double>(elements * element_bytes);
        const double algbw = total / seconds / 1e9;
        const double factor = op == Op::kAllReduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
        if (rank == 0) {
          std::printf("%-15s %14lld %12.1f %12.4f %12.4f %6s\n", Name(op), static_cast<long long>(total), seconds * 1e6,
                      algbw, algbw * factor, correct ? "ok" : "WRONG");
          std::fflush(stdout);
        }
      }
    }
  } catch (const c10::Error& e) {
    return Fail(e.what_without_backtrace());
  }
  if (!all_correct) return Fail(absl::StrCat("rank ", rank, ": a collective returned wrong values"));
  return 0;
}
