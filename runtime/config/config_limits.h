// Upper bounds of a job file's and a ds_config's sizes, checked when the file
// is loaded (dslaunch --validate, dslaunch before any rank starts, and dsrank),
// so that a typo such as `layers: 1000000000` is an error naming the key, not
// ranks that abort allocating. Far above any model trained today; the table of
// every input bound is in docs/inputs.md (keep it in step).
#pragma once

#include <cstdint>

namespace dslaunch::runtime {

// model.*
inline constexpr int kMaxModelLayers = 1024;
inline constexpr int kMaxModelHeads = 1024;
inline constexpr int kMaxModelWidth = 65536;
inline constexpr int kMaxSequenceLength = 1 << 20;  // 1,048,576 tokens
inline constexpr int kMaxVocabularySize = 1 << 21;  // 2,097,152 symbols (model.vocab_size, data.tokenizer_vocab_size)

// The parameters the dimensions above imply (GPT: 12·width² + 13·width per
// layer, token and position embeddings, the final norm): 16 bytes each with
// fp32 weights, gradients and Adam's two moments, so 1e12 parameters are 16 TB
// of training state across all ranks.
inline constexpr double kMaxModelParameters = 1e12;

// Batch sizes, in samples: train.micro_batch_size and the ds_config's
// train_micro_batch_size_per_gpu; train.global_batch_size and
// train_batch_size; gradient_accumulation_steps.
inline constexpr int64_t kMaxMicroBatchSize = 65536;
inline constexpr int64_t kMaxGlobalBatchSize = int64_t{1} << 26;  // 67,108,864
inline constexpr int64_t kMaxGradientAccumulationSteps = int64_t{1} << 20;

// Tokens of one rank's micro-batch (micro-batch x model.sequence_length): what
// one forward pass holds activations for.
inline constexpr int64_t kMaxTokensPerMicroBatch = int64_t{1} << 24;  // 16,777,216

}  // namespace dslaunch::runtime
