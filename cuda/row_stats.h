// Layer norms' (and RMSNorms') statistics of up to kRows rows at once, computed by a whole block: the fused ops that
// normalise their input in a prologue (cuda/linear.cu, cuda/lm_head.cu) stage the rows in shared memory on the way.
// Each row's statistics are computed by exactly the same operations whatever the other rows, so a batch gives every
// sequence the bits it gets alone.
#pragma once
#include <math.h>

#include "warp.h"

constexpr int kRowStatsLoads =
    4;  // row elements a thread has in flight per pass over the rows (at least one of each row)

struct RowStats {
  float mean;  // 0 for RMSNorm
  float rstd;  // 1 / sqrt(var + eps); RMSNorm: 1 / sqrt(mean(x^2) + eps)
};

// v[b] = the sum of v[b] over the block, to every thread, for every b < kRows at once (one pair of barriers):
// each row's sum is block_sum's (cuda/warp.h) tree. partial: __shared__ float[kRows][kWarpSize].
template <int kRows> __device__ __forceinline__ void block_sums(float (&v)[kRows], float (*partial)[kWarpSize]) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int n_warps = blockDim.x / kWarpSize;
#pragma unroll
  for (int b = 0; b < kRows; b++) {
    v[b] = warp_sum(v[b]);
    if (lane == 0) partial[b][warp] = v[b];
  }
  __syncthreads();
#pragma unroll
  for (int b = 0; b < kRows; b++) v[b] = warp_sum(lane < n_warps ? partial[b][lane] : 0.0f);
  __syncthreads();
}

// staged: (n, C) = rows [0, n) of x (n <= kRows, row stride C), each row's mean and 1 / sqrt(var + eps) to
// every thread in st[b] (kRms: mean 0 and 1 / sqrt(mean(x^2) + eps)). The rows are read once, through L2 (they are
// a predecessor's output), 4 / kRows elements of every row per thread at a time (at least one); the variance is
// that of the deviations (a second pass over the staged copy, each thread over the elements it staged).
// partial: __shared__ float[kRows][kWarpSize].
template <int kRows, bool kRms = false>
__device__ __forceinline__ void stage_rows_stats(RowStats (&st)[kRows], float* staged, const float* x, int n, int C,
                                                 float eps, float (*partial)[kWarpSize]) {
  constexpr int kBatch = kRows < kRowStatsLoads ? kRowStatsLoads / kRows : 1;
  const int threads = blockDim.x;
  float sum[kRows] = {};
  for (int base = threadIdx.x; base < C; base += kBatch * threads) {
    float v[kRows][kBatch];
#pragma unroll
    for (int b = 0; b < kRows; b++)
#pragma unroll
      for (int k = 0; k < kBatch; k++) {
        const int i = base + k * threads;
        v[b][k] = b < n && i < C ? __ldcg(x + (size_t)b * C + i) : 0.0f;
      }
#pragma unroll
    for (int b = 0; b < kRows; b++)
#pragma unroll
      for (int k = 0; k < kBatch; k++) {
        const int i = base + k * threads;
        if (b < n && i < C) staged[b * C + i] = v[b][k];
        if constexpr (!kRms) sum[b] += v[b][k];
      }
  }
  float mean[kRows] = {};
  if constexpr (!kRms) {
    block_sums<kRows>(sum, partial);
#pragma unroll
    for (int b = 0; b < kRows; b++) mean[b] = sum[b] / C;
  }
  float squares[kRows] = {};
  for (int i = threadIdx.x; i < C; i += threads)
#pragma unroll
    for (int b = 0; b < kRows; b++) {
      const float d = b < n ? staged[b * C + i] - mean[b] : 0.0f;
      squares[b] += d * d;
    }
  block_sums<kRows>(squares, partial);
#pragma unroll
  for (int b = 0; b < kRows; b++) st[b] = {mean[b], 1.0f / sqrtf(squares[b] / C + eps)};
}
