#include "runtime/topology/process_topology.h"

#include <array>
#include <cassert>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace {

constexpr std::array<Axis, 3> kAxisOrder = {Axis::kPipe, Axis::kData, Axis::kModel};

int& CoordOn(ProcessCoord& coord, Axis axis) {
  switch (axis) {
    case Axis::kPipe:
      return coord.pipe;
    case Axis::kData:
      return coord.data;
    case Axis::kModel:
      break;
  }
  return coord.model;
}

int CoordOn(const ProcessCoord& coord, Axis axis) {
  switch (axis) {
    case Axis::kPipe:
      return coord.pipe;
    case Axis::kData:
      return coord.data;
    case Axis::kModel:
      break;
  }
  return coord.model;
}

}  // namespace

const char* AxisName(Axis axis) {
  switch (axis) {
    case Axis::kPipe:
      return "pipe";
    case Axis::kData:
      return "data";
    case Axis::kModel:
      break;
  }
  return "model";
}

absl::StatusOr<ProcessTopology> ProcessTopology::Create(int pipe, int data, int model) {
  std::string problems;
  const std::array<std::pair<Axis, int>, 3> sizes = {
      {{Axis::kPipe, pipe}, {Axis::kData, data}, {Axis::kModel, model}}};
  for (const auto& [axis, value] : sizes) {
    if (value <= 0) {
      absl::StrAppend(&problems, problems.empty() ? "" : "; ", AxisName(axis),
                      " size must be positive, got ", value);
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("process topology: ", problems));
  }
  return ProcessTopology(pipe, data, model);
}

absl::StatusOr<ProcessTopology> ProcessTopology::FromWorld(int world_size, int tp_size,
                                                           int pp_size) {
  if (world_size <= 0 || tp_size <= 0 || pp_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("process topology: world_size=", world_size, ", tp_size=", tp_size,
                     " and pp_size=", pp_size, " must all be positive"));
  }
  // int64: tp * pp of two large ints must not wrap.
  const int64_t model_pipe = static_cast<int64_t>(tp_size) * pp_size;
  if (world_size % model_pipe != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "process topology: world_size=", world_size, " is not divisible by tp_size=", tp_size,
        " * pp_size=", pp_size, " (=", model_pipe, ")"));
  }
  return Create(pp_size, static_cast<int>(world_size / model_pipe), tp_size);
}

int ProcessTopology::size(Axis axis) const {
  switch (axis) {
    case Axis::kPipe:
      return pipe_;
    case Axis::kData:
      return data_;
    case Axis::kModel:
      break;
  }
  return model_;
}

bool ProcessTopology::ContainsCoord(const ProcessCoord& coord) const {
  return coord.pipe >= 0 && coord.pipe < pipe_ && coord.data >= 0 && coord.data < data_ &&
         coord.model >= 0 && coord.model < model_;
}

ProcessCoord ProcessTopology::Coordinate(int rank) const {
  assert(ContainsRank(rank));
  ProcessCoord coord;
  coord.model = rank % model_;
  coord.data = (rank / model_) % data_;
  coord.pipe = rank / (model_ * data_);
  return coord;
}

int ProcessTopology::RankOf(const ProcessCoord& coord) const {
  assert(ContainsCoord(coord));
  return (coord.pipe * data_ + coord.data) * model_ + coord.model;
}

std::vector<std::vector<int>> ProcessTopology::Groups(Axis axis) const {
  // The two other axes, outer first (DeepSpeed iterates their cartesian
  // product in axis order).
  std::array<Axis, 2> others{};
  int n = 0;
  for (Axis a : kAxisOrder) {
    if (a != axis) others[n++] = a;
  }
  std::vector<std::vector<int>> groups;
  groups.reserve(static_cast<size_t>(size(others[0])) * size(others[1]));
  ProcessCoord coord;
  for (int outer = 0; outer < size(others[0]); ++outer) {
    for (int inner = 0; inner < size(others[1]); ++inner) {
      CoordOn(coord, others[0]) = outer;
      CoordOn(coord, others[1]) = inner;
      std::vector<int> group;
      group.reserve(size(axis));
      for (int i = 0; i < size(axis); ++i) {
        CoordOn(coord, axis) = i;
        group.push_back(RankOf(coord));
      }
      groups.push_back(std::move(group));
    }
  }
  return groups;
}

std::vector<std::vector<int>> ProcessTopology::ModelPipeGroups() const {
  std::vector<std::vector<int>> groups(data_);
  for (int rank = 0; rank < world_size(); ++rank) {
    groups[Coordinate(rank).data].push_back(rank);  // ascending by construction
  }
  return groups;
}

std::vector<int> ProcessTopology::GroupOf(int rank, Axis axis) const {
  assert(ContainsRank(rank));
  ProcessCoord coord = Coordinate(rank);
  std::vector<int> group;
  group.reserve(size(axis));
  for (int i = 0; i < size(axis); ++i) {
    CoordOn(coord, axis) = i;
    group.push_back(RankOf(coord));
  }
  return group;
}

int ProcessTopology::IndexInGroup(int rank, Axis axis) const {
  assert(ContainsRank(rank));
  return CoordOn(Coordinate(rank), axis);
}

std::vector<int> ProcessTopology::ModelPipeGroupOf(int rank) const {
  assert(ContainsRank(rank));
  const int data = Coordinate(rank).data;
  std::vector<int> group;
  group.reserve(pipe_ * model_);
  for (int pipe = 0; pipe < pipe_; ++pipe) {
    for (int model = 0; model < model_; ++model) {
      group.push_back(RankOf({pipe, data, model}));
    }
  }
  return group;
}

std::string ProcessTopology::ToString() const {
  return absl::StrCat("pipe=", pipe_, " data=", data_, " model=", model_);
}

}  // namespace dslaunch::runtime
