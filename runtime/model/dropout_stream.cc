#include "runtime/model/dropout_stream.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <utility>

#include "common/seed_mix.h"

namespace dslaunch::runtime {
namespace {

void SetSeed(at::Generator& generator, uint64_t seed) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(seed);
}

}  // namespace

DropoutStream::DropoutStream(uint64_t seed)
    : seed_(seed), step_seed_(MixSeed(seed)), cpu_(at::make_generator<at::CPUGeneratorImpl>(step_seed_)) {}

uint64_t DropoutStream::ReplicaSeed(uint64_t job_seed, int64_t data_parallel_rank) {
  return MixSeed(job_seed ^ MixSeed(static_cast<uint64_t>(data_parallel_rank)));
}

void DropoutStream::Reseed(uint64_t seed) {
  seed_ = seed;
  StartStep(0);
}

void DropoutStream::StartStep(int64_t step) {
  step_seed_ = step == 0 ? MixSeed(seed_) : MixSeed(seed_ ^ MixSeed(static_cast<uint64_t>(step)));
  cpu_stale_ = true;
  cuda_seeded_device_ = -1;
}

at::Generator DropoutStream::Prepared(const torch::Device& device) {
  if (device.is_cpu()) {
    if (cpu_stale_) SetSeed(cpu_, step_seed_);
    cpu_stale_ = false;
    return cpu_;
  }
  at::Generator generator = at::globalContext().defaultGenerator(device);
  if (device.is_cuda() && cuda_seeded_device_ != device.index()) {
    SetSeed(generator, step_seed_);
    cuda_seeded_device_ = device.index();
  }
  return generator;
}

std::vector<at::Generator> DropoutStream::Generators(const torch::Device& device) { return {Prepared(device)}; }

torch::Tensor DropoutStream::Apply(const torch::Tensor& x, double p, bool training) {
  if (!training || p == 0) return x;
  at::Generator generator = Prepared(x.device());
  // LibTorch's fused kernel on CUDA (it draws from the generator just
  // prepared); on the CPU what torch::dropout computes, from our generator.
  if (!x.is_cpu()) return torch::dropout(x, p, /*train=*/true);
  return x * at::empty_like(x).bernoulli_(1 - p, generator).div_(1 - p);
}

torch::Tensor DropoutStream::ApplyInRegion(const torch::Tensor& x, double p, bool training,
                                           const TensorParallelGroup& group) {
  if (!group.split() || !group.sequence_parallel) return Apply(x, p, training);
  return ApplyToPart(x, p, training, /*dim=*/1, group.size, group.rank);
}

torch::Tensor DropoutStream::ApplyToPart(const torch::Tensor& x, double p, bool training, int64_t dim,
                                         int64_t parts, int64_t index) {
  if (parts == 1) return Apply(x, p, training);
  if (!training || p == 0) return x;
  TORCH_CHECK(index >= 0 && index < parts, "dropout part ", index, " of ", parts);
  dim = dim < 0 ? dim + x.dim() : dim;
  std::vector<int64_t> whole = x.sizes().vec();
  const int64_t part = whole.at(dim);
  whole[dim] = part * parts;
  at::Generator generator = Prepared(x.device());
  torch::Tensor mask = x.is_cpu() ? at::empty(whole, x.options()).bernoulli_(1 - p, generator).div_(1 - p)
                                  : torch::dropout(torch::ones(whole, x.options()), p, /*train=*/true);
  return x * mask.narrow(dim, index * part, part);
}

RandomStateSnapshot::RandomStateSnapshot(std::vector<at::Generator> generators) : generators_(std::move(generators)) {
  for (at::Generator& generator : generators_) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    states_.push_back(generator.get_state());
  }
}

RandomStateSnapshot RandomStateSnapshot::Swap() const {
  RandomStateSnapshot now(generators_);
  for (size_t i = 0; i < generators_.size(); ++i) {
    at::Generator generator = generators_[i];
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(states_[i]);
  }
  return now;
}

std::vector<at::Generator> SegmentGenerators(const torch::Device& device, DropoutStream* stream) {
  // The CPU's always: what draws there (routing noise) draws there for a
  // segment on any device.
  std::vector<at::Generator> generators = {at::detail::getDefaultCPUGenerator()};
  auto add = [&](const at::Generator& generator) {
    for (const at::Generator& held : generators) {
      if (held.unsafeGetGeneratorImpl() == generator.unsafeGetGeneratorImpl()) return;
    }
    generators.push_back(generator);
  };
  if (!device.is_cpu()) add(at::globalContext().defaultGenerator(device));
  if (stream != nullptr) {
    for (const at::Generator& own : stream->Generators(device)) add(own);
  }
  return generators;
}

}  // namespace dslaunch::runtime
