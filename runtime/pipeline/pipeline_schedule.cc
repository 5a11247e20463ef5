#include "runtime/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dslaunch::runtime {
namespace {

struct Pass {
  bool forward = true;
  int micro_batch = 0;
  int chunk = 0;
};

// Forwards stage `stage` runs before its first backward.
int WarmupPasses(PipelineScheduleKind kind, const PipelineShape& shape, int stage) {
  const int total = shape.micro_batches * shape.virtual_stages;
  switch (kind) {
    case PipelineScheduleKind::kGPipe:
      return total;
    case PipelineScheduleKind::kOneForwardOneBackward:
      return std::min(shape.stages - stage - 1, total);
    case PipelineScheduleKind::kInterleaved:
      // Megatron: with as many micro-batches as stages the chunks cannot
      // overlap, and every forward runs first.
      if (shape.micro_batches == shape.stages) return total;
      return std::min((shape.stages - stage - 1) * 2 + (shape.virtual_stages - 1) * shape.stages, total);
  }
  return total;
}

// The k-th forward (or backward) pass of a stage in the interleaved order:
// groups of S micro-batches go through chunk 0, then chunk 1, ...; backward
// visits the chunks in reverse.
Pass InterleavedPass(const PipelineShape& shape, int k, bool forward) {
  const int group = shape.stages * shape.virtual_stages;
  int chunk = (k % group) / shape.stages;
  if (!forward) chunk = shape.virtual_stages - 1 - chunk;
  return Pass{forward, (k / group) * shape.stages + k % shape.stages, chunk};
}

std::vector<Pass> ComputeOrder(PipelineScheduleKind kind, const PipelineShape& shape, int stage) {
  const int total = shape.micro_batches * shape.virtual_stages;
  const bool interleaved = kind == PipelineScheduleKind::kInterleaved;
  auto nth = [&](int k, bool forward) {
    return interleaved ? InterleavedPass(shape, k, forward) : Pass{forward, k, 0};
  };
  const int warmup = WarmupPasses(kind, shape, stage);
  std::vector<Pass> order;
  for (int k = 0; k < warmup; ++k) order.push_back(nth(k, true));
  for (int k = 0; k < total - warmup; ++k) {
    order.push_back(nth(warmup + k, true));
    order.push_back(nth(k, false));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(nth(k, false));
  return order;
}

int InFlightBound(PipelineScheduleKind kind, const PipelineShape& shape, int stage) {
  const int total = shape.micro_batches * shape.virtual_stages;
  return std::min(WarmupPasses(kind, shape, stage) + 1, total);
}

const char* TensorName(PipeTensor tensor) { return tensor == PipeTensor::kActivation ? "activation" : "gradient"; }

}  // namespace

absl::StatusOr<PipelineScheduleKind> ParsePipelineSchedule(const std::string& name) {
  if (name == "gpipe") return PipelineScheduleKind::kGPipe;
  if (name == "1f1b") return PipelineScheduleKind::kOneForwardOneBackward;
  if (name == "interleaved") return PipelineScheduleKind::kInterleaved;
  return absl::InvalidArgumentError(
      absl::StrCat("pipeline.schedule=\"", name, "\": the schedules are \"1f1b\", \"interleaved\" and \"gpipe\""));
}

std::string PipelineScheduleName(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::kGPipe:
      return "gpipe";
    case PipelineScheduleKind::kOneForwardOneBackward:
      return "1f1b";
    case PipelineScheduleKind::kInterleaved:
      return "interleaved";
  }
  return "?";
}

absl::Status ValidatePipelineShape(PipelineScheduleKind kind, const PipelineShape& shape) {
  if (shape.stages < 1 || shape.micro_batches < 1 || shape.virtual_stages < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a pipeline needs at least one stage (", shape.stages,
                                                   "), micro-batch (", shape.micro_batches, ") and virtual stage (",
                                                   shape.virtual_stages, ")"));
  }
  if (kind != PipelineScheduleKind::kInterleaved && shape.virtual_stages != 1) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline.virtual_stages=", shape.virtual_stages,
                                                   " needs pipeline.schedule=\"interleaved\""));
  }
  if (kind == PipelineScheduleKind::kInterleaved) {
    if (shape.stages < 2) {
      return absl::InvalidArgumentError("pipeline.schedule=\"interleaved\" needs at least 2 stages");
    }
    if (shape.micro_batches % shape.stages != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.schedule=\"interleaved\" needs gradient_accumulation_steps (the micro-batches, ",
          shape.micro_batches, ") to be a multiple of pipeline.stages (", shape.stages, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<PipeInstruction>> BuildStageSchedule(PipelineScheduleKind kind, const PipelineShape& shape,
                                                                int stage) {
  if (absl::Status valid = ValidatePipelineShape(kind, shape); !valid.ok()) return valid;
  if (stage < 0 || stage >= shape.stages) {
    return absl::InvalidArgumentError(absl::StrCat("stage ", stage, " of a ", shape.stages, "-stage pipeline"));
  }
  const int S = shape.stages;
  const int last_virtual = shape.virtual_count() - 1;
  const int next = (stage + 1) % S, previous = (stage + S - 1) % S;
  std::vector<PipeInstruction> stream;
  std::vector<PipeTransfer> pending;  // produced by the previous pass
  std::set<std::pair<bool, int>> headed;  // (send, peer): this step's header already exchanged
  // A first transfer's header (shape and dtype) goes just before the tensor
  // in the same exchange, on both sides: the receiver sized its buffer from
  // its own expectation and checks it against the header. A header in an
  // exchange of its own would deadlock (the sides' first transfers in each
  // direction fall in different exchanges).
  auto exchange = [&](std::vector<PipeTransfer> transfers) {
    if (transfers.empty()) return;
    std::vector<PipeTransfer> posted;
    for (const PipeTransfer& t : transfers) {
      if (headed.insert({t.send, t.peer}).second) {
        PipeTransfer header = t;
        header.header = true;
        posted.push_back(header);
      }
      posted.push_back(t);
    }
    stream.push_back(PipeInstruction{PipeOp::kExchange, -1, -1, std::move(posted)});
  };
  // Units: before each unit one exchange sends what the last unit produced
  // and receives what this one needs. With one chunk per rank a unit is one
  // pass (Megatron's send_forward_recv_backward: a forward's output leaves
  // as soon as it is computed). Interleaved, a steady unit is a
  // forward-backward pair (Megatron's send_forward_backward_recv_forward_
  // backward): one pass per unit deadlocks there (CheckSchedules finds it),
  // because the chunks' transfers between two ranks would be posted in
  // different orders on the two sides.
  const std::vector<Pass> order = ComputeOrder(kind, shape, stage);
  const int total = shape.micro_batches * shape.virtual_stages;
  const int warmup = WarmupPasses(kind, shape, stage);
  const bool pairs = kind == PipelineScheduleKind::kInterleaved;
  std::vector<std::vector<Pass>> units;
  for (size_t i = 0; i < order.size();) {
    const bool pair = pairs && static_cast<int>(i) >= warmup && static_cast<int>(i) < warmup + 2 * (total - warmup);
    units.emplace_back(order.begin() + i, order.begin() + i + (pair ? 2 : 1));
    i += pair ? 2 : 1;
  }
  for (const std::vector<Pass>& unit : units) {
    std::vector<PipeTransfer> batch = std::move(pending);
    pending.clear();
    for (const Pass& pass : unit) {
      const int virtual_stage = pass.chunk * S + stage;
      if (pass.forward && virtual_stage > 0) {
        batch.push_back({false, PipeTensor::kActivation, pass.micro_batch, virtual_stage, previous});
      } else if (!pass.forward && virtual_stage < last_virtual) {
        batch.push_back({false, PipeTensor::kGradient, pass.micro_batch, virtual_stage, next});
      }
    }
    exchange(std::move(batch));
    for (const Pass& pass : unit) {
      const int virtual_stage = pass.chunk * S + stage;
      stream.push_back(
          PipeInstruction{pass.forward ? PipeOp::kForward : PipeOp::kBackward, pass.micro_batch, pass.chunk, {}});
      if (pass.forward && virtual_stage < last_virtual) {
        pending.push_back({true, PipeTensor::kActivation, pass.micro_batch, virtual_stage + 1, next});
      } else if (!pass.forward && virtual_stage > 0) {
        pending.push_back({true, PipeTensor::kGradient, pass.micro_batch, virtual_stage - 1, previous});
      }
    }
  }
  exchange(std::move(pending));
  return stream;
}

absl::StatusOr<ScheduleCheck> CheckSchedules(PipelineScheduleKind kind, const PipelineShape& shape) {
  const int S = shape.stages;
  const int last_virtual = shape.virtual_count() - 1;
  std::vector<std::vector<PipeInstruction>> streams;
  for (int s = 0; s < S; ++s) {
    auto stream = BuildStageSchedule(kind, shape, s);
    if (!stream.ok()) return stream.status();
    streams.push_back(std::move(*stream));
  }
  std::vector<int> bounds;
  for (int s = 0; s < S; ++s) bounds.push_back(InFlightBound(kind, shape, s));
  return CheckStreams(shape, streams, bounds);
}

absl::StatusOr<ScheduleCheck> CheckStreams(const PipelineShape& shape,
                                           const std::vector<std::vector<PipeInstruction>>& streams,
                                           const std::vector<int>& in_flight_bound) {
  const int S = shape.stages;
  const int last_virtual = shape.virtual_count() - 1;
  if (static_cast<int>(streams.size()) != S || static_cast<int>(in_flight_bound.size()) != S) {
    return absl::InvalidArgumentError("one stream and one bound per stage");
  }
  ScheduleCheck check;
  check.peak_in_flight.assign(S, 0);
  check.in_flight_bound = in_flight_bound;
  // Per ordered pair of ranks, what each side posted, in order; the k-th send
  // pairs with the k-th receive.
  using Key = std::tuple<PipeTensor, int, int, bool>;  // tensor, micro-batch, virtual stage, header
  std::map<std::pair<int, int>, std::vector<Key>> sent, received;
  // When each listed transfer was posted, in model time.
  std::map<std::pair<int, int>, std::vector<double>> sent_at, received_at;
  std::vector<double> clock(S, 0.0);
  const double pass_time = 1.0 / shape.virtual_stages;
  std::vector<size_t> pc(S, 0);
  std::vector<bool> posted(S, false);
  // Per stage: (tensor, micro-batch, virtual stage) that arrived; forwards done; backwards done.
  std::vector<std::set<std::tuple<PipeTensor, int, int>>> arrived(S);
  std::vector<std::set<std::pair<int, int>>> forwarded(S), backwarded(S);
  // Where each posted transfer sits in its pair's list.
  std::vector<std::vector<size_t>> slots(S);
  auto where = [&](int s) {
    return absl::StrCat("stage ", s, " instruction ", pc[s], " (", DescribeInstruction(streams[s][pc[s]]), ")");
  };
  auto pair_of = [](int s, const PipeTransfer& t) {
    return t.send ? std::make_pair(s, t.peer) : std::make_pair(t.peer, s);
  };
  int remaining = S;
  while (remaining > 0) {
    bool progress = false;
    ++check.rounds;
    for (int s = 0; s < S; ++s) {
      if (pc[s] >= streams[s].size()) continue;
      const PipeInstruction& in = streams[s][pc[s]];
      const int virtual_stage = in.chunk * S + s;
      if (in.op == PipeOp::kForward) {
        if (virtual_stage > 0 && !arrived[s].count({PipeTensor::kActivation, in.micro_batch, virtual_stage})) {
          return absl::InternalError(absl::StrCat(where(s), ": its input activation has not arrived"));
        }
        if (!forwarded[s].insert({in.micro_batch, in.chunk}).second) {
          return absl::InternalError(absl::StrCat(where(s), ": a second forward of the same pass"));
        }
        clock[s] += pass_time;
        const int flight = static_cast<int>(forwarded[s].size() - backwarded[s].size());
        check.peak_in_flight[s] = std::max(check.peak_in_flight[s], flight);
        if (flight > check.in_flight_bound[s]) {
          return absl::InternalError(absl::StrCat(where(s), ": ", flight, " micro-batches in flight, bound ",
                                                  check.in_flight_bound[s]));
        }
      } else if (in.op == PipeOp::kBackward) {
        if (!forwarded[s].count({in.micro_batch, in.chunk})) {
          return absl::InternalError(absl::StrCat(where(s), ": backward before its forward"));
        }
        if (virtual_stage < last_virtual &&
            !arrived[s].count({PipeTensor::kGradient, in.micro_batch, virtual_stage})) {
          return absl::InternalError(absl::StrCat(where(s), ": its output gradient has not arrived"));
        }
        if (!backwarded[s].insert({in.micro_batch, in.chunk}).second) {
          return absl::InternalError(absl::StrCat(where(s), ": a second backward of the same pass"));
        }
        clock[s] += pass_time;
      } else if (!posted[s]) {
        slots[s].clear();
        for (const PipeTransfer& t : in.transfers) {
          auto& list = (t.send ? sent : received)[pair_of(s, t)];
          slots[s].push_back(list.size());
          list.push_back(Key{t.tensor, t.micro_batch, t.virtual_stage, t.header});
          (t.send ? sent_at : received_at)[pair_of(s, t)].push_back(clock[s]);
        }
        posted[s] = true;
        progress = true;
        continue;
      } else {
        // Complete once the other side of every transfer has posted it.
        bool complete = true;
        for (size_t i = 0; i < in.transfers.size(); ++i) {
          const PipeTransfer& t = in.transfers[i];
          const auto& mine = (t.send ? sent : received)[pair_of(s, t)];
          const auto& theirs = (t.send ? received : sent)[pair_of(s, t)];
          if (slots[s][i] >= theirs.size()) {
            complete = false;
            continue;
          }
          if (theirs[slots[s][i]] != mine[slots[s][i]]) {
            return absl::InternalError(absl::StrCat(where(s), ": transfer ", i, " pairs with a different tensor on stage ",
                                                    t.peer));
          }
        }
        if (!complete) continue;
        for (size_t i = 0; i < in.transfers.size(); ++i) {
          const PipeTransfer& t = in.transfers[i];
          if (!t.send && !t.header) arrived[s].insert({t.tensor, t.micro_batch, t.virtual_stage});
          // Done when the later side posted it.
          clock[s] = std::max(clock[s], (t.send ? received_at : sent_at)[pair_of(s, t)][slots[s][i]]);
        }
        posted[s] = false;
      }
      ++pc[s];
      progress = true;
      if (pc[s] == streams[s].size()) --remaining;
    }
    if (!progress) {
      std::vector<std::string> blocked;
      for (int s = 0; s < S; ++s) {
        if (pc[s] < streams[s].size()) blocked.push_back(where(s));
      }
      return absl::InternalError(absl::StrCat("deadlock: ", absl::StrJoin(blocked, "; ")));
    }
  }
  for (int s = 0; s < S; ++s) {
    const size_t passes = static_cast<size_t>(shape.micro_batches * shape.virtual_stages);
    if (forwarded[s].size() != passes || backwarded[s].size() != passes) {
      return absl::InternalError(absl::StrCat("stage ", s, " ran ", forwarded[s].size(), " forwards and ",
                                              backwarded[s].size(), " backwards of ", passes));
    }
  }
  check.makespan = *std::max_element(clock.begin(), clock.end());
  for (int s = 0; s < S; ++s) {
    const double busy = 2.0 * shape.micro_batches;  // M forwards and M backwards of a whole stage
    check.bubble.push_back(check.makespan > 0 ? 1.0 - busy / check.makespan : 0.0);
  }
  for (const auto& [pair, list] : sent) {
    if (received[pair].size() != list.size()) {
      return absl::InternalError(absl::StrCat("stage ", pair.first, " sent ", list.size(), " tensors to stage ",
                                              pair.second, ", which received ", received[pair].size()));
    }
  }
  return check;
}

double TheoreticalBubbleFraction(PipelineScheduleKind kind, const PipelineShape& shape) {
  (void)kind;  // GPipe and 1F1B idle alike; interleaving divides by v.
  const double idle = shape.stages - 1;
  return idle / (static_cast<double>(shape.virtual_stages) * shape.micro_batches + idle);
}

std::string DescribeInstruction(const PipeInstruction& instruction) {
  switch (instruction.op) {
    case PipeOp::kForward:
    case PipeOp::kBackward:
      return absl::StrCat(instruction.op == PipeOp::kForward ? "forward" : "backward", " micro-batch ",
                          instruction.micro_batch, " chunk ", instruction.chunk);
    case PipeOp::kExchange:
      break;
  }
  std::vector<std::string> parts;
  for (const PipeTransfer& t : instruction.transfers) {
    parts.push_back(absl::StrCat(t.send ? "send " : "receive ", TensorName(t.tensor), t.header ? " header" : "",
                                 " micro-batch ", t.micro_batch, " virtual stage ", t.virtual_stage,
                                 t.send ? " to stage " : " from stage ", t.peer));
  }
  return absl::StrCat("exchange [", absl::StrJoin(parts, ", "), "]");
}

}  // namespace dslaunch::runtime
