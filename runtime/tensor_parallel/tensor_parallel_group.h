// This rank's tensor-parallel group as the layers see it (Note [Tensor
// parallelism]): the communicator (null with one member), this rank's index
// in it, its size, whether activations outside the matrix products are
// split along the sequence (sequence parallelism), and the worker thread
// that reduces input gradients while backward goes on (Note [Overlapped
// input-gradient reduction]).
//
// Note [Tensor parallelism]
// Megatron's scheme (REFERENCE.md, "Tensor parallelism"). A column-parallel
// linear holds rows [r·O/T, (r+1)·O/T) of its weight (each fused part split
// on its own) and computes its slice of the output from the whole input; a
// row-parallel linear holds columns [r·I/T, (r+1)·I/T) and its partial
// outputs are summed across the group, its bias added after the sum. An
// attention block is a column-parallel q/k/v (each rank its heads) and a
// row-parallel output projection; an MLP a column-parallel up projection and
// a row-parallel down projection. Between them the activations are whole and
// equal on every rank. The autograd functions of tensor_parallel_ops.h put
// the two collectives in: the input of a column-parallel region is copied
// forward and its gradient all-reduced backward; the output of a row-
// parallel region is all-reduced forward and its gradient copied backward.
// The vocabulary is split into contiguous ranges, padded to a multiple of
// T·divisor (PaddedVocabSize); the loss never gathers the logits
// (vocab_parallel.h).
//
// With sequence parallelism the whole-activation regions (norms, residual
// adds, dropout) hold only this rank's time steps [r·S/T, (r+1)·S/T): the
// copy becomes an all-gather along the sequence and the all-reduce a
// reduce-scatter. The norms' weights then see only part of the sequence,
// so their gradients are partial sums, all-reduced across the group by
// SequenceRegionParameter on the weight itself.
//
// A parameter is either split (its TensorParallelForm) or replicated; every
// replicated parameter ends backward with the same gradient on every rank of
// the group, so a gradient norm counts it once (on tensor rank 0).
#pragma once

#include <memory>

#include "runtime/comm/comm_worker.h"
#include "runtime/comm/communicator.h"

namespace dslaunch::runtime {

struct TensorParallelGroup {
  Communicator* comm = nullptr;  // null: one member (then every collective is the identity)
  int rank = 0;
  int size = 1;
  bool sequence_parallel = false;
  // Present in training: the group's input-gradient reductions overlap the
  // weight gradients' products (ColumnParallelProduct), on this worker's
  // thread on the CPU (on a side stream queued by autograd's thread on a
  // GPU); null: they run inline. One per rank's group: copies of the group
  // share it. Only this thread and autograd's use `comm`, never both at once
  // (a reduction is waited for before its autograd step returns). Errors
  // reach the reduction that waits for its ticket; nobody drains it.
  std::shared_ptr<CommWorker> worker = nullptr;

  bool split() const { return size > 1; }
};

}  // namespace dslaunch::runtime
