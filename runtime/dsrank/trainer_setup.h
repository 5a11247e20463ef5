// dsrank's training setup before the engines: the data, the model's spec,
// a Hugging Face folder's weights, LoRA and the exports the job asks for
// (what TrainGpt, gpt_trainer.h, runs first).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/config/job_config.h"
#include "runtime/data/indexed_dataset.h"
#include "runtime/data/instruction_dataset.h"
#include "runtime/dsrank/gpt_trainer.h"
#include "runtime/dsrank/training_batches.h"
#include "runtime/hf/hf_export.h"
#include "runtime/hf/hf_model_folder.h"
#include "runtime/hf/hf_parameter_source.h"
#include "runtime/model/lora.h"
#include "runtime/model/model_registry.h"

namespace dslaunch::runtime {

// The job's dataset, split into training and held-out documents (the last
// data.validation_fraction of them), and the batches read from each.
struct TrainingData {
  std::unique_ptr<IndexedDataset> text;              // a text job's
  std::unique_ptr<InstructionDataset> instructions;  // an instruction job's
  int64_t vocab = 0;                                 // model.vocab_size, else the dataset's
  std::unique_ptr<TrainingBatches> train;
  std::unique_ptr<TrainingBatches> eval;  // null: no evaluation
};
absl::StatusOr<TrainingData> OpenTrainingData(const JobConfig& job, const TrainerContext& context);

// The model's spec from the job: sizes, activation checkpointing, fused
// kernels, this rank's tensor slices and experts. Refuses (naming the key)
// what the model cannot be built with.
absl::StatusOr<ModelSpec> TrainingModelSpec(const JobConfig& job, const TrainerContext& context, int64_t vocab);

// model.from's weights into `built`: under tensor parallelism this rank's
// slices, under expert parallelism this rank's experts; returns null (the
// folder is closed). A model built with deferred parameters
// (spec.deferred_parameters, Note [Shard-only loading]) is only checked
// against the folder, which comes back as the source the ZeRO-3 engine
// reads this rank's pieces from.
absl::StatusOr<std::unique_ptr<HfParameterSource>> LoadPretrainedWeights(std::unique_ptr<HfModelFolder> folder,
                                                                         const BuiltModel& built,
                                                                         const ModelSpec& spec, const JobConfig& job,
                                                                         const TrainerContext& context);

// lora.r > 0: adapters on the targeted projections, the rest frozen (Note
// [LoRA]); export.hf_dir and export.adapter_dir: where and how the job's
// end writes them (empty folders: not asked for).
struct TrainingExports {
  LoraSettings lora;
  HfExportOptions model;
  HfExportOptions adapter;
};
absl::StatusOr<TrainingExports> ApplyLoraAndPlanExports(const JobConfig& job, const TrainerContext& context,
                                                         const BuiltModel& built);

}  // namespace dslaunch::runtime
