// Reductions across the blocks of one launch, without a second launch: every block of a group writes its
// partial result to scratch and counts itself in on the group's counter; the last block of the group to
// arrive merges the group's partials in a fixed order (so the result is the same whichever block came last)
// and resets the counter to zero for the next launch.
#pragma once
#include "device_counter.h"

constexpr int kMaxGridCounters = 4096;  // arrival counters at the start of an op's partials buffer (cuda/ops.h)

// The partials buffer (op_partials_bytes) as the merging kernels use it: kMaxGridCounters arrival counters
// (zero before every launch, left zero by every launch), then room for the blocks' partial results.
struct OpScratch {
  unsigned* counters;
  float* partials;
};
inline OpScratch op_scratch(float* buffer) { return {reinterpret_cast<unsigned*>(buffer), buffer + kMaxGridCounters}; }
inline size_t op_scratch_bytes(size_t partial_bytes) { return kMaxGridCounters * sizeof(unsigned) + partial_bytes; }
// Bytes of partial results a matvec of at most max_rows rows with C <= max_in and OC <= max_out leaves
// (cuda/linear.cu); op_partials_bytes (cuda/lm_head.cu) takes the largest of the merging ops'.
size_t matvec_partials_bytes(int max_rows, int max_in, int max_out);

// Counts this block in on `counter`, one of `group_blocks` blocks; true in the last block of the group to
// arrive, which then also resets the counter. Every thread of the (one-dimensional) block calls it; is_last
// points to __shared__ memory. Thread 0's acq_rel count releases the block's partials (written before the
// __syncthreads) and, in the last block, acquires every other block's: each count reads the one before it.
__device__ __forceinline__ bool arrive_last(unsigned* counter, unsigned group_blocks, bool* is_last) {
  __syncthreads();
  if (threadIdx.x == 0) {
    DeviceCounter count(*counter);
    *is_last = count.fetch_add(1u, cuda::std::memory_order_acq_rel) + 1 == group_blocks;
    // every block of the group has counted: the next launch (or task, after the grid barrier's release) starts from
    // zero
    if (*is_last) count.store(0u, cuda::std::memory_order_relaxed);
  }
#ifndef PLANT_MISSING_BARRIER  // planted for test/kernels.emu.test.ts: threads may read is_last before it is set
  __syncthreads();
#endif
  return *is_last;
}
