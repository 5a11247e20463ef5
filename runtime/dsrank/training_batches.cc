#include "runtime/dsrank/training_batches.h"

namespace dslaunch::runtime {
namespace {

torch::Tensor Upload(torch::Tensor host_int32, torch::Device device) {
  torch::Tensor t = host_int32.to(torch::kLong);
  // Pinned, the upload does not wait for the work already queued on the GPU.
  if (device.is_cuda()) t = t.pin_memory();
  return t.to(device, /*non_blocking=*/true);
}

class TextBatches : public TrainingBatches {
 public:
  explicit TextBatches(std::unique_ptr<GptSamples> samples) : samples_(std::move(samples)) {}

  // [rows, L+1] token ids → tokens [rows, L], targets [rows, L].
  TokenBatch Load(const std::vector<int64_t>& indices, torch::Device device, absl::Status* status) const override {
    const int width = samples_->tokens_per_sample();
    torch::Tensor tokens = torch::empty({static_cast<int64_t>(indices.size()), width}, torch::kInt);
    int32_t* data = tokens.data_ptr<int32_t>();
    for (size_t row = 0; row < indices.size(); ++row) {
      absl::Status read = samples_->GetSample(indices[row], data + row * width);
      if (!read.ok()) {
        *status = read;
        break;
      }
    }
    tokens = Upload(tokens, device);
    return TokenBatch{tokens.narrow(1, 0, width - 1), tokens.narrow(1, 1, width - 1)};
  }

 private:
  std::unique_ptr<GptSamples> samples_;
};

class InstructionBatches : public TrainingBatches {
 public:
  InstructionBatches(std::unique_ptr<InstructionSamples> samples, bool packed)
      : samples_(std::move(samples)), packed_(packed) {}

  TokenBatch Load(const std::vector<int64_t>& indices, torch::Device device, absl::Status* status) const override {
    const int64_t rows = static_cast<int64_t>(indices.size()), length = samples_->sequence_length();
    // One [4, rows, L] buffer: inputs, targets, positions, segments.
    torch::Tensor host = torch::empty({4, rows, length}, torch::kInt);
    int32_t* data = host.data_ptr<int32_t>();
    const int64_t plane = rows * length;
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t at = row * length;
      absl::Status read = samples_->GetSample(
          indices[row], {data + at, data + plane + at, data + 2 * plane + at, data + 3 * plane + at});
      if (!read.ok()) {
        *status = read;
        break;
      }
    }
    torch::Tensor all = Upload(host, device);
    TokenBatch batch{all[0], all[1]};
    if (packed_) {
      batch.positions = all[2];
      batch.segments = all[3];
    }
    return batch;
  }

 private:
  std::unique_ptr<InstructionSamples> samples_;
  const bool packed_;
};

}  // namespace

std::unique_ptr<TrainingBatches> TrainingBatches::Text(std::unique_ptr<GptSamples> samples) {
  return std::make_unique<TextBatches>(std::move(samples));
}

std::unique_ptr<TrainingBatches> TrainingBatches::Instructions(std::unique_ptr<InstructionSamples> samples,
                                                               bool packed) {
  return std::make_unique<InstructionBatches>(std::move(samples), packed);
}

}  // namespace dslaunch::runtime
