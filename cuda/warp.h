// Warp and block reductions shared by the kernels (warp shuffles; block reductions through shared memory).
#pragma once

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarpMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullWarpMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullWarpMask, v, offset));
  return v;
}

// Sum over the block, returned to every thread. blockDim.x: a multiple of 32 (y = z = 1);
// partial: __shared__ float[kWarpSize]. Ends with a barrier so `partial` can be reused at once.
__device__ __forceinline__ float block_sum(float v, float* partial) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int n_warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = warp_sum(lane < n_warps ? partial[lane] : 0.0f);
  __syncthreads();
  return v;
}
