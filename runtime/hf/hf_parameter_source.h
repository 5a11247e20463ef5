// A Hugging Face folder's tensors as the values of deferred parameters (Note
// [Shard-only loading], runtime/model/deferred_parameters.h): each range a
// ZeRO-3 partition asks for is read from the file's memory mapping, only
// the rows it covers (under tensor parallelism, the rows of this rank's
// slice, SliceRows), so a rank touches about its own share of the folder.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/hf/hf_model_folder.h"
#include "runtime/model/deferred_parameters.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"

namespace dslaunch::runtime {

class HfParameterSource : public ParameterSource {
 public:
  // `folder` was checked against the module first (CheckHfWeights with the
  // same forms and tensor-parallel place); the source keeps it (and its
  // mappings) open.
  HfParameterSource(std::unique_ptr<HfModelFolder> folder, const std::vector<TensorParallelForm>& forms, int tp_rank,
                    int tp_size);

  absl::Status Read(const std::string& name, int64_t offset, torch::Tensor out) const override;

  // Bytes copied out of the folder's files so far (whole rows: a little more
  // than the elements asked for), and the bytes of all its tensors.
  int64_t bytes_read() const { return bytes_read_; }
  int64_t folder_bytes() const;
  const HfModelFolder& folder() const { return *folder_; }

 private:
  std::unique_ptr<HfModelFolder> folder_;
  std::map<std::string, TensorParallelForm> form_of_;
  int tp_rank_ = 0;
  int tp_size_ = 1;
  mutable int64_t bytes_read_ = 0;
};

}  // namespace dslaunch::runtime
