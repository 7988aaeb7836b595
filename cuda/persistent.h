// The persistent step kernel's host side (cuda/persistent.cu), for cu_graph_capture (cuda/runtime.cu).
#pragma once
#include <stddef.h>

#include "step_tasks.h"

// The grid barrier's counters in device memory, zero before the first launch; every launch leaves them zero.
struct StepBarrier {
  unsigned arrivals;    // blocks' arrivals from tasks so far
  unsigned departures;  // blocks done with the step: the last resets both
};

using StepKernel = void (*)(const StepTask*, int, StepBarrier*);

// Dependent L2 round trips of each round of a task after its first (virtual blocks beyond the resident ones): its
// loads, requested into L2 before the wait, its partial stored, its count.
constexpr int kStepLaterRoundL2Trips = 3;
// Blocks per SM the instantiation for weights and cache in `wdtype` and `rows` sequences is compiled for.
int persistent_min_blocks_per_sm(int wdtype, int rows);

// The instantiation a recorded step runs on, and its cooperative grid: every block the device holds at once.
struct StepLaunch {
  StepKernel kernel;
  size_t shared_bytes;
  int blocks;
  int n_tasks;
};

// Picks the instantiation for the recorded step's storage types and batch bucket and sizes its grid
// (cudaErrorNotSupported: no instantiation runs it).
cudaError_t persistent_step_prepare(const StepRecorder& recorded, StepLaunch* out);
// Device memory for the step: its tasks, then the barrier (zeroed by the caller).
size_t persistent_buffer_bytes(int n_tasks);
// Launches the step, its tasks uploaded to the start of device_buffer, as one cooperative launch on `stream`.
void persistent_step_launch(const StepLaunch& launch, void* device_buffer, cudaStream_t stream);
// The grid of the fp32 single-sequence step: the blocks its kernel keeps resident.
cudaError_t persistent_barrier_blocks(int* blocks);
// What the barrier probe runs n times in a row on the step's resident blocks: the step's grid barrier, or the
// sequentially consistent design (a __threadfence before the arrival, polls back to back); each with or without
// skewed arrivals; or (kSkewAlone) the skewed runs' spins with no barrier, to subtract.
struct BarrierProbe {
  enum Kind { kStep, kScFence, kSkewAlone } kind;
  bool skewed;
};
// Launches the probe on `blocks` blocks (at most persistent_barrier_blocks), as one cooperative launch on `stream`.
// `arrivals` must be zero.
cudaError_t persistent_barrier_launch(const BarrierProbe& probe, unsigned* arrivals, int n, int blocks,
                                      cudaStream_t stream);
