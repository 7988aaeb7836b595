// op_lm_head: logits of the last row against the tied embedding; op_argmax: greedy next token.
#include <limits.h>
#include <math.h>

#include "launch.h"
#include "ops.h"
#include "warp.h"

constexpr int kLmHeadThreads = 256;
constexpr int kLmHeadWarps = kLmHeadThreads / kWarpSize;
constexpr int kArgmaxThreads = 1024;
constexpr int kArgmaxWarps = kArgmaxThreads / kWarpSize;
static_assert(kArgmaxWarps == kWarpSize, "argmax_kernel's second stage is one warp reading one value per warp");

// logits: (V) = x (C) @ wte (V, C)^T    x = inp[T - 1]
// grid: (ceil(V / kLmHeadWarps))  block: (kLmHeadThreads); one warp per vocab row, lanes stride the row
// (n_vec4 float4, then the scalar tail), so each warp reads its row as contiguous 512-byte segments.
__global__ void __launch_bounds__(kLmHeadThreads)
    lm_head_kernel(float* __restrict__ logits, const float* __restrict__ x, const float* __restrict__ wte, int C, int V,
                   int n_vec4) {
  const int row = blockIdx.x * kLmHeadWarps + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= V) return;  // whole warps only: no collective below is left short of lanes
  const float* w = wte + (size_t)row * C;
  float acc = 0.0f;
#pragma unroll 4
  for (int i = lane; i < n_vec4; i += kWarpSize) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(x) + i);
    const float4 b = __ldg(reinterpret_cast<const float4*>(w) + i);
    acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
  }
  for (int i = n_vec4 * kVecWidth + lane; i < C; i += kWarpSize) acc += __ldg(x + i) * __ldg(w + i);
  acc = warp_sum(acc);
  if (lane == 0) logits[row] = acc;
}

// Is (value, index) a better argmax candidate than (best, best_index)? Larger wins, then the lower index.
__device__ __forceinline__ bool argmax_better(float value, int index, float best, int best_index) {
  return value > best || (value == best && index < best_index);
}

__device__ __forceinline__ void warp_argmax(float& best, int& best_index) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(kFullWarpMask, best, offset);
    const int other_index = __shfl_xor_sync(kFullWarpMask, best_index, offset);
    if (argmax_better(other, other_index, best, best_index)) best = other, best_index = other_index;
  }
}

// seq: (max_ctx + 1)  state: (STATE_INTS)  logits: (V)
// grid: (1)  block: (kArgmaxThreads); strided scan, warp then block reduction, thread 0 writes.
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(int* __restrict__ seq, int* __restrict__ state, const float* __restrict__ logits, int V, int T,
                  int max_ctx) {
  __shared__ float warp_best[kArgmaxWarps];
  __shared__ int warp_best_index[kArgmaxWarps];
  float best = -INFINITY;
  int best_index = INT_MAX;  // loses every tie, so an all -inf row still yields index 0
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    if (argmax_better(logits[i], i, best, best_index)) best = logits[i], best_index = i;
  warp_argmax(best, best_index);
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  if (lane == 0) warp_best[warp] = best, warp_best_index[warp] = best_index;
  __syncthreads();
  if (warp != 0) return;
  best = warp_best[lane];
  best_index = warp_best_index[lane];
  warp_argmax(best, best_index);
  if (lane != 0) return;
  const int pos = state[STATE_POS];
  if (pos + T <= max_ctx) seq[pos + T] = best_index == INT_MAX ? 0 : best_index;  // INT_MAX: every logit NaN
  state[STATE_POS] = pos + T;
}

extern "C" void op_lm_head(float* logits, const float* inp, const float* wte, int T, int C, int V) {
  const float* x = inp + (size_t)(T - 1) * C;
  const int n_vec4 = row_vec4_count(C, x, wte);
  LAUNCH(lm_head_kernel, ceil_div(V, kLmHeadWarps), kLmHeadThreads, logits, x, wte, C, V, n_vec4);
}

extern "C" void op_argmax(int* seq, int* state, const float* logits, int V, int T, int max_ctx) {
  LAUNCH(argmax_kernel, 1, kArgmaxThreads, seq, state, logits, V, T, max_ctx);
}
