// A layer norm's statistics of one row, computed by a whole block: the fused ops that normalise their input
// in a prologue (cuda/linear.cu, cuda/lm_head.cu) stage the row in shared memory on the way.
#pragma once
#include <math.h>

#include "warp.h"

constexpr int kRowStatsBatch = 4;  // row elements each thread has in flight per pass over the row

struct RowStats {
  float mean;
  float rstd;  // 1 / sqrt(var + eps)
};

// row_shared: (C) = row, the row's mean and 1/sqrt(var + eps) to every thread; the row is read once, through L2
// (it is a predecessor's output), 4 elements per thread at a time; the variance is that of the deviations (two
// passes over the staged copy, each thread over the elements it staged). partial: __shared__ float[kWarpSize].
__device__ __forceinline__ RowStats stage_row_stats(float* row_shared, const float* row, int C, float eps, float* partial) {
  const int threads = blockDim.x;
  float sum = 0.0f;
  for (int base = threadIdx.x; base < C; base += kRowStatsBatch * threads) {
    float v[kRowStatsBatch];
#pragma unroll
    for (int k = 0; k < kRowStatsBatch; k++) v[k] = base + k * threads < C ? __ldcg(row + base + k * threads) : 0.0f;
#pragma unroll
    for (int k = 0; k < kRowStatsBatch; k++) {
      if (base + k * threads < C) row_shared[base + k * threads] = v[k];
      sum += v[k];
    }
  }
  const float mean = block_sum(sum, partial) / C;
  float squares = 0.0f;
  for (int i = threadIdx.x; i < C; i += threads) {
    const float d = row_shared[i] - mean;
    squares += d * d;
  }
  return {mean, 1.0f / sqrtf(block_sum(squares, partial) / C + eps)};
}
