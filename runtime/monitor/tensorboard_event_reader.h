// Reads the scalar curves back from TensorBoard event files
// (Note [TensorBoard event files], tensorboard_event_file.h), as TensorBoard
// does: every record's length and data are checked against their CRCs, and
// a SessionLog START at step s drops what the run logged at or after s (a
// resumed attempt's steps replace the earlier attempt's). `dslaunch plot`
// draws a run's curves from these files when it has no csv_monitor files.
//
// A record cut short at the end of a file (the writer was killed mid-record)
// ends that file's reading, as in TensorBoard, and is counted; a CRC that
// does not match is an error naming the file and the record's offset.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

struct ScalarPoint {
  int64_t step = 0;
  double wall_time = 0;
  double value = 0;
};

struct TensorBoardScalars {
  std::map<std::string, std::vector<ScalarPoint>> by_tag;  // in the order logged, purges applied
  int files = 0;
  int torn_records = 0;  // files whose last record was cut short
};

// The files of one run (one folder), read in this order (their names, which
// start with the creation time, sort them).
absl::StatusOr<TensorBoardScalars> ReadTensorBoardScalars(const std::vector<std::string>& files);

}  // namespace dslaunch::runtime
